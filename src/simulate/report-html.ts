import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import type { CellResult, RateSeries } from './replay.js'
import { badLineText, recommend, resultRows, type RunInfo } from './report.js'

/**
 * The self-contained HTML report of `ratelimiting simulate --html FILE`: three uPlot charts and
 * the table, with uPlot's script and style inlined from node_modules when the report is made,
 * so the page loads nothing from the network when it is viewed. uPlot is an optional peer
 * dependency: the command says to install it when it is missing.
 */

/** uPlot is not installed. */
export class MissingChartLibraryError extends Error {
  constructor() {
    super('the HTML report draws its charts with uPlot, which is not installed: npm install uplot')
    this.name = 'MissingChartLibraryError'
  }
}

function uplotSources(): { script: string; style: string } {
  const require = createRequire(import.meta.url)
  let script: string
  let style: string
  try {
    script = readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8')
    style = readFileSync(require.resolve('uplot/dist/uPlot.min.css'), 'utf8')
  } catch {
    throw new MissingChartLibraryError()
  }
  return { script, style }
}

const MAX_POINTS = 2000

/** At most MAX_POINTS points of a series, evenly strided (the first and last kept). */
function downsample(series: RateSeries): RateSeries {
  const n = series.t.length
  if (n <= MAX_POINTS) return series
  const out: RateSeries = { t: [], exact: [], estimated: [] }
  for (let j = 0; j < MAX_POINTS; j++) {
    const i = Math.round((j * (n - 1)) / (MAX_POINTS - 1))
    out.t.push(series.t[i] as number)
    out.exact.push(series.exact[i] as number)
    out.estimated.push(series.estimated[i] as number)
  }
  return out
}

/** The counter cell whose hottest-key rates the third chart draws: the most nodes, then the slowest sync. */
export function trackedCell(results: readonly CellResult[]): CellResult | undefined {
  return results
    .filter((r) => r.series !== undefined && r.algorithm === 'counter')
    .sort((a, b) => (b.nodes ?? 0) - (a.nodes ?? 0) || (b.syncRate ?? 0) - (a.syncRate ?? 0))[0]
}

/** The data the page draws, also exposed to scripts as `window.simulateReport`. */
export function chartData(info: RunInfo, results: readonly CellResult[]) {
  const counter = results.filter((r) => r.algorithm === 'counter')
  const syncRates = [...new Set(counter.map((r) => r.syncRate as number))].sort((a, b) => a - b)
  const nodes = [...new Set(counter.map((r) => r.nodes as number))].sort((a, b) => a - b)
  const at = (n: number, s: number) => counter.find((r) => r.nodes === n && r.syncRate === s)
  const tracked = trackedCell(results)
  return {
    syncRates,
    nodes,
    worstWindow: nodes.map((n) => syncRates.map((s) => at(n, s)?.worstWindow ?? null)),
    falseDeny: nodes.map((n) =>
      syncRates.map((s) => {
        const cell = at(n, s)
        return cell === undefined ? null : cell.falseDenyShare * 100
      }),
    ),
    hottest:
      tracked?.series === undefined
        ? undefined
        : { key: info.hottestKey, nodes: tracked.nodes, syncRate: tracked.syncRate, limit: info.limit, ...downsample(tracked.series) },
  }
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`)
// JSON inside a <script>: no "</script>" or "<!--" can close or confuse it
const scriptJson = (value: unknown) => JSON.stringify(value).replace(/</g, '\\u003c')

/** The whole page. */
export function htmlReport(info: RunInfo, results: readonly CellResult[]): string {
  const { script, style } = uplotSources()
  const data = chartData(info, results)
  const rows = resultRows(results)
  const table = `<table><thead><tr>${(rows[0] ?? []).map((h) => `<th>${escapeHtml(h)}</th>`).join('')}</tr></thead><tbody>${rows
    .slice(1)
    .map((r) => `<tr>${r.map((c) => `<td>${escapeHtml(c)}</td>`).join('')}</tr>`)
    .join('')}</tbody></table>`
  const recs = recommend(results, info.tolerance)
    .map((r) =>
      r.syncRate === null
        ? `<li>${r.nodes} node(s): no sync rate tried keeps the worst window within ${info.tolerance.toFixed(2)}x</li>`
        : `<li>${r.nodes} node(s): sync every <b>${r.syncRate} s</b> (worst window ${(r.worstWindow as number).toFixed(2)}x, ${(r.storeCallsPerSec as number).toFixed(1)} store calls/s)</li>`,
    )
    .join('')
  const bad = info.badLines > 0 ? `<p class="bad">${escapeHtml(badLineText(info))}</p>` : ''
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ratelimiting simulate: ${escapeHtml(info.source)}</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<style>${style}
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}td,th{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child{text-align:left}.bad{color:#a40}.chart{margin:8px 0 24px}
</style></head><body>
<h1>ratelimiting simulate</h1>
<p>${escapeHtml(info.source)}: ${info.requests} requests, ${info.keys} keys, ${info.durationSec.toFixed(0)} s; limit ${info.limit} per ${info.windowSec} s; denied hits ${info.countDenied ? 'count' : 'do not count'}; hits to nodes ${info.assign}.</p>
${bad}
<h2>Largest sync rate within ${info.tolerance.toFixed(2)}x (counter)</h2><ul>${recs}</ul>
<h2>Over-admission against sync rate</h2><p>The most hits one key truly got in any window-long interval, divided by the limit; one line per node count.</p>
<div id="overAdmission" class="chart"></div>
<h2>False denials against sync rate</h2><p>Share of all hits denied where an exact sliding log allows them, %.</p>
<div id="falseDenials" class="chart"></div>
<h2>The hottest key: true and estimated rate</h2><p id="hottestCaption"></p>
<div id="hottest" class="chart"></div>
<h2>Every cell</h2>${table}
<script>${script}</script>
<script>
const report = ${scriptJson(data)};
window.simulateReport = report;
const colors = ['#1f77b4','#d62728','#2ca02c','#9467bd','#ff7f0e','#8c564b','#e377c2','#17becf'];
const width = Math.min(1000, document.body.clientWidth || 1000);
function perNode(id, rows, label) {
  const series = [{ label: 'sync s' }].concat(report.nodes.map((n, i) => ({ label: n + ' node' + (n === 1 ? '' : 's'), stroke: colors[i % colors.length], width: 2, points: { show: true } })));
  return new uPlot({ width, height: 300, scales: { x: { time: false, distr: 3, log: 10 } },
    axes: [{ label: 'sync rate, s' }, { label }], series }, [report.syncRates].concat(rows), document.getElementById(id));
}
window.charts = {
  overAdmission: perNode('overAdmission', report.worstWindow, 'worst window / limit'),
  falseDenials: perNode('falseDenials', report.falseDeny, 'false denials, %'),
};
if (report.hottest) {
  const h = report.hottest;
  document.getElementById('hottestCaption').textContent = 'Key ' + h.key + ', counter at ' + h.nodes + ' nodes syncing every ' + h.syncRate + ' s: the rate the deciding process saw against the exact count of the window, at each of its hits.';
  window.charts.hottest = new uPlot({ width, height: 300, scales: { x: { time: false } }, axes: [{ label: 'seconds from the start' }, { label: 'hits in the window' }],
    series: [{ label: 's' }, { label: 'exact', stroke: '#222', width: 2 }, { label: 'estimated', stroke: '#d62728', width: 1 }, { label: 'limit', stroke: '#999', dash: [6, 4] }] },
    [h.t, h.exact, h.estimated, h.t.map(() => h.limit)], document.getElementById('hottest'));
} else {
  document.getElementById('hottestCaption').textContent = 'No counter cell in this run.';
}
window.reportReady = true;
</script>
</body></html>
`
}
