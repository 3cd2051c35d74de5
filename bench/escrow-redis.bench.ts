/**
 * Escrow on Redis against rate-limiter-flexible's RateLimiterRedis (issue 28, targets 3 and 5),
 * with our periodic and synchronous modes beside them for context. On a redis-server of the
 * bench's own (free loopback port), one process, one ioredis client per subject:
 *
 * - **Many keys far below their limits**: 10,000 keys round robin, a limit of 100,000 per 60 s
 *   that no key nears. Decisions/s at 1 and 64 in flight, Redis script calls and commands per
 *   decision (INFO commandstats, commands run inside scripts included), the share of decisions
 *   that waited on the store (`hit()` returned a Promise; RateLimiterRedis: every one), and p50 /
 *   p99 of one decision's time (a synchronous answer timed as it returns, a Promise until it
 *   settles).
 * - **Mostly denying**: one hot key at its limit (100 per 60 s), every decision on it.
 *
 * "In flight" is the number of async workers; a worker whose decision comes back synchronously
 * makes up to 256 before it yields to the event loop (as `bench/redis.bench.ts` does), one that
 * gets a Promise awaits it. Rounds of every subject are interleaved (A B C D, D C B A, …), so the
 * ratios compare rounds run side by side; medians of the rounds.
 *
 * Escrow grants a key's budget at its first hit in a window and then decides locally until the
 * window ends, so the measured rounds (after a warm-up that hits every key) show the local path;
 * a window's first hits (10,000 grants, batched per event-loop turn) fall in a round only when
 * a window boundary does. The table also gives the cost of those grants spread over a window.
 *
 *   node --import tsx bench/escrow-redis.bench.ts            7 rounds of 1 s, prints the section
 *   node --import tsx bench/escrow-redis.bench.ts --quick    a smoke run in seconds
 *   --rounds N, --round-ms MS, --source (src/ through tsx instead of the build's compile),
 *   --write (replaces its section of docs/BENCHMARKS-escrow.md)
 */
import { cpus, loadavg } from 'node:os'
import { relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { RateLimiterRedis } from 'rate-limiter-flexible'
import type { BUILT_IN_STORES as Capabilities } from '../src/strategies/capabilities.js'
import type { RedisStrategy as RedisStrategyClass } from '../src/strategies/redis/index.js'
import { startRedisServer } from '../test/support/redis-server.js'
import { median } from './lib/harness.js'
import { loadOurs } from './lib/load-ours.js'
import { replaceSection } from './lib/report.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const write = args.includes('--write')
const intOption = (name: string, fallback: number) => {
  const at = args.indexOf(name)
  const value = at < 0 ? fallback : Number(args[at + 1])
  if (!Number.isSafeInteger(value) || value <= 0) throw new RangeError(`${name} takes a positive integer, got ${args[at + 1]}`)
  return value
}
const ROUNDS = intOption('--rounds', quick ? 1 : 7)
const ROUND_MS = intOption('--round-ms', quick ? 300 : 1000)
const IN_FLIGHT = [1, 64]
const KEYS = Array.from({ length: 10_000 }, (_, i) => `user-${i}`)
const FAR_LIMIT = 100_000 // per 60 s: no key nears it
const HOT_LIMIT = 100 // per 60 s: the hot key sits at it
const SYNC_RATE = 1 // s, of the periodic and escrow namespaces
const BATCH = 256 // synchronous decisions a worker makes before it yields
const here = fileURLToPath(import.meta.url)
/** Heading of this bench's section of docs/BENCHMARKS-escrow.md. */
const SECTION_HEADING = '## Escrow against RateLimiterRedis: speed, store calls and latency'

const engine = await loadOurs(args.includes('--source') ? 'source' : 'build')
const { RedisStrategy } = await engine.load<{ RedisStrategy: typeof RedisStrategyClass }>('strategies/redis/index.ts')
const { BUILT_IN_STORES } = await engine.load<{ BUILT_IN_STORES: typeof Capabilities }>('strategies/capabilities.ts')
const escrowServed = BUILT_IN_STORES.redis.supportsEscrow && typeof RedisStrategy.prototype.escrow === 'function'
const log = (line: string) => process.stderr.write(`[escrow-redis] ${line}\n`)

/** A redis-server of the bench's own, one per subject: its INFO counts that subject's commands alone. */
interface Store {
  readonly url: string
  readonly admin: Redis
}

interface Subject {
  readonly name: string
  readonly store: Store
  /** One decision: a value, or a Promise of one (a rejection is a denial, as RateLimiterRedis answers). */
  decide(key: string): unknown
  close(): Promise<void>
}

const ESCROW = `ours, escrow (syncRate ${SYNC_RATE} s)`
const PERIODIC = `ours, periodic (syncRate ${SYNC_RATE} s)`
const SYNCHRONOUS = 'ours, synchronous (syncRate 0)'
const RLF = 'rate-limiter-flexible RateLimiterRedis'
const RLF_BLOCK = 'RateLimiterRedis, inMemoryBlockOnConsumed'

let instances = 0
async function ours(store: Store, name: string, syncRate: number, escrow: boolean, limit: number): Promise<Subject> {
  const client = new Redis(store.url)
  const strategy = new RedisStrategy({ client, prefix: `bench-${++instances}` })
  const rl = engine.ours.RateLimiting.newInstance(`escrow-redis-${instances}`)
  rl.new({ namespace: 'bench', windowSizes: [60], syncRate, strategy, ...(escrow ? { escrow: true } : {}) })
  const limiter = rl.limiter({ namespace: 'bench', limits: [{ limit, window: 60 }] })
  return {
    name,
    store,
    decide: (key) => limiter.hit(key),
    close: async () => {
      await rl.close()
      client.disconnect()
    },
  }
}

function flexible(store: Store, name: string, limit: number, blockOnConsumed: boolean): Subject {
  const client = new Redis(store.url)
  const rlf = new RateLimiterRedis({
    storeClient: client,
    points: limit,
    duration: 60,
    keyPrefix: `rlflx-${++instances}`,
    ...(blockOnConsumed ? { inMemoryBlockOnConsumed: limit, inMemoryBlockDuration: 60 } : {}),
  })
  return { name, store, decide: (key) => rlf.consume(key), close: async () => client.disconnect() }
}

/** One round of one subject. */
interface Round {
  readonly decisions: number
  readonly seconds: number
  readonly waited: number
  readonly allowed: number
  readonly p50Us: number
  readonly p99Us: number
  readonly scripts: number
  readonly commands: number
  readonly redisCpuUs: number
  readonly clientCpuUs: number
}

const SCRIPTS = new Set(['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'fcall_ro'])
const OWN = new Set(['info', 'ping', 'config|resetstat', 'flushall', 'client|setinfo', 'client|setname', 'hello', 'select', 'command'])

async function redisCounters(admin: Redis): Promise<{ scripts: number; commands: number; cpuUs: number }> {
  const text = await admin.info('all')
  let scripts = 0
  let commands = 0
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const name = m[1] as string
    if (OWN.has(name)) continue
    commands += Number(m[2])
    if (SCRIPTS.has(name)) scripts += Number(m[2])
  }
  const number = (field: string) => Number(new RegExp(`^${field}:([\\d.]+)`, 'm').exec(text)?.[1] ?? 0)
  return { scripts, commands, cpuUs: (number('used_cpu_user') + number('used_cpu_sys')) * 1e6 }
}

const isAllowed = (value: unknown) => (value as { allowed?: boolean }).allowed !== false

/** Runs `inFlight` workers over `keys` for `ms`, timing every decision. */
async function run(subject: Subject, keys: readonly string[], inFlight: number, ms: number) {
  let latencies = new Float64Array(1 << 20)
  let n = 0
  let waited = 0
  let allowed = 0
  const record = (us: number) => {
    if (n === latencies.length) {
      const grown = new Float64Array(latencies.length * 2)
      grown.set(latencies)
      latencies = grown
    }
    latencies[n++] = us
  }
  const started = performance.now()
  const deadline = started + ms
  const worker = async (w: number) => {
    let i = (w * 7919) % keys.length
    while (performance.now() < deadline) {
      for (let b = 0; b < BATCH; b++) {
        const key = keys[i] as string
        i = i + 1 === keys.length ? 0 : i + 1
        const t0 = performance.now()
        const decision = subject.decide(key)
        if (decision instanceof Promise) {
          waited++
          const ok = await decision.then(isAllowed, () => false)
          record((performance.now() - t0) * 1000)
          if (ok) allowed++
          // a worker that waited has yielded: it goes on with a new batch
          break
        }
        record((performance.now() - t0) * 1000)
        if (isAllowed(decision)) allowed++
      }
      // let timers (the periodic sync) and the other workers run between batches
      await new Promise((r) => setImmediate(r))
    }
  }
  await Promise.all(Array.from({ length: inFlight }, (_, w) => worker(w)))
  const seconds = (performance.now() - started) / 1000
  const sorted = latencies.subarray(0, n).sort()
  const q = (p: number) => (n === 0 ? Number.NaN : (sorted[Math.min(n - 1, Math.floor(p * n))] as number))
  return { decisions: n, seconds, waited, allowed, p50Us: q(0.5), p99Us: q(0.99) }
}

// after each round: the periodic and escrow subjects' last sync of the round's hits (counted as
// theirs), and no sync of one subject running in the next one's round
const SETTLE_MS = 2 * SYNC_RATE * 1000 + 200

/** Interleaved rounds of `subjects`, with their Redis's counters around each (and its settling). */
async function rounds(subjects: readonly Subject[], keys: readonly string[], inFlight: number): Promise<Round[][]> {
  const out = subjects.map(() => [] as Round[])
  for (let r = 0; r < ROUNDS; r++) {
    const order = subjects.map((_, i) => i)
    if (r % 2 === 1) order.reverse()
    for (const i of order) {
      const subject = subjects[i] as Subject
      const before = await redisCounters(subject.store.admin)
      const cpu = process.cpuUsage()
      const result = await run(subject, keys, inFlight, ROUND_MS)
      const used = process.cpuUsage(cpu)
      await sleep(SETTLE_MS)
      const after = await redisCounters(subject.store.admin)
      out[i]?.push({
        ...result,
        scripts: after.scripts - before.scripts,
        commands: after.commands - before.commands,
        redisCpuUs: after.cpuUs - before.cpuUs,
        clientCpuUs: used.user + used.system,
      })
    }
  }
  return out
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Every key hit once, then again after the escrow learning period, so the rounds see steady state. */
async function warm(subject: Subject, keys: readonly string[], learn: boolean): Promise<void> {
  const once = async () => {
    const pending: Promise<unknown>[] = []
    for (const key of keys) {
      const d = subject.decide(key)
      if (d instanceof Promise) pending.push(d.catch(() => undefined))
    }
    await Promise.all(pending)
  }
  await once()
  // a store's first escrow call begins its epoch: grants are refused for learnMs (2 syncs + 2 store timeouts)
  if (learn) await sleep(2 * SYNC_RATE * 1000 + 2 * 1000 + 500)
  await once()
  await run(subject, keys, 64, quick ? 200 : 1000)
}

interface Row {
  readonly scenario: string
  readonly subject: string
  readonly inFlight: number
  readonly rounds: Round[]
}

const rate = (r: Round) => r.decisions / r.seconds
const per = (rs: Round[], f: (r: Round) => number) => median(rs.map((r) => f(r) / r.decisions))

const servers = await Promise.all(Array.from({ length: 5 }, () => startRedisServer()))
const stores: Store[] = servers.map((server) => ({ url: server.url, admin: new Redis(server.url) }))
const admin = (stores[0] as Store).admin
const storeAt = (i: number) => stores[i] as Store
const loadAtStart = loadavg()[0] as number
const rows: Row[] = []
const ratioLines: string[] = []
try {
  const version = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? 'unknown'
  log(`redis-server ${version}, one per subject; escrow on Redis: ${escrowServed ? 'served' : 'not available'}`)
  const scenarios = [
    { scenario: 'many keys', keys: KEYS, limit: FAR_LIMIT },
    { scenario: 'one hot key at its limit', keys: ['hot'], limit: HOT_LIMIT },
  ]
  for (const { scenario, keys, limit } of scenarios) {
    for (const inFlight of IN_FLIGHT) {
      await Promise.all(stores.map((s) => s.admin.flushall()))
      const subjects: Subject[] = []
      if (escrowServed) subjects.push(await ours(storeAt(0), ESCROW, SYNC_RATE, true, limit))
      subjects.push(await ours(storeAt(1), PERIODIC, SYNC_RATE, false, limit))
      subjects.push(await ours(storeAt(2), SYNCHRONOUS, 0, false, limit))
      subjects.push(flexible(storeAt(3), RLF, limit, false))
      if (keys.length === 1) subjects.push(flexible(storeAt(4), RLF_BLOCK, limit, true))
      await Promise.all(subjects.map((s) => warm(s, keys, s.name === ESCROW)))
      const measured = await rounds(subjects, keys, inFlight)
      for (const [i, s] of subjects.entries()) {
        const row: Row = { scenario, subject: s.name, inFlight, rounds: measured[i] as Round[] }
        rows.push(row)
        log(
          `${scenario}, ${s.name}, ${inFlight} in flight: ${Math.round(median(row.rounds.map(rate))).toLocaleString('en-US')}/s, ${per(row.rounds, (r) => r.commands).toFixed(4)} commands/decision, waited ${(100 * per(row.rounds, (r) => r.waited)).toFixed(3)}%, p50 ${median(row.rounds.map((r) => r.p50Us)).toFixed(2)} µs, p99 ${median(row.rounds.map((r) => r.p99Us)).toFixed(2)} µs`,
        )
      }
      // ratios of each of ours to RateLimiterRedis, round by round (rounds side by side)
      const theirs = rows.find((r) => r.scenario === scenario && r.inFlight === inFlight && r.subject === RLF) as Row
      for (const mine of rows.filter((r) => r.scenario === scenario && r.inFlight === inFlight && r.subject.startsWith('ours'))) {
        const perRound = mine.rounds.map((m, k) => rate(m) / rate(theirs.rounds[k] as Round))
        ratioLines.push(
          `| ${scenario} | ${mine.subject} | ${inFlight} | ${(median(mine.rounds.map(rate)) / median(theirs.rounds.map(rate))).toFixed(1)}× | ${median(perRound).toFixed(1)}× | ${Math.min(...perRound).toFixed(1)}×–${Math.max(...perRound).toFixed(1)}× |`,
        )
      }
      for (const s of subjects) await s.close()
    }
  }

  // what a window's first hits cost escrow on many keys: one grant per key, batched per turn
  let grantLine = ''
  if (escrowServed) {
    await admin.flushall()
    const s = await ours(storeAt(0), ESCROW, SYNC_RATE, true, FAR_LIMIT)
    await warm(s, KEYS.slice(0, 1), true)
    const before = await redisCounters(admin)
    const t0 = performance.now()
    await warm(s, KEYS, false)
    const after = await redisCounters(admin)
    grantLine = `A window's first hit on each of the 10,000 keys (every one a grant; the warm-up's two passes and 1 s at 64 in flight): ${((performance.now() - t0) / 1000).toFixed(1)} s, ${after.scripts - before.scripts} script calls and ${after.commands - before.commands} Redis commands, ${((after.commands - before.commands) / KEYS.length).toFixed(1)} commands per key per window.`
    await s.close()
    log(grantLine)
  }

  const fmt = (v: number, digits = 3) => (v === 0 ? '0' : v < 0.001 ? v.toExponential(1) : v.toFixed(digits))
  const us = (v: number) => (v < 10 ? v.toFixed(2) : v < 100 ? v.toFixed(1) : Math.round(v).toString())
  const table = rows.map((r) => {
    const rs = r.rounds
    return `| ${r.scenario} | ${r.subject} | ${r.inFlight} | ${Math.round(median(rs.map(rate))).toLocaleString('en-US')} | ${fmt(per(rs, (x) => x.scripts))} | ${fmt(per(rs, (x) => x.commands))} | ${(100 * per(rs, (x) => x.waited)).toFixed(3)}% | ${(100 * per(rs, (x) => x.allowed)).toFixed(2)}% | ${us(median(rs.map((x) => x.p50Us)))} | ${us(median(rs.map((x) => x.p99Us)))} | ${fmt(
      per(rs, (x) => x.clientCpuUs),
      2,
    )} | ${fmt(
      per(rs, (x) => x.redisCpuUs),
      2,
    )} |`
  })
  const targets: string[] = []
  if (escrowServed) {
    for (const inFlight of IN_FLIGHT) {
      const mine = rows.find((r) => r.scenario === 'many keys' && r.subject === ESCROW && r.inFlight === inFlight) as Row
      const theirs = rows.find((r) => r.scenario === 'many keys' && r.subject === RLF && r.inFlight === inFlight) as Row
      const ratio = median(mine.rounds.map((m, k) => rate(m) / rate(theirs.rounds[k] as Round)))
      const commands = per(mine.rounds, (x) => x.commands)
      targets.push(
        `- Target 5 at ${inFlight} in flight, at least 10× RateLimiterRedis's decisions/s with at most 0.1 Redis commands per decision: ${ratio >= 10 && commands <= 0.1 ? 'met' : '**not met**'} (${ratio.toFixed(0)}×, ${fmt(commands, 4)} commands per decision).`,
      )
    }
  } else targets.push('- Escrow on Redis: not available when this ran (src/strategies/capabilities.ts).')
  const command = ['node', ...process.execArgv, relative(process.cwd(), here), ...args].join(' ')
  const rlfVersion = (await import('rate-limiter-flexible/package.json', { with: { type: 'json' } })).default.version
  const section = [
    SECTION_HEADING,
    '',
    `One process; each subject has its own redis-server on loopback (so INFO counts its commands alone) and one ioredis client. **Many keys**: ${KEYS.length.toLocaleString('en-US')} keys round robin, a limit of ${FAR_LIMIT.toLocaleString('en-US')} per 60 s that no key nears (every decision allowed). **One hot key at its limit**: ${HOT_LIMIT} per 60 s, every decision on that key, nearly all denied. ${ROUNDS} rounds of ${ROUND_MS / 1000} s per subject, interleaved, each followed by two sync periods before its Redis counters are read (its last sync counted as its own, and no sync of it running in the next subject's round), after a warm-up that hits every key (escrow: again after its learning period); medians. *Waited*: decisions whose \`hit()\` returned a Promise (RateLimiterRedis: every one). *p50 / p99*: one decision's time, a synchronous answer as it returns, a Promise until it settles (\`performance.now()\` around each, about 0.05 µs of it the timer's own). Scripts and commands: INFO commandstats, commands run inside scripts included. Our engine compiled by TypeScript as published (bench/lib/load-ours.ts).`,
    '',
    '| case | subject | in flight | decisions/s | script calls per decision | Redis commands per decision | waited on the store | allowed | p50 µs | p99 µs | client CPU µs per decision | Redis CPU µs per decision |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ...table,
    '',
    'Decisions/s of ours over RateLimiterRedis (ratio of the medians | median of the per-round ratios | their range):',
    '',
    '| case | ours | in flight | ratio of the medians | median per-round ratio | range |',
    '| --- | --- | ---: | ---: | ---: | ---: |',
    ...ratioLines,
    '',
    ...(grantLine === '' ? [] : [grantLine, '']),
    ...targets,
    '',
    `Run on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared with other work: load average ${loadAtStart.toFixed(1)} at the start, ${(loadavg()[0] as number).toFixed(1)} at the end), redis-server ${version}, rate-limiter-flexible ${rlfVersion}. Command: \`${command}\`.`,
  ].join('\n')
  process.stdout.write(`${section}\n`)
  if (write) {
    const path = resolve(here, '..', '..', 'docs', 'BENCHMARKS-escrow.md')
    writeSection(path, section)
    log(`wrote ${relative(process.cwd(), path)}`)
  }
} finally {
  for (const store of stores) store.admin.disconnect()
  for (const server of servers) await server.stop()
  engine.cleanup()
}

/** Replaces this bench's section of `file` (or appends it), keeping every other section. */
function writeSection(file: string, section: string): void {
  replaceSection(file, SECTION_HEADING, section, '# Benchmarks: escrow\n')
}
