/**
 * The two Node Redis clients at 1 in flight: one EVALSHA after another of a script that only
 * returns, sent with the keys and arguments of our synchronous call (two key-windows, seven
 * arguments) and answering three numbers, through ioredis and through node-redis (`redis`).
 * What a decision waits for at 1 in flight is mostly this round trip
 * (bench/redis-layers.bench.ts); this asks whether the other client would make it shorter.
 * On a redis-server of the bench's own. Prints only (docs/BENCHMARKS-redis.md cites it).
 *
 *   node --import tsx bench/redis-clients.bench.ts [--rounds N] [--calls N]
 *
 * Rounds alternate the order of the clients; medians of rounds, and the median of the per-round
 * ratios.
 */
import { cpus, loadavg } from 'node:os'
import { Redis } from 'ioredis'
import { createClient } from 'redis'
import { median, positiveIntOption } from './lib/harness.js'
import { startRedisProcess } from './lib/service-process.js'

const args = process.argv.slice(2)
const ROUNDS = positiveIntOption(args, '--rounds', 7)
const CALLS = positiveIntOption(args, '--calls', 20_000)

const redis = await startRedisProcess()
const io = new Redis(redis.url)
const nodeRedis = createClient({ url: redis.url })
await nodeRedis.connect()
const sha = (await io.script('LOAD', 'return {1, 2, 3}')) as string
const keys = ['rl:bench:{user-1}:28333333', 'rl:bench:{user-1}:28333332']
const argv = ['Ab3dEf6hIj9lMn0p', '1', '60000', '17', '5', '1700000000000', '0']

/** Mean wall time of one call, µs, over CALLS calls made one after another. */
async function timed(call: () => Promise<unknown>): Promise<number> {
  const started = performance.now()
  for (let i = 0; i < CALLS; i++) await call()
  return ((performance.now() - started) * 1000) / CALLS
}

const subjects: [string, () => Promise<unknown>][] = [
  ['ioredis', () => io.evalsha(sha, keys.length, ...keys, ...argv)],
  ['node-redis', () => nodeRedis.evalSha(sha, { keys, arguments: argv })],
]
const loadAtStart = loadavg()[0] as number
for (const [, call] of subjects) await timed(call) // warm-up
const samples = new Map<string, number[]>(subjects.map(([name]) => [name, []]))
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, call] of round % 2 === 0 ? subjects : [...subjects].reverse()) samples.get(name)?.push(await timed(call))
  process.stderr.write(
    `[bench] round ${round + 1}: ${subjects.map(([name]) => `${name} ${samples.get(name)?.at(-1)?.toFixed(1)} µs`).join(', ')}\n`,
  )
}
io.disconnect()
await nodeRedis.quit()
await redis.stop()

const ioredis = samples.get('ioredis') ?? []
console.log(
  `${cpus().length} cores (${cpus()[0]?.model.trim() ?? 'unknown CPU'}), Node ${process.version}; load average ${loadAtStart.toFixed(2)} at start, ${(loadavg()[0] as number).toFixed(2)} at the end; ${ROUNDS} rounds of ${CALLS.toLocaleString('en-US')} calls per client.`,
)
console.log('')
console.log('| client | µs per call at 1 in flight (median) | per round | against ioredis (median of per-round ratios) |')
console.log('|---|---:|---|---:|')
for (const [name] of subjects) {
  const list = samples.get(name) ?? []
  const ratio = median(list.map((x, i) => x / (ioredis[i] ?? Number.NaN)))
  console.log(`| ${name} | ${median(list).toFixed(1)} | ${list.map((x) => x.toFixed(1)).join(', ')} | ${ratio.toFixed(2)}x |`)
}
