/**
 * Redis benchmark: our synchronous mode against rate-limiter-flexible's RateLimiterRedis (over
 * ioredis) at 1, 64 and 256 decisions in flight, on one redis-server and on a 3-master Redis
 * Cluster the bench starts for itself on free loopback ports; then our periodic mode on the single
 * node. Reports decisions per second (medians of interleaved rounds, and the median of the
 * per-round ratios), store commands, bytes and CPU time per decision, read from the servers'
 * `INFO` before and after each round, and checks that each limiter admits exactly its limit of
 * 256 concurrent hits of one key.
 *
 * Our engine is loaded as users run it (src/ compiled by TypeScript with the build's options,
 * bench/lib/load-ours.ts), not through tsx.
 *
 *   node --import tsx bench/redis.bench.ts              full run, rewrites docs/BENCHMARKS-redis.md
 *   node --import tsx bench/redis.bench.ts --sync       the synchronous comparison only, prints only
 *   node --import tsx bench/redis.bench.ts --quick      a smoke run in seconds, prints only
 *   --single / --cluster                                one topology only; --source: src/ through tsx
 *   --before=<dir>                                      adds our synchronous mode built from another
 *                                                       copy of src/, such as the last commit's:
 *                                                       mkdir -p .tmp/before && git archive HEAD src | tar -x -C .tmp/before
 *                                                       (then --before=.tmp/before/src)
 */
import { readFileSync, writeFileSync } from 'node:fs'
import { cpus, loadavg } from 'node:os'
import { relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { RateLimiterRedis } from 'rate-limiter-flexible'
import type { RedisStrategy as RedisStrategyClass } from '../src/strategies/redis/index.js'
import { median } from './lib/harness.js'
import { loadOurs } from './lib/load-ours.js'
import { admittedUnderConcurrency, type BenchRedis, cluster, singleNode } from './lib/redis-bench.js'
import { interleavedRounds, log, type RoundSample } from './lib/stores.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const syncOnly = args.includes('--sync')
const write = args.includes('--write') || (!quick && !syncOnly && !args.includes('--no-write'))
const topologies = args.includes('--single') ? [singleNode] : args.includes('--cluster') ? [cluster] : [singleNode, cluster]
const ROUNDS = quick ? 1 : 7
const ROUND_MS = quick ? 300 : 1000
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)
const SYNC_IN_FLIGHT = [1, 64, 256]
const PERIODIC_IN_FLIGHT = [1, 256]
const PACED_RATE = 50_000 // decisions/s of the paced periodic row
const SYNC_RATE = 0.1 // s
const LIMIT = 1e9 // every hit allowed: this measures the cost of a decision, not of a refusal
const EXACT_LIMIT = 100 // the limit of the exactness check, with 256 hits at once

const engine = await loadOurs(args.includes('--source') ? 'source' : 'build')
const beforeDir = args.find((a) => a.startsWith('--before='))?.slice('--before='.length)
const before = beforeDir === undefined ? undefined : await loadOurs('build', resolve(beforeDir))

interface Engine {
  readonly RateLimiting: typeof engine.ours.RateLimiting
  readonly RedisStrategy: typeof RedisStrategyClass
}
const load = async (e: typeof engine): Promise<Engine> => ({
  RateLimiting: e.ours.RateLimiting,
  RedisStrategy: (await e.load<{ RedisStrategy: typeof RedisStrategyClass }>('strategies/redis/index.ts')).RedisStrategy,
})
const current = await load(engine)
const previous = before === undefined ? undefined : await load(before)

interface Subject {
  readonly name: string
  /** Decisions between two yields to the event loop (local decisions never yield by themselves). */
  readonly batch: number
  /** Decisions per second to pace to; unpaced when absent. */
  readonly pace?: number
  readonly decide: (key: string) => unknown
  close(): Promise<void>
}

const SYNC = 'ours, synchronous (syncRate 0)'
const SYNC_BEFORE = 'ours before this change, synchronous'
const SYNC_CACHED = 'ours, synchronous, clock: cachedClock (not the default)'
const RLF = 'rate-limiter-flexible RateLimiterRedis'

function ours(
  redis: BenchRedis,
  name: string,
  syncRate: number,
  batch: number,
  limit = LIMIT,
  pace?: number,
  batchAcrossSlots = false,
  { RateLimiting, RedisStrategy }: Engine = current,
  clock?: () => number,
): Subject {
  const client = redis.client()
  const strategy = new RedisStrategy({ client, prefix: 'bench', batchAcrossSlots })
  const rl = RateLimiting.newInstance(`bench-redis-${name}-${limit}`)
  rl.new({ namespace: 'bench', windowSizes: [60], syncRate, strategy, ...(clock === undefined ? {} : { clock }) })
  const limiter = rl.limiter({ namespace: 'bench', limits: [{ limit, window: 60 }] })
  return {
    name,
    batch,
    ...(pace === undefined ? {} : { pace }),
    decide: (key) => limiter.hit(key),
    close: async () => {
      await rl.close()
      client.disconnect()
    },
  }
}

function flexible(redis: BenchRedis, limit = LIMIT): Subject {
  const client = redis.client()
  const rlf = new RateLimiterRedis({ storeClient: client, points: limit, duration: 60, keyPrefix: `rlflx-bench-${limit}` })
  return { name: RLF, batch: 1, decide: (key) => rlf.consume(key), close: async () => client.disconnect() }
}

const FLOOR = 'floor: ioredis EVALSHA of a script that only returns'

// What any limiter over ioredis pays at least: one EVALSHA round trip of one key, nothing done.
function floor(redis: BenchRedis): Subject {
  const client = redis.client()
  client.defineCommand('benchFloor', { numberOfKeys: 1, lua: 'return 1' })
  const call = (client as unknown as { benchFloor(key: string): Promise<unknown> }).benchFloor.bind(client)
  return { name: FLOOR, batch: 1, decide: (key) => call(`floor:{${key}}`), close: async () => client.disconnect() }
}

interface Row {
  readonly subject: string
  readonly topology: string
  readonly inFlight: number
  readonly rate: number
  readonly samples: RoundSample[]
}

const per = (samples: RoundSample[], f: (s: RoundSample) => number) => median(samples.map(f))
const perDecision = (samples: RoundSample[], counter: string) => per(samples, (s) => (s.counters[counter] ?? 0) / s.decisions)
const fmt = (value: number, digits = 1) =>
  value === 0 ? '0' : value < 0.001 ? value.toExponential(1) : value.toFixed(value < 0.1 ? 3 : digits)
const int = (value: number) => Math.round(value).toLocaleString('en-US')

async function measure(redis: BenchRedis, subjects: Subject[], inFlight: number): Promise<Row[]> {
  await redis.flush()
  // warm-up: connections, scripts loaded, every key's windows created, the code optimized
  for (const subject of subjects) await interleavedRounds([subject], KEYS, inFlight, 1, quick ? 100 : 500)
  const samples = await interleavedRounds(subjects, KEYS, inFlight, ROUNDS, ROUND_MS, () => redis.counters())
  const rows: Row[] = []
  for (const [i, subject] of subjects.entries()) {
    await subject.close()
    const mine = samples[i] ?? []
    const rate = per(mine, rateOf)
    log(`${redis.topology}, ${subject.name}, ${inFlight} in flight: ${int(rate)} decisions/s`)
    rows.push({ subject: subject.name, topology: redis.topology, inFlight, rate, samples: mine })
  }
  return rows
}

const rateOf = (s: RoundSample) => s.decisions / s.seconds

// Ratio of the medians | median of the per-round ratios | their range (a round of `a` against the
// round of `b` next to it).
function ratios(a: Row, b: Row): string {
  const rounds = a.samples.map((s, r) => rateOf(s) / rateOf(b.samples[r] as RoundSample))
  const x = (v: number) => `${v.toFixed(2)}x`
  return `${x(a.rate / b.rate)} | ${x(median(rounds))} | ${x(Math.min(...rounds))}-${x(Math.max(...rounds))}`
}

function detailRow(row: Row): string {
  const s = row.samples
  return `| ${row.subject} | ${row.topology} | ${row.inFlight} | ${int(row.rate)} | ${fmt(perDecision(s, 'sent'), 3)} | ${fmt(perDecision(s, 'executed'), 3)} | ${fmt(per(s, (x) => x.cpuUs / x.decisions))} | ${fmt(perDecision(s, 'serverCpuUs'))} | ${fmt(perDecision(s, 'bytesIn'), 0)} | ${fmt(perDecision(s, 'bytesOut'), 0)} |`
}

const loadAtStart = loadavg()[0] as number
const syncRows: Row[] = []
const periodicRows: Row[] = []
const ratioRows: string[] = []
const floorRows: string[] = []
const cachedRows: string[] = []
const exactness: string[] = []
let version = 'unknown'

for (const start of topologies) {
  const redis = await start()
  try {
    version = await redis.version()
    for (const inFlight of SYNC_IN_FLIGHT) {
      const subjects = [ours(redis, SYNC, 0, 1), flexible(redis)]
      subjects.push(floor(redis), ours(redis, SYNC_CACHED, 0, 1, LIMIT, undefined, false, current, engine.ours.cachedClock))
      if (previous !== undefined) subjects.push(ours(redis, SYNC_BEFORE, 0, 1, LIMIT, undefined, false, previous))
      const [mine, theirs, bottom, cached, old] = await measure(redis, subjects, inFlight)
      syncRows.push(mine as Row, theirs as Row, bottom as Row, cached as Row)
      if (old !== undefined) syncRows.push(old)
      cachedRows.push(`| ${redis.topology} | ${inFlight} | ${int((cached as Row).rate)} | ${ratios(cached as Row, theirs as Row)} |`)
      floorRows.push(
        `| ${redis.topology} | ${inFlight} | ${int((bottom as Row).rate)} | ${((theirs as Row).rate / (bottom as Row).rate).toFixed(2)} | ${((mine as Row).rate / (bottom as Row).rate).toFixed(2)} |`,
      )
      const line = `| ${redis.topology} | ${inFlight} | ${int((mine as Row).rate)} | ${int((theirs as Row).rate)} | ${ratios(mine as Row, theirs as Row)} |`
      ratioRows.push(old === undefined ? line : `${line} ${int(old.rate)} | ${ratios(old, theirs as Row)} |`)
    }
    // exactly the limit admitted: 256 hits of one fresh key at once
    const exactOurs = ours(redis, 'exact', 0, 1, EXACT_LIMIT)
    const exactTheirs = flexible(redis, EXACT_LIMIT)
    const admittedOurs = await admittedUnderConcurrency(
      async (k) => ((await exactOurs.decide(k)) as { allowed: boolean }).allowed,
      'exact-key',
      256,
    )
    const admittedTheirs = await admittedUnderConcurrency(
      (k) =>
        (exactTheirs.decide(k) as Promise<unknown>).then(
          () => true,
          () => false,
        ),
      'exact-key',
      256,
    )
    await exactOurs.close()
    await exactTheirs.close()
    exactness.push(`${redis.topology}: ours admitted ${admittedOurs}, RateLimiterRedis ${admittedTheirs}`)
    log(`exactness, ${exactness[exactness.length - 1]}`)
    if (!syncOnly && redis.topology === 'single node') {
      for (const inFlight of PERIODIC_IN_FLIGHT) {
        const periodic = [ours(redis, `ours, periodic (syncRate ${SYNC_RATE} s)`, SYNC_RATE, 256)]
        // the previous code's periodic mode in the same rounds: what this change must not slow down
        if (previous !== undefined)
          periodic.push(ours(redis, 'ours before this change, periodic', SYNC_RATE, 256, LIMIT, undefined, false, previous))
        periodicRows.push(...(await measure(redis, periodic, inFlight)))
      }
      const paced = `ours, periodic (syncRate ${SYNC_RATE} s), paced to ${PACED_RATE.toLocaleString('en-US')}/s`
      periodicRows.push(...(await measure(redis, [ours(redis, paced, SYNC_RATE, 100, LIMIT, PACED_RATE)], 1)))
      const across = `ours, periodic (syncRate ${SYNC_RATE} s), batchAcrossSlots`
      periodicRows.push(...(await measure(redis, [ours(redis, across, SYNC_RATE, 256, LIMIT, undefined, true)], 256)))
    }
  } finally {
    await redis.stop()
  }
}
engine.cleanup()
before?.cleanup()

const here = fileURLToPath(import.meta.url)
const command = ['node', ...process.execArgv, relative(process.cwd(), here), ...args].join(' ')
const docPath = resolve(here, '..', '..', 'docs', 'BENCHMARKS-redis.md')
// the notes and the runs recorded before this one stay, below the new figures
let earlier = ''
try {
  const old = readFileSync(docPath, 'utf8')
  const at = old.indexOf('\n## Notes')
  if (at >= 0) earlier = old.slice(at)
} catch {
  // no document yet: nothing to keep
}
const text = `# Benchmarks: Redis

Decisions per second and, per decision, store commands, bytes and CPU time, for one limit of a
60 s window over 1,000 keys, every hit allowed. "In flight" is the number of decisions in progress
at once (async workers in one process). Each subject has one ioredis client (default options; a
Cluster client on the cluster) to servers the bench starts for itself, so that \`INFO\`, read
before and after every round, counts that subject's commands only. ${ROUNDS} rounds of ${ROUND_MS / 1000} s per
subject, the subjects' rounds interleaved (A B, B A, ...); medians.

## Synchronous mode against RateLimiterRedis

| topology | in flight | ours, synchronous: decisions/s | RateLimiterRedis: decisions/s | ratio of the medians | median of the per-round ratios | per-round ratios, range |${previous === undefined ? '' : ' before this change: decisions/s | ratio of the medians | median of the per-round ratios | per-round ratios, range |'}
|---|---:|---:|---:|---:|---:|---:|${previous === undefined ? '' : '---:|---:|---:|---:|'}
${ratioRows.join('\n')}

The same synchronous mode with \`clock: cachedClock\` (the default of local and periodic
namespaces, which arms a 1 ms timer per reading; see the notes below) instead of its own default,
\`Date.now()\` read per decision, against RateLimiterRedis in the same rounds:

| topology | in flight | ours, clock cachedClock: decisions/s | ratio of the medians | median of the per-round ratios | per-round ratios, range |
|---|---:|---:|---:|---:|---:|
${cachedRows.join('\n')}

How close each comes to the floor, an EVALSHA of a script that only returns (one key, one
round trip, on the same kind of ioredis client): no limiter over ioredis can do better.

| topology | in flight | floor: decisions/s | RateLimiterRedis / floor | ours / floor |
|---|---:|---:|---:|---:|
${floorRows.join('\n')}

Exactly the limit admitted, ${EXACT_LIMIT} of 256 concurrent hits of one key: ${exactness.join('; ')}.

| subject | topology | in flight | decisions/s | commands sent/decision | commands executed/decision | client CPU µs/decision | Redis CPU µs/decision | bytes to Redis/decision | bytes from Redis/decision |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|
${syncRows.map(detailRow).join('\n')}

${
  periodicRows.length === 0
    ? ''
    : `## Periodic mode (single node)

| subject | topology | in flight | decisions/s | commands sent/decision | commands executed/decision | client CPU µs/decision | Redis CPU µs/decision | bytes to Redis/decision | bytes from Redis/decision |
|---|---|---:|---:|---:|---:|---:|---:|---:|---:|
${periodicRows.map(detailRow).join('\n')}

`
}Run on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared
with other work: load average ${loadAtStart.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end), redis-server ${version} on
loopback (no persistence), ioredis ${(await import('ioredis/package.json', { with: { type: 'json' } })).default.version}, rate-limiter-flexible ${(await import('rate-limiter-flexible/package.json', { with: { type: 'json' } })).default.version}.

Command:

    ${command}
${beforeDir === undefined ? '' : `\nThe rows "before this change" run the code in \`${beforeDir}\`, made with \`git archive <commit> src\` (see the bench's header).\n`}`
process.stdout.write(`${text}${earlier}\n`)
if (write) {
  writeFileSync(docPath, `${text}${earlier}`)
  log(`wrote ${relative(process.cwd(), docPath)}`)
}
