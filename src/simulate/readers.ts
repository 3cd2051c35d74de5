import { createReadStream } from 'node:fs'
import { open } from 'node:fs/promises'
import { createInterface } from 'node:readline'
import type { Readable } from 'node:stream'
import { createGunzip } from 'node:zlib'
import { type Trace, TraceBuilder } from './trace.js'

/**
 * Access-log readers: nginx/Apache combined, JSON lines and CSV, gzipped or not (told by the
 * magic bytes, not the name), read as a stream line by line, so a log of any size is read once
 * into a {@link Trace}. A line that cannot be read is counted and reported by its number, never
 * dropped silently.
 */
export type LogFormat = 'combined' | 'jsonl' | 'csv'

export const LOG_FORMATS: readonly LogFormat[] = ['combined', 'jsonl', 'csv']

/** Options of {@link readLog}. */
export interface ReadLogOptions {
  /** The format; detected from the first line that is not blank when not given. */
  readonly format?: LogFormat
  /** JSON lines and CSV: the field holding the time (dots reach into objects). @default "time" */
  readonly timeField?: string
  /**
   * The field holding the key. JSON lines and CSV: a field name (dots reach into objects),
   * default "key". Combined: `ip` (the client address, the default) or `user`.
   */
  readonly keyField?: string
  /** Called every so many lines with the lines read. */
  readonly progress?: (lines: number) => void
}

/** A line that could not be read. */
export interface BadLine {
  readonly line: number
  readonly reason: string
}

/** What reading a log gives. */
export interface LogRead {
  readonly trace: Trace
  readonly format: LogFormat
  /** Lines read, blank ones included. */
  readonly lines: number
  /** Lines that could not be read. */
  readonly badLines: number
  /** The first bad lines (at most 20), with their reasons. */
  readonly firstBad: readonly BadLine[]
}

/** An input that gives no requests at all: an empty log, or one where no line has a key. */
export class EmptyLogError extends Error {
  constructor(message: string) {
    super(message)
    this.name = 'EmptyLogError'
  }
}

const MAX_REPORTED = 20
const GZIP_MAGIC = [0x1f, 0x8b]

// host ident user [time] "request" status bytes ...
const COMBINED = /^(\S+) \S+ (\S+) \[([^\]]+)\] "/
const MONTHS: Record<string, number> = { Jan: 0, Feb: 1, Mar: 2, Apr: 3, May: 4, Jun: 5, Jul: 6, Aug: 7, Sep: 8, Oct: 9, Nov: 10, Dec: 11 }
const CLF_TIME = /^(\d{2})\/(\w{3})\/(\d{4}):(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))? ([+-])(\d{2})(\d{2})$/

/** `10/Oct/2000:13:55:36 -0700` (the combined log's time) as epoch ms, NaN when malformed. */
export function parseClfTime(text: string): number {
  const m = CLF_TIME.exec(text)
  if (m === null) return Number.NaN
  const month = MONTHS[m[2] as string]
  if (month === undefined) return Number.NaN
  const utc = Date.UTC(Number(m[3]), month, Number(m[1]), Number(m[4]), Number(m[5]), Number(m[6]))
  const fraction = m[7] === undefined ? 0 : Number(`0.${m[7]}`) * 1000
  const offset = (Number(m[9]) * 60 + Number(m[10])) * 60_000 * (m[8] === '-' ? -1 : 1)
  return utc + fraction - offset
}

/**
 * A time field's value as epoch ms: a number is epoch seconds (below 1e11) or ms; a string is
 * such a number, an ISO 8601 date or a combined-log time. NaN when none of those.
 */
export function parseTimeValue(value: unknown): number {
  if (typeof value === 'number') return Number.isFinite(value) ? (Math.abs(value) < 1e11 ? value * 1000 : value) : Number.NaN
  if (typeof value !== 'string' || value.length === 0) return Number.NaN
  const trimmed = value.trim()
  if (/^-?\d+(\.\d+)?$/.test(trimmed)) return parseTimeValue(Number(trimmed))
  const clf = parseClfTime(trimmed.replace(/^\[|\]$/g, ''))
  if (!Number.isNaN(clf)) return clf
  return Date.parse(trimmed)
}

/** The format of a log from its first line that is not blank. */
export function detectFormat(line: string): LogFormat {
  const text = line.trimStart()
  if (text.startsWith('{')) return 'jsonl'
  if (COMBINED.test(text)) return 'combined'
  return 'csv'
}

function field(record: unknown, path: string): unknown {
  let value = record
  for (const part of path.split('.')) {
    if (typeof value !== 'object' || value === null) return undefined
    value = (value as Record<string, unknown>)[part]
  }
  return value
}

/** Splits one CSV line (RFC 4180 quoting; a field spanning lines is not supported). */
export function splitCsv(line: string): string[] | undefined {
  const out: string[] = []
  let i = 0
  for (;;) {
    if (line[i] === '"') {
      let value = ''
      i++
      for (;;) {
        const q = line.indexOf('"', i)
        if (q < 0) return undefined
        value += line.slice(i, q)
        if (line[q + 1] === '"') {
          value += '"'
          i = q + 2
        } else {
          i = q + 1
          break
        }
      }
      out.push(value)
      if (i === line.length) return out
      if (line[i] !== ',') return undefined
      i++
    } else {
      const comma = line.indexOf(',', i)
      if (comma < 0) {
        out.push(line.slice(i))
        return out
      }
      out.push(line.slice(i, comma))
      i = comma + 1
    }
  }
}

/** Opens `path` as a stream of text, gunzipped when its first bytes are gzip's. */
async function openText(path: string): Promise<Readable> {
  const handle = await open(path, 'r')
  const head = Buffer.alloc(2)
  try {
    await handle.read(head, 0, 2, 0)
  } finally {
    await handle.close()
  }
  const raw = createReadStream(path)
  if (head[0] === GZIP_MAGIC[0] && head[1] === GZIP_MAGIC[1]) return raw.pipe(createGunzip())
  return raw
}

/** Reads the access log at `path` (see {@link ReadLogOptions}). Throws EmptyLogError when nothing is read. */
export async function readLog(path: string, options: ReadLogOptions = {}): Promise<LogRead> {
  const stream = await openText(path)
  const lines = createInterface({ input: stream, crlfDelay: Number.POSITIVE_INFINITY })
  const builder = new TraceBuilder()
  const timeField = options.timeField ?? 'time'
  let format = options.format
  let keyField = options.keyField ?? 'key'
  let lineNo = 0
  let badLines = 0
  const firstBad: BadLine[] = []
  let header: string[] | undefined
  let timeColumn = -1
  let keyColumn = -1
  const bad = (reason: string) => {
    badLines++
    if (firstBad.length < MAX_REPORTED) firstBad.push({ line: lineNo, reason })
  }
  const streamError = new Promise<never>((_, reject) => stream.once('error', reject))
  streamError.catch(() => undefined)
  const read = async () => {
    for await (const line of lines) {
      lineNo++
      if (options.progress !== undefined && lineNo % 65_536 === 0) options.progress(lineNo)
      if (line.trim().length === 0) continue
      if (format === undefined) format = detectFormat(line)
      if (format === 'combined') {
        keyField = options.keyField ?? 'ip'
        if (keyField !== 'ip' && keyField !== 'user')
          throw new RangeError(`--key-field must be ip or user for a combined log, got ${keyField}`)
        const m = COMBINED.exec(line)
        if (m === null) {
          bad('not a combined log line')
          continue
        }
        const t = parseClfTime(m[3] as string)
        if (Number.isNaN(t)) {
          bad(`bad time [${m[3]}]`)
          continue
        }
        const key = keyField === 'ip' ? (m[1] as string) : (m[2] as string)
        if (key === '-' || key.length === 0) {
          bad(`no ${keyField}`)
          continue
        }
        builder.add(t, key)
      } else if (format === 'jsonl') {
        let record: unknown
        try {
          record = JSON.parse(line)
        } catch {
          bad('not valid JSON')
          continue
        }
        addRecord(field(record, timeField), field(record, keyField))
      } else {
        const cells = splitCsv(line)
        if (cells === undefined) {
          bad('unbalanced quotes')
          continue
        }
        if (header === undefined) {
          header = cells.map((c) => c.trim())
          timeColumn = header.indexOf(timeField)
          keyColumn = header.indexOf(keyField)
          if (timeColumn < 0 || keyColumn < 0)
            throw new RangeError(
              `line ${lineNo}: the CSV header has no column ${JSON.stringify(timeColumn < 0 ? timeField : keyField)} (columns: ${header.join(', ')}); name them with --time-field and --key-field`,
            )
          continue
        }
        addRecord(cells[timeColumn], cells[keyColumn])
      }
    }
  }
  function addRecord(time: unknown, key: unknown): void {
    if (time === undefined) return bad(`no field ${JSON.stringify(timeField)}`)
    const t = parseTimeValue(time)
    if (Number.isNaN(t)) return bad(`bad time ${JSON.stringify(time)}`)
    if (key === undefined || key === null || key === '') return bad(`no field ${JSON.stringify(keyField)}`)
    if (typeof key === 'object') return bad(`field ${JSON.stringify(keyField)} is not a string or number`)
    builder.add(t, String(key))
  }
  await Promise.race([read(), streamError])
  if (builder.length === 0) {
    const why =
      lineNo === 0 || badLines === 0
        ? `no requests in it (${lineNo} lines${header !== undefined ? ', a header only' : ''})`
        : `no line could be read (${badLines} bad lines; line ${firstBad[0]?.line}: ${firstBad[0]?.reason})`
    throw new EmptyLogError(`${path}: ${why}`)
  }
  return { trace: builder.build(), format: format ?? 'csv', lines: lineNo, badLines, firstBad }
}
