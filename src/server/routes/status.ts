import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import type { ServiceMetrics } from '../metrics.js'
import { ruleEscrow } from '../gateway/domains.js'
import { send } from '../http-responses.js'
import type { RouteHandler } from '../router.js'
import type { Runtime } from '../runtime.js'
import { packageVersion } from '../version.js'
import type { ReloadAttempt } from './config.js'

// The status page: `GET /` answers one self-contained HTML page (uPlot inlined, no data in it),
// whose script polls `GET /v1/status` and `GET /v1/top` every 2 s. With auth on, the page asks
// for an admin token and sends it as `Authorization: Bearer` on those fetches; the page itself
// never holds one, so it is served openly (docs/SERVICE.md, "Status page").

/** What the status routes read from the running service. */
export interface StatusRouteContext {
  readonly metrics: ServiceMetrics
  /** The last reload attempt; undefined before the first. */
  lastReload?(): ReloadAttempt | undefined
}

interface Outcomes {
  readonly allowed: number
  readonly denied: number
  readonly outcomes: Record<string, number>
}

/** The body of `GET /v1/status`. */
export interface StatusBody {
  readonly version: string
  /** When it was read, epoch ms: the page divides the decisions' growth by its growth. */
  readonly nowMs: number
  readonly store: { readonly type: string; readonly ready: boolean; readonly error?: string }
  readonly policies: Array<
    {
      readonly name: string
      readonly algorithm: string
      readonly limit: number
      readonly windowSeconds: number
      readonly store: string
      readonly shadowMode: boolean
      /** sliding-window-counter-algo admitting only against budgets the store granted (`escrow`). */
      readonly escrow: boolean
      /** sliding-window-counter-algo syncing with a store: seconds since the last sync that reached it, and hits not pushed yet. */
      readonly sync: { readonly lagSeconds: number; readonly pendingHits: number } | null
    } & Outcomes
  >
  readonly rules: Array<{
    readonly domain: string
    readonly rule: string
    readonly name: string | null
    readonly limit: number | null
    readonly unit: string | null
    readonly algorithm: string | null
    /** A counter rule admitting only against granted budgets (its `escrow`, else `envoy.escrow`). */
    readonly escrow: boolean
    readonly store: string
  }>
  readonly lastReload: ReloadAttempt | null
}

function uplotSources(): { script: string; style: string } | undefined {
  try {
    const require = createRequire(import.meta.url)
    return {
      script: readFileSync(require.resolve('uplot/dist/uPlot.iife.min.js'), 'utf8'),
      style: readFileSync(require.resolve('uplot/dist/uPlot.min.css'), 'utf8'),
    }
  } catch {
    // uPlot is an optional peer: the page then shows the rates as numbers only
    return undefined
  }
}

// the page's own Content-Security-Policy: nothing loads from elsewhere, fetches go to this service only
const CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'"

/** `GET /` (open): the status page, the same for everyone, with no data and no token in it. */
export function statusPageRoute(): RouteHandler {
  const html = statusPage(uplotSources())
  const length = String(Buffer.byteLength(html))
  return function statusPage({ res }) {
    res.writeHead(200, {
      'content-type': 'text/html; charset=utf-8',
      'content-length': length,
      'content-security-policy': CSP,
      'cache-control': 'no-store',
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
    })
    res.end(html)
  }
}

function outcomesOf(metrics: ServiceMetrics, policy: Runtime['defaultPolicy']): Outcomes {
  const o = metrics.tally(policy).outcomes
  return {
    allowed: o.allowed + o.allowlist + o.shadow_denied + o.failed_open,
    denied: o.denied + o.denylist + o.failed_closed,
    outcomes: { ...o },
  }
}

/**
 * `GET /v1/status` (an admin token when auth is on): what the status page draws. The policies
 * with their decisions so far (the page turns them into rates), the Envoy rules, the store's
 * readiness (one probe, as /readyz), the sync state of counter policies, the last reload.
 */
export function statusRoute(ctx: StatusRouteContext): RouteHandler {
  const version = packageVersion()
  return function status({ res, runtime }) {
    const nowMs = Date.now()
    const storeType = runtime.store.type
    const policies = [...runtime.policies.values()].map((p) => {
      const stats = p.engine?.stats()
      const sync =
        stats === undefined || stats.mode === 'local'
          ? null
          : {
              lagSeconds: stats.lastSyncAtMs > 0 ? Math.max(0, nowMs - stats.lastSyncAtMs) / 1000 : -1,
              pendingHits: stats.pendingHits,
            }
      return {
        name: p.name,
        algorithm: p.algo,
        limit: p.limit,
        windowSeconds: p.windowSize,
        store: p.algo === 'sliding-window-counter-algo' && stats?.mode === 'local' ? 'memory' : storeType,
        shadowMode: p.shadowMode,
        escrow: p.escrow,
        sync,
        ...outcomesOf(ctx.metrics, p),
      }
    })
    const rules = [...runtime.envoy.domains.rules()].map((r) => ({
      domain: r.domain,
      rule: r.statsKey,
      name: r.name ?? null,
      limit: r.unlimited ? null : r.requestsPerUnit,
      unit: r.unlimited ? null : (r.unit ?? null),
      algorithm: r.unlimited ? null : r.algorithm,
      escrow: !r.unlimited && ruleEscrow(r, runtime.config.gateway.envoy),
      store: storeType,
    }))
    const answer = (ready: boolean, error?: string) => {
      const body: StatusBody = {
        version,
        nowMs,
        store: { type: storeType, ready, ...(error !== undefined ? { error } : {}) },
        policies,
        rules,
        lastReload: ctx.lastReload?.() ?? null,
      }
      send(res, 200, JSON.stringify(body), { 'cache-control': 'no-store' })
    }
    runtime.store.ready(runtime.config.store.timeoutMs).then(
      () => answer(true),
      (err: unknown) => {
        ctx.metrics.storeError(storeType, 'readiness')
        answer(false, err instanceof Error ? err.message : String(err))
      },
    )
  }
}

/** The page: markup, style, uPlot (when installed) and the script that polls. */
export function statusPage(uplot: { script: string; style: string } | undefined): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ratelimiting status</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>${uplot?.style ?? ''}
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;margin-bottom:8px}
td,th{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}
td.n,th.n{text-align:right}.muted{color:#777}.bad{color:#b00020;font-weight:600}.ok{color:#1b7f3b;font-weight:600}
#login{padding:12px;border:1px solid #ccc;background:#fafafa;margin:12px 0}#login[hidden]{display:none}
.grid{display:flex;flex-wrap:wrap;gap:24px}.top{min-width:320px}code{font-size:13px}
</style></head><body>
<h1>ratelimiting status</h1>
<p class="muted" id="summary">Loading…</p>
<form id="login" hidden>
<p>This service has auth tokens: enter an admin token to see its status. It is kept in this tab only (sessionStorage) and sent as <code>Authorization: Bearer</code> to <code>/v1/status</code> and <code>/v1/top</code>.</p>
<label>Admin token <input id="token" type="password" autocomplete="off" size="40"></label> <button type="submit">Show</button>
<span id="loginError" class="bad"></span>
</form>
<h2>Decisions per second</h2>
<div id="rates"></div><div id="chart"></div>
<h2>Policies</h2>
<table id="policies"><thead><tr><th>policy</th><th class="n">limit</th><th class="n">window s</th><th>algorithm</th><th>store</th><th class="n">allowed/s</th><th class="n">denied/s</th><th class="n">allowed</th><th class="n">denied</th><th>sync lag s</th><th class="n">pending hits</th></tr></thead><tbody></tbody></table>
<h2>Envoy rules</h2>
<table id="rules"><thead><tr><th>domain</th><th>rule (stats key)</th><th>name</th><th class="n">limit</th><th>unit</th><th>algorithm</th><th>store</th></tr></thead><tbody></tbody></table>
<h2>Top limited keys (last <span id="topWindow">60</span> s)</h2>
<div id="top" class="grid"></div>
<h2>Store and reloads</h2>
<table id="health"><tbody></tbody></table>
<script>${uplot?.script ?? ''}</script>
<script>
'use strict';
// everything that comes from the service is put in the page as text (textContent), never as markup
const state = { token: sessionStorage.getItem('ratelimiting-token') || '', last: null, series: [], names: '', chart: null, polls: 0, ready: false };
window.statusPage = state;
const POLL_MS = 2000, POINTS = 90;
const $ = (id) => document.getElementById(id);
function cell(row, text, cls) { const td = document.createElement('td'); td.textContent = text; if (cls) td.className = cls; row.appendChild(td); return td; }
function rows(table, list, fill) { const body = table.tBodies[0]; body.replaceChildren(); for (const item of list) { const tr = document.createElement('tr'); fill(tr, item); body.appendChild(tr); } }
function fmt(n) { return n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2); }
async function get(path) {
  const headers = state.token ? { authorization: 'Bearer ' + state.token } : {};
  const res = await fetch(path, { headers, cache: 'no-store' });
  if (res.status === 401 || res.status === 403) { const e = new Error(res.status === 401 ? 'an admin token is needed' : 'that token is not an admin token'); e.auth = true; throw e; }
  if (!res.ok) throw new Error(path + ': ' + res.status);
  return res.json();
}
$('login').addEventListener('submit', (ev) => {
  ev.preventDefault();
  state.token = $('token').value.trim();
  sessionStorage.setItem('ratelimiting-token', state.token);
  $('token').value = '';
  poll();
});
function drawChart(status, rates) {
  const names = status.policies.map((p) => p.name).join('\\n');
  if (names !== state.names) {
    state.names = names; state.series = [[]];
    for (const p of status.policies) state.series.push([], []);
    if (state.chart) { state.chart.destroy(); state.chart = null; }
  }
  const t = status.nowMs / 1000;
  state.series[0].push(t);
  status.policies.forEach((p, i) => { state.series[1 + 2 * i].push(rates[i].allowed); state.series[2 + 2 * i].push(rates[i].denied); });
  for (const s of state.series) if (s.length > POINTS) s.shift();
  if (typeof uPlot === 'undefined') return;
  if (!state.chart) {
    const colors = ['#1f77b4', '#2ca02c', '#9467bd', '#8c564b', '#17becf', '#7f7f7f'];
    const series = [{}];
    status.policies.forEach((p, i) => {
      series.push({ label: p.name + ' allowed/s', stroke: colors[i % colors.length], width: 2 });
      series.push({ label: p.name + ' denied/s', stroke: '#d62728', dash: [6, 4], width: 2 });
    });
    const width = Math.min(1150, document.body.clientWidth || 1000);
    state.chart = new uPlot({ width, height: 260, series, axes: [{}, { label: 'per second' }], scales: { x: { range: (u, min, max) => [max - (POINTS * POLL_MS) / 1000, max] }, y: { range: (u, min, max) => [0, Math.max(1, max * 1.1)] } } }, state.series, $('chart'));
  } else state.chart.setData(state.series);
}
async function poll() {
  try {
    const status = await get('/v1/status');
    $('login').hidden = true; $('loginError').textContent = '';
    const prev = state.last;
    const dt = prev ? (status.nowMs - prev.nowMs) / 1000 : 0;
    const rates = status.policies.map((p) => {
      const q = prev && prev.policies.find((x) => x.name === p.name);
      return q && dt > 0 ? { allowed: Math.max(0, p.allowed - q.allowed) / dt, denied: Math.max(0, p.denied - q.denied) / dt } : { allowed: 0, denied: 0 };
    });
    state.last = status; state.rates = rates;
    $('summary').textContent = 'version ' + status.version + ' · store ' + status.store.type + ' · ' + status.policies.length + ' policies · ' + status.rules.length + ' Envoy rules · updated ' + new Date(status.nowMs).toLocaleTimeString();
    $('rates').textContent = status.policies.map((p, i) => p.name + ': ' + fmt(rates[i].allowed) + ' allowed/s, ' + fmt(rates[i].denied) + ' denied/s').join(' · ');
    rows($('policies'), status.policies, (tr, p) => {
      const i = status.policies.indexOf(p);
      cell(tr, p.name + (p.shadowMode ? ' (shadow)' : '')); cell(tr, String(p.limit), 'n'); cell(tr, String(p.windowSeconds), 'n'); cell(tr, p.algorithm + (p.escrow ? ' + escrow' : '')); cell(tr, p.store);
      cell(tr, fmt(rates[i].allowed), 'n'); cell(tr, fmt(rates[i].denied), 'n' + (rates[i].denied > 0 ? ' bad' : '')); cell(tr, String(p.allowed), 'n'); cell(tr, String(p.denied), 'n');
      cell(tr, p.sync ? (p.sync.lagSeconds < 0 ? 'no sync yet' : fmt(p.sync.lagSeconds)) : '—'); cell(tr, p.sync ? String(p.sync.pendingHits) : '—', 'n');
    });
    rows($('rules'), status.rules.length ? status.rules : [null], (tr, r) => {
      if (r === null) { cell(tr, 'no Envoy domain files loaded', 'muted').colSpan = 7; return; }
      cell(tr, r.domain); cell(tr, r.rule); cell(tr, r.name || ''); cell(tr, r.limit === null ? 'unlimited' : String(r.limit), 'n'); cell(tr, r.unit || ''); cell(tr, (r.algorithm || '') + (r.escrow ? ' + escrow' : '')); cell(tr, r.store);
    });
    const health = [['store', status.store.type], ['store ready', status.store.ready ? 'yes' : 'no: ' + (status.store.error || '')]];
    const r = status.lastReload;
    health.push(['last reload', r ? r.at + ' (' + r.trigger + '): ' + (r.ok ? 'applied' : 'refused: ' + r.error) : 'none since start']);
    rows($('health'), health, (tr, [k, v]) => { cell(tr, k); const td = cell(tr, v); if (k === 'store ready') td.className = status.store.ready ? 'ok' : 'bad'; if (k === 'last reload' && r && !r.ok) td.className = 'bad'; });
    drawChart(status, rates);
    await drawTop(status);
    state.polls++; state.ready = true;
  } catch (err) {
    if (err.auth) { $('login').hidden = false; $('loginError').textContent = state.token ? err.message : ''; $('summary').textContent = 'Waiting for an admin token.'; }
    else $('summary').textContent = 'Cannot read the status: ' + err.message;
  }
}
async function drawTop(status) {
  const targets = status.policies.map((p) => ({ title: 'policy ' + p.name, query: 'policy=' + encodeURIComponent(p.name) }));
  for (const r of status.rules.filter((r) => r.limit !== null).slice(0, 12))
    targets.push({ title: 'rule ' + r.rule, query: 'domain=' + encodeURIComponent(r.domain) + '&rule=' + encodeURIComponent(r.rule) });
  const tops = await Promise.all(targets.map((t) => get('/v1/top?n=5&' + t.query)));
  const boxes = [];
  tops.forEach((top, i) => {
    $('topWindow').textContent = String(top.windowSeconds);
    const box = document.createElement('div'); box.className = 'top';
    const h = document.createElement('h3'); h.textContent = targets[i].title; h.style.fontSize = '14px'; box.appendChild(h);
    const table = document.createElement('table'); table.createTBody();
    const head = table.createTHead().insertRow();
    for (const [t, n] of [['key', false], ['denied', true], ['hits', true]]) { const th = document.createElement('th'); th.textContent = t; if (n) th.className = 'n'; head.appendChild(th); }
    const keys = top.byDenials.length ? top.byDenials : top.byHits;
    const hits = new Map(top.byHits.map((e) => [e.key, e]));
    const denied = new Map(top.byDenials.map((e) => [e.key, e]));
    const est = (e) => (e ? (e.error > 0 ? '≤ ' + e.count + ' (±' + e.error + ')' : String(e.count)) : '—');
    rows(table, keys.length ? keys : [null], (tr, e) => {
      if (e === null) { cell(tr, 'no decisions in the window', 'muted').colSpan = 3; return; }
      cell(tr, e.key); cell(tr, est(denied.get(e.key)), 'n' + (denied.has(e.key) ? ' bad' : '')); cell(tr, est(hits.get(e.key)), 'n');
    });
    box.appendChild(table); boxes.push(box);
  });
  $('top').replaceChildren(...boxes);
}
poll();
setInterval(poll, POLL_MS);
</script>
</body></html>
`
}
