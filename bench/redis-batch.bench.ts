/**
 * The service's Redis algorithms (RedisFixedWindow, RedisSlidingLog) with their checks batched
 * (src/algorithms/script-batch.ts) against the same algorithms built from another checkout, in
 * the same rounds: decisions per second, the client's CPU per decision and Redis's. No HTTP:
 * `--in-flight` loops (64 by default, as the service bench's connections) each await one check
 * after another over 1,000 users, on a redis-server of the bench's own. As in the service bench:
 * 100 per 60 s, and `rememberDenials: false` so that every check reaches Redis. Prints only
 * (docs/BENCHMARKS-service.md cites it).
 *
 *   mkdir -p .tmp/before && git archive <commit> src | tar -x -C .tmp/before
 *   node --import tsx bench/redis-batch.bench.ts --before=.tmp/before/src [--in-flight 1,64] [--rounds N] [--seconds S]
 *
 * Without `--before` it measures this checkout alone. Rounds alternate the order of the subjects;
 * medians of rounds; the ratio is this checkout's over the other's, per round, then the median.
 */
import { cpus, loadavg } from 'node:os'
import { resolve } from 'node:path'
import { Redis } from 'ioredis'
import type * as Algorithms from '../src/algorithms/index.js'
import { median, positiveIntOption } from './lib/harness.js'
import { loadOurs } from './lib/load-ours.js'
import { startRedisProcess } from './lib/service-process.js'

const args = process.argv.slice(2)
const ROUNDS = positiveIntOption(args, '--rounds', 5)
const SECONDS = positiveIntOption(args, '--seconds', 3)
const inFlightAt = args.indexOf('--in-flight')
const IN_FLIGHT = (inFlightAt < 0 ? '64' : (args[inFlightAt + 1] ?? '')).split(',').map((v) => {
  const n = Number(v)
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`--in-flight takes positive integers separated by commas, got ${v}`)
  return n
})
const beforeDir = args.find((a) => a.startsWith('--before='))?.slice('--before='.length)
const USERS = Array.from({ length: 1000 }, (_, i) => `user-${i}`)

type Loaded = typeof Algorithms
const now = await loadOurs('build')
const before = beforeDir === undefined ? undefined : await loadOurs('build', resolve(beforeDir))
const codes: [string, Loaded][] = [['this checkout', await now.load<Loaded>('algorithms/index.ts')]]
if (before !== undefined) codes.push(['before', await before.load<Loaded>('algorithms/index.ts')])

const redis = await startRedisProcess()
const admin = new Redis(redis.url)

/** Redis's CPU time so far (user + system), µs, from INFO cpu. */
async function redisCpuUs(): Promise<number> {
  const info = await admin.info('cpu')
  const field = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? Number.NaN)
  return (field('used_cpu_user') + field('used_cpu_sys')) * 1e6
}

interface Subject {
  readonly name: string
  readonly check: (user: string) => Promise<unknown>
  readonly client: Redis
}

function subjects(): Subject[] {
  const out: Subject[] = []
  for (const algo of ['fixed window', 'sliding log'] as const)
    for (const [code, lib] of codes) {
      // a client per subject, so that no subject's state (held writes, batches) meets another's
      const client = new Redis(redis.url)
      const options = { client, limit: 100, windowMs: 60_000, prefix: `bench-batch-${code.replace(' ', '-')}`, rememberDenials: false }
      const limiter = algo === 'fixed window' ? new lib.RedisFixedWindow(options) : new lib.RedisSlidingLog(options)
      out.push({ name: `${algo}, ${code}`, check: (user) => limiter.check(user), client })
    }
  return out
}

interface Sample {
  readonly perSecond: number
  readonly clientUs: number
  readonly redisUs: number
}

async function measure(subject: Subject, inFlight: number, seconds: number): Promise<Sample> {
  let decisions = 0
  let stop = false
  const loop = async (offset: number): Promise<void> => {
    for (let i = offset; !stop; i += inFlight) {
      await subject.check(USERS[i % USERS.length] as string)
      decisions++
    }
  }
  const redisBefore = await redisCpuUs()
  const cpuBefore = process.cpuUsage()
  const started = performance.now()
  const loops = Array.from({ length: inFlight }, (_, i) => loop(i))
  await new Promise((r) => setTimeout(r, seconds * 1000))
  stop = true
  await Promise.all(loops)
  const elapsedS = (performance.now() - started) / 1000
  const cpu = process.cpuUsage(cpuBefore)
  const redisUs = (await redisCpuUs()) - redisBefore
  return { perSecond: decisions / elapsedS, clientUs: (cpu.user + cpu.system) / decisions, redisUs: redisUs / decisions }
}

const all = subjects()
const loadAtStart = loadavg()[0] as number
process.stderr.write(`[bench] ${ROUNDS} rounds of ${SECONDS} s per subject, in flight ${IN_FLIGHT.join(', ')}\n`)
const lines: string[] = []
for (const inFlight of IN_FLIGHT) {
  const samples = new Map<Subject, Sample[]>(all.map((s) => [s, []]))
  for (const s of all) await measure(s, inFlight, 1) // warm-up
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? all : [...all].reverse()
    for (const s of order) {
      const sample = await measure(s, inFlight, SECONDS)
      samples.get(s)?.push(sample)
      process.stderr.write(
        `[bench] ${inFlight} in flight, round ${round + 1}: ${s.name}: ${Math.round(sample.perSecond)}/s, client ${sample.clientUs.toFixed(2)} µs, Redis ${sample.redisUs.toFixed(2)} µs\n`,
      )
    }
  }
  for (const s of all) {
    const list = samples.get(s) ?? []
    const other =
      before === undefined || !s.name.endsWith('this checkout')
        ? undefined
        : all.find((o) => o.name === s.name.replace('this checkout', 'before'))
    const theirs = other === undefined ? undefined : (samples.get(other) ?? [])
    const ratio =
      theirs === undefined ? '' : ` ${median(list.map((x, i) => x.perSecond / (theirs[i]?.perSecond ?? Number.NaN))).toFixed(2)}x |`
    lines.push(
      `| ${inFlight} | ${s.name} | ${Math.round(median(list.map((x) => x.perSecond))).toLocaleString('en-US')} | ${median(list.map((x) => x.clientUs)).toFixed(2)} µs | ${median(list.map((x) => x.redisUs)).toFixed(2)} µs |${before === undefined ? '' : theirs === undefined ? ' |' : ratio}`,
    )
  }
}
for (const s of all) s.client.disconnect()
admin.disconnect()
await redis.stop()
now.cleanup()
before?.cleanup()

console.log(
  `${cpus().length} cores (${cpus()[0]?.model.trim() ?? 'unknown CPU'}), Node ${process.version}; load average ${loadAtStart.toFixed(2)} at start, ${(loadavg()[0] as number).toFixed(2)} at the end; ${ROUNDS} rounds of ${SECONDS} s.`,
)
console.log('')
console.log(
  `| in flight | subject | checks/s (median) | client CPU per check | Redis CPU per check |${before === undefined ? '' : ' this checkout / before (per round, median) |'}`,
)
console.log(`|---:|---|---:|---:|---:|${before === undefined ? '' : '---:|'}`)
for (const line of lines) console.log(line)
