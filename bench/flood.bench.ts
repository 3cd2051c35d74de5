/**
 * Flood benchmark: the service under ids it has never seen, and under many held keys.
 *
 * 1. A flood of new user ids through `ratelimiting serve` on the memory store, for each
 *    algorithm: 2,000,000 requests, each with an id of its own, in 10 phases; per phase the
 *    requests per second, the p99 latency and the service's RSS. With a window of an hour every
 *    id stays, and the memory algorithms hold at most 1,000,000 users, so the second half of the
 *    flood evicts one user per request: the end must serve within 2x the start's rate.
 * 2. 1,000,000 held keys on Redis with sliding-window-counter-algo and a periodic sync, 1% of
 *    them active: the sync lag (ratelimiting_sync_lag_seconds, sampled) against the sync rate, and
 *    the Redis commands per sync (INFO commandstats, before and after, over the syncs counted by
 *    ratelimiting_syncs_total).
 *
 *   npm run build && node --import tsx bench/flood.bench.ts     full run (15 to 60 minutes), writes docs/BENCHMARKS-flood.md
 *   node --import tsx bench/flood.bench.ts --only flood         one part; the file keeps the other part's section
 *   node --import tsx bench/flood.bench.ts --quick              200,000 ids and 100,000 held keys, prints only
 *
 * Options: --ids N (flood requests per algorithm), --held N, --active-share F (0.01),
 * --sync-rate S (1), --active-seconds S (30), --connections N (50), --only flood|held,
 * --algos a,b (use-algo names), --write / --no-write.
 *
 * The service runs in its own process (dist/ when built), autocannon in this one, a
 * redis-server of the benchmark's own for part 2. Every figure is from one run on a shared
 * machine: compare the phases of one run, not runs of different days.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { cpus, loadavg } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { root, rssMb, startRedisProcess, startServiceProcess, type ServiceProcess } from './lib/service-process.js'

const args = process.argv.slice(2)
const flag = (name: string) => args.includes(name)
function option(name: string, fallback: number): number {
  const at = args.indexOf(name)
  if (at < 0) return fallback
  const value = Number(args[at + 1])
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} takes a positive number, got ${String(args[at + 1])}`)
  return value
}
function text(name: string): string | undefined {
  const at = args.indexOf(name)
  return at < 0 ? undefined : args[at + 1]
}

const quick = flag('--quick')
const ids = option('--ids', quick ? 200_000 : 2_000_000)
const held = option('--held', quick ? 100_000 : 1_000_000)
const activeShare = option('--active-share', 0.01)
const syncRate = option('--sync-rate', 1)
const activeSeconds = option('--active-seconds', quick ? 10 : 30)
const connections = option('--connections', 50)
const only = text('--only')
const algos = (text('--algos') ?? 'sliding-window-algo,fixed-window-algo,sliding-window-counter-algo').split(',')
const write = flag('--no-write') ? false : flag('--write') || !quick
const PHASES = 10

const log = (line: string) => process.stderr.write(`[flood] ${line}\n`)

/** One request per call, each with the id `next()` gives: autocannon runs this per request. */
function requestsWith(next: () => string): autocannon.Request[] {
  return [
    {
      method: 'POST',
      path: '/v1/check',
      headers: { 'content-type': 'application/json' },
      setupRequest: (req) => ({ ...req, body: `{"userId":"${next()}"}` }),
    },
  ]
}

interface Phase {
  readonly rps: number
  readonly p99: number
  readonly rssMb: number
  readonly other: number
}

/** Sends `amount` requests and measures them. */
async function phase(service: ServiceProcess, amount: number, next: () => string): Promise<Phase> {
  // timed here: autocannon's own duration is too coarse for short phases
  const startedMs = performance.now()
  const result = await autocannon({ url: service.url, connections, amount, requests: requestsWith(next) })
  const seconds = (performance.now() - startedMs) / 1000
  const status = result.statusCodeStats ?? {}
  const decided = (status['200']?.count ?? 0) + (status['429']?.count ?? 0)
  return {
    rps: result.requests.total / seconds,
    p99: result.latency.p99,
    rssMb: rssMb(service.pid),
    other: result.requests.total - decided + result.errors,
  }
}

interface FloodResult {
  readonly algo: string
  readonly phases: readonly Phase[]
  readonly startRssMb: number
}

async function flood(algo: string): Promise<FloodResult> {
  // an hour's window: every id stays in it, so past 1,000,000 users every request evicts one
  // (with a minute's, stale users are swept or the bucket dropped before the table fills)
  const service = await startServiceProcess(
    `rate-limiter: { use-algo: ${algo}, max-requests: 100, window-size: 3600 }\nstore: { type: memory }\n`,
  )
  try {
    const startRss = rssMb(service.pid)
    // warm-up on ids of their own, not counted in the flood
    let w = 0
    await phase(service, Math.min(20_000, ids / 10), () => `warm-${w++}`)
    let n = 0
    const phases: Phase[] = []
    for (let p = 0; p < PHASES; p++) {
      const result = await phase(service, Math.floor(ids / PHASES), () => `flood-${n++}`)
      phases.push(result)
      log(`${algo}: phase ${p + 1}/${PHASES}: ${Math.round(result.rps)} req/s, p99 ${result.p99} ms, RSS ${result.rssMb.toFixed(0)} MB`)
    }
    return { algo, phases, startRssMb: startRss }
  } finally {
    await service.stop()
  }
}

interface HeldResult {
  /** The store's script calls: one per hash slot (`batch-across-slots: false`), or `batch-across-slots` (the default on one server). */
  readonly calls: string
  readonly held: number
  readonly active: number
  readonly fillRps: number
  readonly rps: number
  readonly p99: number
  readonly syncs: number
  readonly lagMedian: number
  readonly lagMax: number
  readonly commandsPerSync: number
  readonly scriptsPerSync: number
  readonly localKeys: number
  readonly serviceRssMb: number
  readonly redisMb: number
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted.length === 0 ? Number.NaN : (sorted[sorted.length >> 1] as number)
}

async function heldKeys(batchAcrossSlots: boolean): Promise<HeldResult> {
  const redis = await startRedisProcess()
  const batch = `, batch-across-slots: ${batchAcrossSlots}`
  const service = await startServiceProcess(
    `rate-limiter: { use-algo: sliding-window-counter-algo, max-requests: 100, window-size: 60, sync-rate: ${syncRate} }\nstore: { type: redis, url: "${redis.url}"${batch} }\n`,
  )
  try {
    let n = 0
    const fill = await phase(service, held, () => `held-${n++}`)
    log(`held keys: ${held} filled at ${Math.round(fill.rps)} req/s`)
    const active = Math.max(1, Math.round(held * activeShare))
    // one sync after the fill, so the measured syncs only carry the active traffic
    await new Promise((r) => setTimeout(r, 2 * syncRate * 1000))
    const callsBefore = await redis.commandCalls()
    const syncsBefore = await service.metric('ratelimiting_syncs_total', 'policy="default"')
    const lags: number[] = []
    let sampling = true
    const sampler = (async () => {
      while (sampling) {
        lags.push(await service.metric('ratelimiting_sync_lag_seconds', 'policy="default"'))
        await new Promise((r) => setTimeout(r, 250))
      }
    })()
    let i = 0
    const activeStartedMs = performance.now()
    const result = await autocannon({
      url: service.url,
      connections,
      duration: activeSeconds,
      requests: requestsWith(() => `held-${i++ % active}`),
    })
    const activeSec = (performance.now() - activeStartedMs) / 1000
    sampling = false
    await sampler
    const syncs = (await service.metric('ratelimiting_syncs_total', 'policy="default"')) - syncsBefore
    const callsAfter = await redis.commandCalls()
    let commands = 0
    for (const [name, calls] of callsAfter) if (name !== 'info' && name !== 'ping') commands += calls - (callsBefore.get(name) ?? 0)
    const scripts =
      (callsAfter.get('evalsha') ?? 0) - (callsBefore.get('evalsha') ?? 0) + (callsAfter.get('eval') ?? 0) - (callsBefore.get('eval') ?? 0)
    return {
      calls: batchAcrossSlots ? '`batch-across-slots`' : 'one per slot',
      held,
      active,
      fillRps: fill.rps,
      rps: result.requests.total / activeSec,
      p99: result.latency.p99,
      syncs,
      lagMedian: median(lags),
      lagMax: Math.max(...lags),
      commandsPerSync: commands / Math.max(1, syncs),
      scriptsPerSync: scripts / Math.max(1, syncs),
      localKeys: await service.metric('ratelimiting_local_keys', 'policy="default"'),
      serviceRssMb: rssMb(service.pid),
      redisMb: await redis.usedMemoryMb(),
    }
  } finally {
    await service.stop()
    await redis.stop()
  }
}

const fmt = (x: number, digits = 0) =>
  Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : 'n/a'

const started = Date.now()
const loadAtStart = loadavg()[0] as number
const floods: FloodResult[] = []
if (only !== 'held') for (const algo of algos) floods.push(await flood(algo))
const heldResults = only === 'flood' ? [] : [await heldKeys(false), await heldKeys(true)]

const command = ['node', ...process.execArgv, path.relative(root, fileURLToPath(import.meta.url)), ...args].join(' ')
const measured = `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus()[0]?.model.trim() ?? 'an unknown CPU'} (${cpus().length} cores, shared with other jobs), Node ${process.version}; load average ${loadAtStart.toFixed(2)} at start, ${(loadavg()[0] as number).toFixed(2)} at the end; autocannon in the bench process, ${connections} connections, the service in its own process. Reproduce with \`npm run build && ${command}\`.`

const FLOOD_HEADING = '## A flood of new ids (memory store)'
const HELD_HEADING = '## Many held keys, few active, periodic sync on Redis'
const sections: string[] = []
if (floods.length > 0) {
  sections.push(
    [
      FLOOD_HEADING,
      '',
      measured,
      '',
      `${fmt(ids)} requests per algorithm, each with a user id never seen before, in ${PHASES} phases of ${fmt(ids / PHASES)}; 100 per 3,600 s, so every request is admitted and every id stays in the window. The memory algorithms hold at most 1,000,000 users (the engine's table 1,000,000 key-windows): past that, every request evicts one.`,
      '',
      '| algorithm | req/s, first phase | req/s, last phase | last / first | p99 first | p99 last | RSS at start | RSS at the end | errors |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...floods.map((f) => {
        const first = f.phases[0] as Phase
        const last = f.phases[f.phases.length - 1] as Phase
        const errors = f.phases.reduce((s, p) => s + p.other, 0)
        return `| ${f.algo} | ${fmt(first.rps)} | ${fmt(last.rps)} | ${fmt(last.rps / first.rps, 2)} | ${first.p99} ms | ${last.p99} ms | ${fmt(f.startRssMb)} MB | ${fmt(last.rssMb)} MB | ${errors} |`
      }),
      '',
      'Requests per second by phase:',
      '',
      `| algorithm | ${Array.from({ length: PHASES }, (_, i) => `${i + 1}`).join(' | ')} |`,
      `|---|${Array.from({ length: PHASES }, () => '---:').join('|')}|`,
      ...floods.map((f) => `| ${f.algo} | ${f.phases.map((p) => fmt(p.rps)).join(' | ')} |`),
      '',
      'Target: the last phase within 2x of the first (last / first at least 0.5).',
      '',
    ].join('\n'),
  )
}
if (heldResults.length > 0) {
  const fills = heldResults.map((h) => fmt(h.fillRps)).join(' and ')
  const h = heldResults[0] as HeldResult
  sections.push(
    [
      HELD_HEADING,
      '',
      measured,
      '',
      `sliding-window-counter-algo, sync-rate ${syncRate} s, on a redis-server of the benchmark's own. ${fmt(h.held)} requests with distinct ids fill the service's table (at ${fills} req/s); then ${fmt(h.active)} ids (${fmt(activeShare * 100, 1)}%) take all the traffic for ${activeSeconds} s. The lag is \`ratelimiting_sync_lag_seconds\` sampled every 250 ms; the commands are INFO commandstats (every command, those run by scripts included, INFO and PING left out) over the syncs \`ratelimiting_syncs_total\` counted.`,
      '',
      '| script calls | held keys | active | req/s | p99 | syncs | sync lag, median | sync lag, max | max / sync-rate | Redis commands per sync | scripts per sync | keys in the table | service RSS | Redis memory |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...heldResults.map(
        (r) =>
          `| ${r.calls} | ${fmt(r.held)} | ${fmt(r.active)} | ${fmt(r.rps)} | ${r.p99} ms | ${r.syncs} | ${fmt(r.lagMedian, 2)} s | ${fmt(r.lagMax, 2)} s | ${fmt(r.lagMax / syncRate, 1)} | ${fmt(r.commandsPerSync)} | ${fmt(r.scriptsPerSync)} | ${fmt(r.localKeys)} | ${fmt(r.serviceRssMb)} MB | ${fmt(r.redisMb)} MB |`,
      ),
      '',
      'Targets: sync lag at most 2 x sync-rate; Redis commands per sync proportional to the active keys, not the held ones.',
      '',
    ].join('\n'),
  )
}
const report = sections.join('\n')
process.stdout.write(`${report}\n`)
log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s`)
if (write) {
  // a run of one part keeps the other part's section from the file
  const file = path.join(root, 'docs/BENCHMARKS-flood.md')
  const previous = existsSync(file) ? readFileSync(file, 'utf8') : ''
  const kept = (heading: string) => {
    const at = previous.indexOf(heading)
    if (at < 0) return undefined
    const next = previous.indexOf('\n## ', at + heading.length)
    return previous.slice(at, next < 0 ? undefined : next + 1)
  }
  const flood = floods.length > 0 ? sections[0] : kept(FLOOD_HEADING)
  const heldSection = heldResults.length > 0 ? sections[sections.length - 1] : kept(HELD_HEADING)
  const intro = [
    '# Benchmarks: floods of ids and many held keys',
    '',
    'Provisional (shared machine): measured while other jobs ran on the same 2 cores, so compare the phases of one run, not runs of different days.',
    '',
  ].join('\n')
  writeFileSync(file, [intro, flood, heldSection].filter((x) => x !== undefined).join('\n'))
  log(`wrote ${path.relative(process.cwd(), file)}`)
}
