import { writeFile } from 'node:fs/promises'
import { parseArgs } from 'node:util'
import { ConfigError } from '../core/errors.js'
import { PROFILE_NAMES, type ProfileName, syntheticTrace } from './profiles.js'
import { EmptyLogError, LOG_FORMATS, type LogFormat, type LogRead, readLog } from './readers.js'
import { defaultJobs, runGridParallel } from './parallel.js'
import { algorithmEntry, availableAlgorithms, gridCells } from './replay.js'
import { formatTable, jsonReport, type RunInfo } from './report.js'
import { htmlReport, MissingChartLibraryError } from './report-html.js'
import { hottestKey, type Trace, traceSeconds } from './trace.js'

/** Exit codes of `ratelimiting simulate` (the command's own: 0, 2 and 4 as the others'). */
export const SIMULATE_EXIT = { OK: 0, FAILURE: 1, USAGE: 2, INPUT: 3, MISSING_PACKAGE: 4 } as const

/** The `simulate` part of `ratelimiting --help`. */
export const SIMULATE_USAGE = `  simulate [FILE]         replay an access log (or --profile) through the limiters on a
                          fake clock and show, per algorithm × nodes × sync rate, how far
                          the fleet over-admits and wrongly denies (docs/SIMULATE.md)
    --limit N --window S      the limit (or --config FILE [--policy NAME])
    --nodes 1,4,16            processes sharing the limit
    --sync-rate 0.05,0.5,2    seconds between syncs
    --algorithms LIST         ${availableAlgorithms()
      .map((a) => a.name)
      .join(',')}
    --format F                ${LOG_FORMATS.join('|')} (detected when not given; gzip by its bytes)
    --time-field F --key-field F   JSON lines and CSV fields (combined: --key-field ip|user)
    --profile P               ${PROFILE_NAMES.join('|')} instead of FILE (--keys, --duration, --seed)
    --assign round-robin|random   --count-denied true|false   --tolerance 1.1
    --jobs N                  cells replayed at once, on worker threads (default: the CPUs, ${defaultJobs()})
    --json FILE|-  --html FILE
`

/** Where the command writes. */
export interface SimulateIo {
  readonly stdout: (text: string) => void
  readonly stderr: (text: string) => void
  /** Whether stderr is a terminal (the progress bar is drawn only then). */
  readonly stderrIsTTY: boolean
}

class UsageError extends Error {}

function list(flag: string, text: string | undefined, fallback: string, integer: boolean): number[] {
  const values = (text ?? fallback).split(',').map((part) => Number(part.trim()))
  for (const v of values) {
    if (!Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v)))
      throw new UsageError(
        `--${flag} must be a comma-separated list of positive ${integer ? 'integers' : 'numbers'}, got ${JSON.stringify(text)}`,
      )
  }
  return [...new Set(values)].sort((a, b) => a - b)
}

function positive(flag: string, text: string | undefined, integer = false): number | undefined {
  if (text === undefined) return undefined
  const v = Number(text)
  if (!Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v)))
    throw new UsageError(`--${flag} must be a positive ${integer ? 'integer' : 'number'}, got ${JSON.stringify(text)}`)
  return v
}

function parse(argv: readonly string[]) {
  return parseArgs({
    args: [...argv],
    allowPositionals: true,
    strict: true,
    options: {
      limit: { type: 'string' },
      window: { type: 'string' },
      config: { type: 'string', short: 'c' },
      policy: { type: 'string' },
      nodes: { type: 'string' },
      'sync-rate': { type: 'string' },
      algorithms: { type: 'string' },
      format: { type: 'string' },
      'time-field': { type: 'string' },
      'key-field': { type: 'string' },
      profile: { type: 'string' },
      keys: { type: 'string' },
      duration: { type: 'string' },
      seed: { type: 'string' },
      assign: { type: 'string' },
      'count-denied': { type: 'string' },
      tolerance: { type: 'string' },
      jobs: { type: 'string', short: 'j' },
      json: { type: 'string' },
      html: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  })
}

// The limit and window: from the flags, or from a policy of a service config file.
async function limitOf(values: ReturnType<typeof parse>['values']): Promise<{ limit: number; windowSec: number }> {
  let limit = positive('limit', values.limit, true)
  let windowSec = positive('window', values.window)
  if (values.config !== undefined) {
    const { loadConfigFile } = await import('../server/config.js')
    const config = await loadConfigFile(values.config, process.env)
    const name = values.policy ?? 'default'
    const policy = config.policies.get(name)
    if (policy === undefined)
      throw new UsageError(
        `--policy ${JSON.stringify(name)} is not in ${values.config} (policies: ${[...config.policies.keys()].join(', ')})`,
      )
    limit ??= policy.maxRequests
    windowSec ??= policy.windowSize
  }
  if (limit === undefined || windowSec === undefined)
    throw new UsageError('give the limit with --limit N --window SECONDS (or --config FILE)')
  return { limit, windowSec }
}

// A progress bar on stderr, redrawn at most ten times a second, only on a terminal.
function progressBar(io: SimulateIo): ((done: number, total: number) => void) & { end(): void } {
  let last = 0
  const draw = (done: number, total: number) => {
    const now = Date.now()
    if (!io.stderrIsTTY || (now - last < 100 && done < total)) return
    last = now
    const share = total === 0 ? 1 : done / total
    const width = 30
    const filled = Math.round(share * width)
    io.stderr(`\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(share * 100).toFixed(0).padStart(3)}% ${done}/${total} hits`)
  }
  return Object.assign(draw, { end: () => io.stderrIsTTY && io.stderr('\r\x1b[K') })
}

/** Runs `ratelimiting simulate` with the arguments after the command name; resolves with the exit code. */
export async function runSimulate(argv: readonly string[], io: SimulateIo): Promise<number> {
  try {
    return await simulate(argv, io)
  } catch (err) {
    if (
      err instanceof UsageError ||
      err instanceof ConfigError ||
      (err instanceof TypeError && /^Unknown option|^Option/.test(err.message))
    ) {
      io.stderr(`ratelimiting simulate: ${err.message}\n\n${SIMULATE_USAGE}`)
      return SIMULATE_EXIT.USAGE
    }
    if (err instanceof EmptyLogError || err instanceof RangeError || isFileError(err)) {
      io.stderr(`ratelimiting simulate: ${(err as Error).message}\n`)
      return SIMULATE_EXIT.INPUT
    }
    if (err instanceof MissingChartLibraryError) {
      io.stderr(`ratelimiting simulate: ${err.message}\n`)
      return SIMULATE_EXIT.MISSING_PACKAGE
    }
    if (err instanceof Error && err.name === 'ConfigFileError') {
      io.stderr(`${err.message}\n`)
      return SIMULATE_EXIT.USAGE
    }
    throw err
  }
}

function isFileError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code
  return code === 'ENOENT' || code === 'EISDIR' || code === 'EACCES' || code === 'Z_DATA_ERROR' || code === 'Z_BUF_ERROR'
}

async function simulate(argv: readonly string[], io: SimulateIo): Promise<number> {
  const { values, positionals } = parse(argv)
  if (values.help === true) {
    io.stdout(`Usage: ratelimiting simulate [FILE] [options]\n\n${SIMULATE_USAGE}`)
    return SIMULATE_EXIT.OK
  }
  if (positionals.length > 1) throw new UsageError(`one log file at most, got ${positionals.join(' ')}`)
  const file = positionals[0]
  if ((file === undefined) === (values.profile === undefined)) throw new UsageError('give a log FILE or --profile NAME (one of them)')
  const { limit, windowSec } = await limitOf(values)
  const nodes = list('nodes', values.nodes, '1,4,16', true)
  const syncRates = list('sync-rate', values['sync-rate'], '0.05,0.5,2', false)
  for (const s of syncRates) if (s < 0.001) throw new UsageError(`--sync-rate values must be at least 0.001 s, got ${s}`)
  const algorithms =
    values.algorithms === undefined ? availableAlgorithms() : values.algorithms.split(',').map((name) => algorithmEntry(name.trim()))
  const assign = values.assign ?? 'round-robin'
  if (assign !== 'round-robin' && assign !== 'random')
    throw new UsageError(`--assign must be round-robin or random, got ${JSON.stringify(assign)}`)
  const countDeniedText = values['count-denied'] ?? 'true'
  if (countDeniedText !== 'true' && countDeniedText !== 'false')
    throw new UsageError(`--count-denied must be true or false, got ${JSON.stringify(countDeniedText)}`)
  const tolerance = positive('tolerance', values.tolerance) ?? 1.1
  const seed = positive('seed', values.seed, true) ?? 1
  const jobs = positive('jobs', values.jobs, true) ?? defaultJobs()
  if (values.format !== undefined && !LOG_FORMATS.includes(values.format as LogFormat))
    throw new UsageError(`--format must be one of ${LOG_FORMATS.join(', ')}, got ${JSON.stringify(values.format)}`)

  const bar = progressBar(io)
  let trace: Trace
  let read: LogRead | undefined
  if (file !== undefined) {
    read = await readLog(file, {
      ...(values.format !== undefined ? { format: values.format as LogFormat } : {}),
      ...(values['time-field'] !== undefined ? { timeField: values['time-field'] } : {}),
      ...(values['key-field'] !== undefined ? { keyField: values['key-field'] } : {}),
      progress: (lines) => io.stderrIsTTY && io.stderr(`\rreading ${file}: ${lines} lines`),
    })
    trace = read.trace
  } else {
    if (!PROFILE_NAMES.includes(values.profile as ProfileName))
      throw new UsageError(`--profile must be one of ${PROFILE_NAMES.join(', ')}, got ${JSON.stringify(values.profile)}`)
    const keys = positive('keys', values.keys, true)
    const durationSec = positive('duration', values.duration)
    trace = syntheticTrace({
      profile: values.profile as ProfileName,
      limit,
      windowSec,
      seed,
      ...(keys !== undefined ? { keys } : {}),
      ...(durationSec !== undefined ? { durationSec } : {}),
    })
  }
  const hottest = hottestKey(trace)
  const started = performance.now()
  const cells = gridCells(algorithms, nodes, syncRates)
  const results = await runGridParallel(
    trace,
    cells,
    { limit, windowSec, countDenied: countDeniedText === 'true', assign, seed, track: hottest },
    { jobs, progress: bar },
  )
  bar.end()
  const info: RunInfo = {
    source: file ?? `synthetic:${values.profile}`,
    ...(read !== undefined ? { format: read.format } : {}),
    requests: trace.length,
    keys: trace.keyNames.length,
    durationSec: traceSeconds(trace),
    limit,
    windowSec,
    countDenied: countDeniedText === 'true',
    assign,
    badLines: read?.badLines ?? 0,
    firstBad: read?.firstBad ?? [],
    hottestKey: trace.keyNames[hottest] ?? '',
    tolerance,
    replaySeconds: (performance.now() - started) / 1000,
  }
  if (values.html !== undefined) await writeFile(values.html, htmlReport(info, results))
  if (values.json !== undefined && values.json !== '-') await writeFile(values.json, jsonReport(info, results))
  if (values.json === '-') io.stdout(jsonReport(info, results))
  else io.stdout(formatTable(info, results))
  if (values.html !== undefined && values.json !== '-') io.stdout(`HTML report: ${values.html}\n`)
  return SIMULATE_EXIT.OK
}
