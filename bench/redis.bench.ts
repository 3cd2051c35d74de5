/**
 * Redis benchmark: our periodic mode, our synchronous mode and rate-limiter-flexible's
 * RateLimiterRedis (over ioredis), side by side in one run against a redis-server the bench
 * starts for itself on a free loopback port, at 1 and 256 decisions in flight. Reports decisions
 * per second (median of the rounds) and store commands per decision, read from Redis's
 * `INFO commandstats` before and after each round.
 *
 *   node --import tsx bench/redis.bench.ts              full run, rewrites docs/BENCHMARKS-redis.md
 *   node --import tsx bench/redis.bench.ts --quick      a smoke run in seconds, prints only
 */
import { writeFileSync } from 'node:fs'
import { cpus, loadavg } from 'node:os'
import { relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { RateLimiterRedis } from 'rate-limiter-flexible'
import { RateLimiting } from '../src/core/rate-limiting.js'
import { RedisStrategy } from '../src/strategies/redis/index.js'
import { startRedisServer } from '../test/support/redis-server.js'
import { median } from './lib/harness.js'
import { log, measureDecisions } from './lib/stores.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const write = args.includes('--write') || (!quick && !args.includes('--no-write'))
const ROUNDS = quick ? 1 : 5
const ROUND_MS = quick ? 300 : 1500
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)
const IN_FLIGHT = [1, 256]
const PACED_RATE = 50_000 // decisions/s of the paced periodic row
const SYNC_RATE = 0.1 // s
const LIMIT = 1e9 // every hit allowed: this measures the cost of a decision, not of a refusal

// Commands that only ever run inside the scripts of this bench (ours: HMGET, HSET, PEXPIREAT,
// EXISTS; rate-limiter-flexible's: SET, INCRBY, PTTL, EXPIRE), and the bench's own INFO.
const INSIDE_SCRIPTS = new Set(['hmget', 'hset', 'pexpireat', 'exists', 'set', 'incrby', 'pttl', 'expire'])
const OWN = new Set(['info', 'config|resetstat'])

type Decide = (key: string) => unknown

interface Subject {
  readonly name: string
  /** Decisions between two yields to the event loop (local decisions never yield by themselves). */
  readonly batch: number
  /** Decisions per second to pace to; unpaced when absent. */
  readonly pace?: number
  readonly decide: Decide
  close(): Promise<void>
}

interface Commands {
  /** Commands clients sent (round trips): EVALSHA, EVAL, and anything else not run by a script. */
  sent: number
  /** Every command executed, those run inside scripts included. */
  executed: number
  /** The server's CPU time so far (user + system), µs. */
  serverCpuUs: number
}

async function commandStats(admin: Redis): Promise<Commands> {
  const text = await admin.info('commandstats')
  const cpu = await admin.info('cpu')
  const seconds = (field: string) => Number(new RegExp(`${field}:([\\d.]+)`).exec(cpu)?.[1] ?? 0)
  const out: Commands = { sent: 0, executed: 0, serverCpuUs: (seconds('used_cpu_user') + seconds('used_cpu_sys')) * 1e6 }
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const command = match[1] as string
    const calls = Number(match[2])
    if (OWN.has(command)) continue
    out.executed += calls
    if (!INSIDE_SCRIPTS.has(command)) out.sent += calls
  }
  return out
}

function perDecision(value: number): string {
  return value === 0 ? '0' : value < 0.001 ? value.toExponential(1) : value.toFixed(3)
}

const server = await startRedisServer()
const admin = new Redis(server.url)
const rows: string[] = []
const rates = new Map<string, number>()
const loadAtStart = loadavg()[0] as number

try {
  const ours =
    (name: string, syncRate: number, batch: number, pace?: number, batchAcrossSlots = false) =>
    async (): Promise<Subject> => {
      const client = new Redis(server.url)
      const strategy = new RedisStrategy({ client, prefix: 'bench', batchAcrossSlots })
      const rl = RateLimiting.newInstance(`bench-redis-${name}`)
      rl.new({ namespace: 'bench', windowSizes: [60], syncRate, strategy })
      const limiter = rl.limiter({ namespace: 'bench', limits: [{ limit: LIMIT, window: 60 }] })
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
  const flexible = async (): Promise<Subject> => {
    const client = new Redis(server.url)
    const rlf = new RateLimiterRedis({ storeClient: client, points: LIMIT, duration: 60, keyPrefix: 'rlflx-bench' })
    return {
      name: 'rate-limiter-flexible RateLimiterRedis',
      batch: 1,
      decide: (key) => rlf.consume(key),
      close: async () => client.disconnect(),
    }
  }

  const plan: Array<{ inFlight: number; groups: Array<Array<() => Promise<Subject>>> }> = IN_FLIGHT.map((inFlight) => ({
    inFlight,
    // the local mode alone, then the store-bound subjects with their rounds interleaved, so that
    // load drifting on this shared machine weighs on both alike
    groups: [[ours(`ours, periodic (syncRate ${SYNC_RATE} s)`, SYNC_RATE, 256)], [ours('ours, synchronous (syncRate 0)', 0, 1), flexible]],
  }))
  plan.push({
    inFlight: 1,
    groups: [
      [ours(`ours, periodic (syncRate ${SYNC_RATE} s), paced to ${PACED_RATE.toLocaleString('en-US')}/s`, SYNC_RATE, 100, PACED_RATE)],
    ],
  })
  plan.push({
    inFlight: 256,
    groups: [[ours(`ours, periodic (syncRate ${SYNC_RATE} s), batchAcrossSlots`, SYNC_RATE, 256, undefined, true)]],
  })

  for (const { inFlight, groups } of plan) {
    for (const group of groups) {
      await admin.flushall()
      const subjects: Subject[] = []
      for (const make of group) subjects.push(await make())
      const decisionRates = subjects.map(() => [] as number[])
      const sentPer = subjects.map(() => [] as number[])
      const executedPer = subjects.map(() => [] as number[])
      const sentPerSecond = subjects.map(() => [] as number[])
      const clientCpu = subjects.map(() => [] as number[])
      const serverCpu = subjects.map(() => [] as number[])
      // warm-up: connections, scripts loaded, every key's windows created
      for (const subject of subjects) await measureDecisions(subject, KEYS, inFlight, quick ? 100 : 500)
      for (let r = 0; r < ROUNDS; r++) {
        for (const [i, subject] of subjects.entries()) {
          const before = await commandStats(admin)
          const cpuBefore = process.cpuUsage()
          const { decisions, seconds } = await measureDecisions(subject, KEYS, inFlight, ROUND_MS)
          const cpu = process.cpuUsage(cpuBefore)
          const after = await commandStats(admin)
          clientCpu[i]?.push((cpu.user + cpu.system) / decisions)
          serverCpu[i]?.push((after.serverCpuUs - before.serverCpuUs) / decisions)
          decisionRates[i]?.push(decisions / seconds)
          sentPer[i]?.push((after.sent - before.sent) / decisions)
          executedPer[i]?.push((after.executed - before.executed) / decisions)
          sentPerSecond[i]?.push((after.sent - before.sent) / seconds)
        }
      }
      for (const [i, subject] of subjects.entries()) {
        await subject.close()
        const rate = median(decisionRates[i] ?? [])
        rates.set(`${subject.name}@${inFlight}`, rate)
        const sent = median(sentPer[i] ?? [])
        const executed = median(executedPer[i] ?? [])
        const perSecond = median(sentPerSecond[i] ?? [])
        const cpuUs = (values: number[] | undefined) => median(values ?? []).toFixed(median(values ?? []) < 0.1 ? 3 : 1)
        const shown = Math.round(rate).toLocaleString('en-US')
        log(
          `${subject.name}, ${inFlight} in flight: ${shown} decisions/s, ${sent.toPrecision(3)} commands sent/decision, ${Math.round(perSecond)} commands/s`,
        )
        rows.push(
          `| ${subject.name} | ${inFlight} | ${shown} | ${perDecision(sent)} | ${perDecision(executed)} | ${Math.round(perSecond).toLocaleString('en-US')} | ${cpuUs(clientCpu[i])} | ${cpuUs(serverCpu[i])} |`,
        )
      }
    }
  }

  const ratio = (a: string, b: string, inFlight: number) => {
    const x = rates.get(`${a}@${inFlight}`)
    const y = rates.get(`${b}@${inFlight}`)
    return x === undefined || y === undefined ? 'n/a' : `${(x / y).toFixed(x / y >= 10 ? 0 : 2)}x`
  }
  const periodic = `ours, periodic (syncRate ${SYNC_RATE} s)`
  const synchronous = 'ours, synchronous (syncRate 0)'
  const rlf = 'rate-limiter-flexible RateLimiterRedis'
  const syncRatios = IN_FLIGHT.map((n) => ({ n, x: (rates.get(`${synchronous}@${n}`) ?? 0) / (rates.get(`${rlf}@${n}`) ?? 1) }))
  const syncVerdict = syncRatios
    .map(
      ({ n, x }) =>
        `${x.toFixed(2)}x the decisions of RateLimiterRedis at ${n} in flight${x >= 0.9 && x < 1.1 ? ' (within the noise of this machine)' : ''}`,
    )
    .join(' and ')
    .concat('.')
  const ratios = IN_FLIGHT.map((n) => `| ${n} | ${ratio(periodic, rlf, n)} | ${ratio(synchronous, rlf, n)} |`).join('\n')

  const here = fileURLToPath(import.meta.url)
  const command = ['node', ...process.execArgv, relative(process.cwd(), here), ...args].join(' ')
  const version = /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? 'unknown'
  const text = `# Benchmarks: Redis

Decisions per second (median of ${ROUNDS} rounds of ${ROUND_MS / 1000} s) and store commands per
decision, for one limit of a 60 s window over 1,000 keys, every hit allowed. "In flight" is the
number of decisions in progress at once (async workers in one process; a decision returned
synchronously, as periodic mode returns it, is used without an \`await\`, as the adapters do). Each subject has one
ioredis connection (default options) to a redis-server the bench starts for itself, so that
\`INFO commandstats\`, read before and after every round, counts that subject's commands only.
"Sent" counts what clients send (each a round trip: EVALSHA, EVAL, ...); "executed" adds the
commands the scripts run inside Redis.

| subject | in flight | decisions/s | commands sent/decision | commands executed/decision | commands sent/s | client CPU µs/decision | Redis CPU µs/decision |
|---|---:|---:|---:|---:|---:|---:|---:|
${rows.join('\n')}

Speed-up over RateLimiterRedis, same run:

| in flight | periodic / RateLimiterRedis | synchronous / RateLimiterRedis |
|---:|---:|---:|
${ratios}

- Periodic mode decides locally; each sync (every ${SYNC_RATE * 1000} ms) sends one EVALSHA per
  hash slot of the keys held for its writes and, after the settle time, one per slot for its
  read-back (about two per key for 1,000 keys), whatever the request rate: compare its commands
  per second with the paced row, which makes far fewer decisions and sends about the same number
  of commands. With \`batchAcrossSlots\` (a single unsharded server only) a sync is one EVALSHA
  per 512 key-windows written and one per 512 read back.
- Synchronous mode sends exactly one EVALSHA per decision (one round trip): it writes this
  process's count of the key's current window and reads back its total. The previous, closed
  window is read in the same call at most once per second per key (a tenth of the window for
  windows under 10 s) and its value held in between, so a late push or another process's reset
  of it is seen within that second; the current window is always the store's answer to this
  hit. The expiry is set when a window is created (PEXPIREAT, atomically in the same script).
- RateLimiterRedis sends one EVALSHA per decision too: a fixed window, SET NX, INCRBY and PTTL on
  one key, not idempotent (a retried call counts twice). Our script does an idempotent write of
  this process's own slot instead (HMGET, HSET, compared with the seq held), the price of never
  double counting; the "executed" column shows the commands it runs.
- In the client, with decisions already waiting for replies the strategy holds the script calls
  made in one tick and sends them as one socket write on the next (a lone call goes out at
  once), and store-call timeouts share one deadline timer instead of a timer per call: at 256 in
  flight that is most of the client CPU saved. At 1 in flight each decision is a full round trip
  on loopback, so both subjects mostly wait on the kernel and on the other process. In this
  run, synchronous mode made ${syncVerdict}
- The machine is shared with other work, so figures move by tens of percent between runs;
  compare rows of one run.

Run on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared
with other work: load average ${loadAtStart.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end), redis-server ${version} on
loopback (no persistence), ioredis ${(await import('ioredis/package.json', { with: { type: 'json' } })).default.version}.

Command:

    ${command}
`
  process.stdout.write(`${text}\n`)
  if (write) {
    const path = resolve(here, '..', '..', 'docs', 'BENCHMARKS-redis.md')
    writeFileSync(path, text)
    log(`wrote ${relative(process.cwd(), path)}`)
  }
} finally {
  admin.disconnect()
  await server.stop()
}
