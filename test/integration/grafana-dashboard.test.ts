/**
 * examples/grafana-dashboard.json cannot rot: every metric name its PromQL uses (panels,
 * annotations, template variables) must be on the /metrics of a real service, started in-process
 * with a gRPC listener and Envoy domains so the gateway's metrics exist, after a few requests of
 * every kind. A histogram's `_bucket`, `_sum` and `_count` series count as the histogram's name
 * only when the service declares that name a histogram (or, for `_sum` and `_count`, a summary).
 */
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { rlsClient } from '../support/envoy-client.js'
import { call, check, root, startTestService, type TestService } from './server-helpers.js'

/** What one PromQL expression reads: metric names, and the label names it filters or groups by. */
interface Uses {
  readonly names: Set<string>
  readonly labels: Set<string>
}

// words PromQL reads as operators and modifiers, never as metric names
const KEYWORDS = new Set([
  'by',
  'without',
  'on',
  'ignoring',
  'group_left',
  'group_right',
  'bool',
  'and',
  'or',
  'unless',
  'offset',
  'atan2',
  'inf',
  'nan',
])

/** The metric names and labels of a PromQL expression (Grafana's `$variables` allowed). */
function promqlUses(expr: string): Uses {
  const labels = new Set<string>()
  const names = new Set<string>()
  let e = expr
    // Grafana's variables: $__rate_interval, $job, ${job}
    .replace(/\$\{[^}]*\}|\$\w+/g, ' ')
    // strings (a label value may look like anything)
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""')
  // label matchers: the names are labels, not metrics
  e = e.replace(/\{([^}]*)\}/g, (_, inner: string) => {
    for (const m of inner.matchAll(/([A-Za-z_]\w*)\s*(?:=~|!~|!=|=)/g)) labels.add(m[1] as string)
    return ' '
  })
  // grouping and vector matching: label lists
  e = e.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g, (_, _kw: string, inner: string) => {
    for (const l of inner.split(',')) if (l.trim() !== '') labels.add(l.trim())
    return ' '
  })
  e = e
    // ranges and subqueries: [5m], [5m:1m]
    .replace(/\[[^\]]*\]/g, ' ')
    // numbers and durations: 0.99, 1e3, 5m
    .replace(/\b\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:ms|s|m|h|d|w|y)?\b/g, ' ')
  for (const m of e.matchAll(/([A-Za-z_:][\w:]*)(\s*\()?/g)) {
    const word = m[1] as string
    // followed by "(": a function or an aggregation
    if (m[2] === undefined && !KEYWORDS.has(word.toLowerCase())) names.add(word)
  }
  return { names, labels }
}

/** A template variable's query: `label_values(<expr>, <label>)`, or a PromQL expression. */
function variableUses(query: string): Uses {
  const m = /^\s*label_values\((.*),\s*([A-Za-z_]\w*)\s*\)\s*$/s.exec(query)
  if (m === null) return promqlUses(query)
  const uses = promqlUses(m[1] as string)
  uses.labels.add(m[2] as string)
  return uses
}

type Json = Record<string, unknown>

/** Every query of a Grafana dashboard, with where it is: panel targets (rows' too), annotations, variables. */
function dashboardQueries(dashboard: Json): Array<{ where: string; uses: Uses }> {
  const out: Array<{ where: string; uses: Uses }> = []
  const visit = (panels: unknown) => {
    for (const p of (panels ?? []) as Json[]) {
      for (const target of (p.targets ?? []) as Json[])
        out.push({ where: `panel "${String(p.title)}" ${String(target.refId)}`, uses: promqlUses(String(target.expr)) })
      visit(p.panels)
    }
  }
  visit(dashboard.panels)
  for (const a of ((dashboard.annotations as Json | undefined)?.list ?? []) as Json[])
    if (typeof a.expr === 'string') out.push({ where: `annotation "${String(a.name)}"`, uses: promqlUses(a.expr) })
  for (const v of ((dashboard.templating as Json | undefined)?.list ?? []) as Json[]) {
    if (v.type !== 'query') continue
    const q = typeof v.query === 'string' ? v.query : String((v.query as Json).query)
    out.push({ where: `variable $${String(v.name)}`, uses: variableUses(q) })
  }
  return out
}

/** The Prometheus text format: each metric's declared type, and the label names of each series name's samples. */
function parseExposition(text: string): { types: Map<string, string>; labels: Map<string, Set<string>> } {
  const types = new Map<string, string>()
  const labels = new Map<string, Set<string>>()
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line)
    if (type !== null) types.set(type[1] as string, type[2] as string)
    if (line.startsWith('#') || line.trim() === '') continue
    const sample = /^([A-Za-z_:][\w:]*)(?:\{(.*)\})?\s/.exec(line)
    if (sample === null) continue
    const name = sample[1] as string
    let set = labels.get(name)
    if (set === undefined) labels.set(name, (set = new Set()))
    for (const m of (sample[2] ?? '').matchAll(/([A-Za-z_]\w*)="/g)) set.add(m[1] as string)
  }
  return { types, labels }
}

const SERIES_SUFFIXES: Record<string, readonly string[]> = { histogram: ['_bucket', '_sum', '_count'], summary: ['_sum', '_count'] }

/**
 * How the service exposes a name a query reads: a counter, gauge or untyped metric by its own
 * name; a histogram's or summary's series by their suffix. Undefined when it does not: a
 * histogram's base name (it has no series of that name) included.
 */
function resolve(name: string, types: ReadonlyMap<string, string>): string | undefined {
  const type = types.get(name)
  if (type !== undefined) return SERIES_SUFFIXES[type] === undefined ? name : undefined
  for (const [base, baseType] of types) if ((SERIES_SUFFIXES[baseType] ?? []).some((suffix) => name === base + suffix)) return name
  return undefined
}

// labels Prometheus adds to every series it scrapes
const SCRAPE_LABELS = new Set(['job', 'instance'])

describe('examples/grafana-dashboard.json', { timeout: 30_000 }, () => {
  const dashboard = JSON.parse(readFileSync(path.join(root, 'examples/grafana-dashboard.json'), 'utf8')) as Json
  const queries = dashboardQueries(dashboard)
  let dir: string
  let t: TestService
  let exposition: ReturnType<typeof parseExposition>

  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'rl-dashboard-'))
    mkdirSync(path.join(dir, 'domains'))
    writeFileSync(
      path.join(dir, 'domains', 'edge.yaml'),
      `domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: path
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
`,
    )
    t = await startTestService(
      `rate-limiter: { use-algo: fixed-window-algo, max-requests: 2, window-size: 60, overrides: { vip: { max-requests: 10 } } }
policies:
  counter: { use-algo: sliding-window-counter-algo, max-requests: 2, sync-rate: 0.01 }
  trial: { use-algo: sliding-window-algo, max-requests: 1, shadow-mode: true }
store: { type: memory }
grpc: { port: 0 }
envoy: { domains: ${path.join(dir, 'domains')} }
`,
      { grpcPort: 0, defaultMetrics: true },
    )
    // a few requests of every kind: allowed and denied, a shadow denial, the counter's syncs,
    // Envoy over gRPC (within, near and over a limit, a shadow rule) and over POST /json
    for (let i = 0; i < 3; i++) {
      await check(t.url, { userId: 'u1' })
      await check(t.url, { userId: 'u1', policy: 'counter' })
      await check(t.url, { userId: 'u1', policy: 'trial' })
    }
    const client = rlsClient(t.service.grpc?.port as number)
    try {
      for (let i = 0; i < 3; i++)
        await client.call({
          domain: 'edge',
          descriptors: [{ entries: [{ key: 'remote_address', value: '10.0.0.1' }] }, { entries: [{ key: 'path', value: '/' }] }],
        })
    } finally {
      client.close()
    }
    await call(`${t.url}/json`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: '10.0.0.2' }] }] }),
    })
    const res = await fetch(`${t.url}/metrics`)
    assert.equal(res.status, 200)
    exposition = parseExposition(await res.text())
  })

  after(async () => {
    await t?.close()
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
  })

  it('reads metric names and labels out of PromQL, and resolves histogram series only for histograms', () => {
    const q = promqlUses(
      'histogram_quantile(0.99, sum by (le, policy) (rate(a_seconds_bucket{job=~"$job", outcome!="x y"}[$__rate_interval]))) / on (policy) group_left sum(b_total offset 5m) > 1e3',
    )
    assert.deepEqual([...q.names].sort(), ['a_seconds_bucket', 'b_total'])
    assert.deepEqual([...q.labels].sort(), ['job', 'le', 'outcome', 'policy'])
    assert.deepEqual([...variableUses('label_values(c_info{job=~"$job"}, instance)').names], ['c_info'])
    const types = new Map([
      ['h_seconds', 'histogram'],
      ['s_seconds', 'summary'],
      ['jobs_count', 'gauge'],
      ['g', 'gauge'],
    ])
    assert.equal(resolve('h_seconds_bucket', types), 'h_seconds_bucket')
    assert.equal(resolve('h_seconds_count', types), 'h_seconds_count')
    assert.equal(resolve('h_seconds', types), undefined, "a histogram's own name has no series")
    assert.equal(resolve('s_seconds_bucket', types), undefined, 'a summary has no buckets')
    assert.equal(resolve('s_seconds_sum', types), 's_seconds_sum')
    assert.equal(resolve('jobs_count', types), 'jobs_count', 'a gauge whose name ends in _count is itself')
    assert.equal(resolve('g_count', types), undefined, 'a gauge has no _count series')
    assert.equal(resolve('missing_total', types), undefined)
  })

  it('has a query in every panel, each reading at least one metric', () => {
    const panels = (dashboard.panels as Json[]).filter((p) => p.type !== 'row')
    assert.ok(panels.length >= 15, `${panels.length} panels`)
    for (const p of panels) assert.ok(((p.targets ?? []) as Json[]).length > 0, `panel "${String(p.title)}" has no query`)
    for (const { where, uses } of queries) assert.ok(uses.names.size > 0, `${where} reads no metric`)
  })

  it("uses only metric names the service's /metrics exposes", (ctx) => {
    const missing: string[] = []
    for (const { where, uses } of queries)
      for (const name of uses.names) if (resolve(name, exposition.types) === undefined) missing.push(`${where}: ${name}`)
    assert.deepEqual(missing, [], `not on /metrics (or not a histogram's series): ${missing.join('; ')}`)
    // the other direction is not required; say what the dashboard leaves out
    const used = new Set(queries.flatMap(({ uses }) => [...uses.names].map((n) => n.replace(/_(bucket|sum|count)$/, ''))))
    const unused = [...exposition.types.keys()].filter((n) => n.startsWith('ratelimiting_') && !used.has(n))
    if (unused.length > 0) ctx.diagnostic(`ratelimiting metrics not on the dashboard: ${unused.join(', ')}`)
  })

  it('groups and filters only by labels those metrics carry', () => {
    const wrong: string[] = []
    for (const { where, uses } of queries) {
      const series = [...uses.names].map((n) => resolve(n, exposition.types))
      // a name not on /metrics fails the test above; a metric without a sample yet (no store
      // error happened) cannot say which labels it has
      const seen = series.map((s) => (s === undefined ? undefined : exposition.labels.get(s)))
      if (seen.some((s) => s === undefined)) continue
      const carried = new Set(seen.flatMap((s) => [...(s as Set<string>)]))
      for (const label of uses.labels) if (!carried.has(label) && !SCRAPE_LABELS.has(label)) wrong.push(`${where}: ${label}`)
    }
    assert.deepEqual(wrong, [])
  })

  it('covers decisions, denials, latency, store errors, sync, connections, gRPC and Envoy rule hits', () => {
    const used = new Set(queries.flatMap(({ uses }) => [...uses.names]))
    for (const name of [
      'ratelimiting_decisions_total',
      'ratelimiting_decision_duration_seconds_bucket',
      'ratelimiting_store_errors_total',
      'ratelimiting_sync_lag_seconds',
      'ratelimiting_sync_pending_hits',
      'ratelimiting_open_connections',
      'ratelimiting_connections_refused_total',
      'ratelimiting_grpc_request_duration_seconds_count',
      'ratelimiting_grpc_request_duration_seconds_bucket',
      'ratelimiting_rule_hits_total',
      'ratelimiting_config_reloads_total',
    ])
      assert.ok(used.has(name), `the dashboard does not use ${name}`)
  })
})
