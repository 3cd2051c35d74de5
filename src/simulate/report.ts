import type { CellResult } from './replay.js'

/** What a run was: its input and setup, for the table's heading, the JSON and the HTML report. */
export interface RunInfo {
  /** The log file, or `synthetic:<profile>`. */
  readonly source: string
  readonly format?: string
  readonly requests: number
  readonly keys: number
  readonly durationSec: number
  readonly limit: number
  readonly windowSec: number
  readonly countDenied: boolean
  readonly assign: 'round-robin' | 'random'
  readonly badLines: number
  readonly firstBad: readonly { readonly line: number; readonly reason: string }[]
  /** The hottest key, whose rates the report draws. */
  readonly hottestKey: string
  /** Largest worst window / limit a recommendation accepts. */
  readonly tolerance: number
  readonly replaySeconds: number
}

/** For each node count, the largest sync rate whose worst window stays within the tolerance. */
export interface Recommendation {
  readonly nodes: number
  /** Null when no sync rate of the grid stays within it. */
  readonly syncRate: number | null
  readonly worstWindow: number | null
  readonly storeCallsPerSec: number | null
}

/** The counter's recommendations: the largest sync rate (fewest store calls) within the tolerance. */
export function recommend(results: readonly CellResult[], tolerance: number): Recommendation[] {
  const counter = results.filter((r) => r.algorithm === 'counter' && r.nodes !== null && r.syncRate !== null)
  const nodes = [...new Set(counter.map((r) => r.nodes as number))].sort((a, b) => a - b)
  return nodes.map((n) => {
    const fit = counter
      .filter((r) => r.nodes === n && r.worstWindow <= tolerance)
      .sort((a, b) => (b.syncRate as number) - (a.syncRate as number))[0]
    return fit === undefined
      ? { nodes: n, syncRate: null, worstWindow: null, storeCallsPerSec: null }
      : { nodes: n, syncRate: fit.syncRate, worstWindow: fit.worstWindow, storeCallsPerSec: fit.storeCallsPerSec }
  })
}

const pct = (x: number) => `${(x * 100).toFixed(2)}%`
const num = (x: number) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2))

/** The results as rows of text cells, the header first (the table and docs/ACCURACY.md use it). */
export function resultRows(results: readonly CellResult[]): string[][] {
  const header = [
    'algorithm',
    'nodes',
    'sync s',
    'worst window',
    'false allow',
    'false deny',
    'rate error',
    'keys over',
    'store calls/s',
    'rows/s',
  ]
  return [
    header,
    ...results.map((r) => [
      r.label,
      r.nodes === null ? 'any' : String(r.nodes),
      r.syncRate === null ? 'per hit' : String(r.syncRate),
      `${r.worstWindow.toFixed(2)}x`,
      pct(r.falseAllowShare),
      pct(r.falseDenyShare),
      pct(r.meanRateError),
      String(r.keysOver),
      num(r.storeCallsPerSec),
      num(r.storeRowsPerSec),
    ]),
  ]
}

/** Aligned text columns (numbers right-aligned). */
export function textTable(rows: readonly (readonly string[])[]): string {
  const widths = (rows[0] ?? []).map((_, c) => Math.max(...rows.map((r) => (r[c] ?? '').length)))
  return rows
    .map((r, i) =>
      r
        .map((cell, c) => (c === 0 || i === 0 ? cell.padEnd(widths[c] as number) : cell.padStart(widths[c] as number)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n')
}

/** A Markdown table of the same rows. */
export function markdownTable(rows: readonly (readonly string[])[]): string {
  const [header, ...body] = rows
  if (header === undefined) return ''
  const line = (r: readonly string[]) => `| ${r.join(' | ')} |`
  return [line(header), line(header.map((_, c) => (c === 0 ? '---' : '---:'))), ...body.map(line)].join('\n')
}

/** The table the command prints: the setup, the cells, what the columns mean, the recommendation. */
export function formatTable(info: RunInfo, results: readonly CellResult[]): string {
  const out: string[] = []
  out.push(
    `${info.source}${info.format !== undefined ? ` (${info.format})` : ''}: ${info.requests} requests, ${info.keys} keys, ` +
      `${info.durationSec.toFixed(0)} s; limit ${info.limit} per ${info.windowSec} s; denied hits ${info.countDenied ? 'count' : 'do not count'}; ` +
      `hits to nodes ${info.assign}`,
  )
  if (info.badLines > 0) out.push(badLineText(info))
  out.push('', textTable(resultRows(results)), '')
  out.push(
    'worst window: most hits truly admitted in any window-long interval of one key, / limit (1.00x = never over).',
    'false allow / false deny: share of all hits allowed where an exact sliding log denies / denied where it allows.',
    'rate error: mean |rate the limiter decided on - exact count in the window|, as a share of the limit.',
  )
  const recs = recommend(results, info.tolerance)
  if (recs.length > 0) {
    out.push('', `Largest sync rate keeping the worst window within ${info.tolerance.toFixed(2)}x (counter):`)
    for (const r of recs) {
      out.push(
        r.syncRate === null
          ? `  ${r.nodes} node(s): none of the sync rates tried; try smaller ones or a per-hit algorithm`
          : `  ${r.nodes} node(s): sync every ${r.syncRate} s (worst window ${(r.worstWindow as number).toFixed(2)}x, ${num(r.storeCallsPerSec as number)} store calls/s)`,
      )
    }
  }
  return `${out.join('\n')}\n`
}

/** The bad lines, counted, with the first ones by number. */
export function badLineText(info: RunInfo): string {
  const shown = info.firstBad.map((b) => `line ${b.line}: ${b.reason}`).join('; ')
  return `${info.badLines} line(s) could not be read and were not replayed (${shown}${info.badLines > info.firstBad.length ? '; ...' : ''})`
}

/** The JSON written by --json: the setup, every cell (without the rate series) and the recommendations. */
export function jsonReport(info: RunInfo, results: readonly CellResult[]): string {
  const cells = results.map(({ series: _series, ...rest }) => rest)
  return `${JSON.stringify({ run: info, cells, recommendations: recommend(results, info.tolerance) }, null, 2)}\n`
}
