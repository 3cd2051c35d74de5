/**
 * Client CPU per synchronous decision over Redis, without Redis: our synchronous mode (engine
 * and RedisStrategy) and rate-limiter-flexible's RateLimiterRedis, each over a stub client that
 * answers every call at once with a well-formed reply (no socket, no ioredis). What is left is the
 * limiter's own work per decision, which at 1 in flight adds to every round trip and at 64 and
 * more is what the process spends besides ioredis. Prints only (docs/BENCHMARKS-redis.md cites it).
 *
 *   node --import tsx bench/redis-client-cpu.bench.ts [--rounds N] [--decisions N]
 *
 * Rounds alternate between the two; medians of rounds. Our engine is loaded as users run it
 * (bench/lib/load-ours.ts).
 */
import { RateLimiterRedis } from 'rate-limiter-flexible'
import type { RedisStrategy as RedisStrategyClass } from '../src/strategies/redis/index.js'
import { median, positiveIntOption } from './lib/harness.js'
import { loadOurs } from './lib/load-ours.js'

const args = process.argv.slice(2)
const option = (name: string, fallback: number): number => positiveIntOption(args, name, fallback)
const ROUNDS = option('--rounds', 7)
const DECISIONS = option('--decisions', 200_000)
const KEYS = Array.from({ length: 1000 }, (_, i) => `user-${i}`)

// Answers our scripts as Redis would for a key seen for the first time: the nonce, then per
// key-window its total and own count (the written one holds the count sent). A flat string, as
// ioredis decodes one from its buffer.
const ourStub = {
  status: 'ready',
  evalsha(_sha: string, numKeys: number, ...args: (string | number)[]): Promise<string> {
    const count = String(args[numKeys + 3])
    const parts = [String(args[numKeys]), count, count]
    for (let i = 1; i < numKeys; i++) parts.push('0', '0')
    return Promise.resolve(Buffer.from(parts.join(' ')).toString())
  },
  eval(): Promise<never> {
    return Promise.reject(new Error('the stub knows every script'))
  },
  scan(): Promise<[string, string[]]> {
    return Promise.resolve(['0', []])
  },
  unlink(): Promise<number> {
    return Promise.resolve(0)
  },
}

// RateLimiterRedis defines its script as a command (ioredis's defineCommand) and calls it.
const theirStub: Record<string, unknown> = {
  status: 'ready',
  defineCommand(name: string): void {
    theirStub[name] = () => Promise.resolve([1, 60_000])
  },
}

type Op = (key: string) => Promise<unknown>

async function round(op: Op, inFlight: number): Promise<number> {
  let i = 0
  const worker = async () => {
    while (i < DECISIONS) await op(KEYS[i++ % KEYS.length] as string)
  }
  const before = process.cpuUsage()
  await Promise.all(Array.from({ length: inFlight }, worker))
  const used = process.cpuUsage(before)
  return (used.user + used.system) / DECISIONS
}

const engine = await loadOurs('build')
const { RedisStrategy } = await engine.load<{ RedisStrategy: typeof RedisStrategyClass }>('strategies/redis/index.ts')
const rl = engine.ours.RateLimiting.newInstance('client-cpu')
const strategy = new RedisStrategy({
  client: ourStub as unknown as ConstructorParameters<typeof RedisStrategyClass>[0]['client'],
  prefix: 'b',
})
rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0, strategy })
const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 1e12, window: 60 }] })
const theirs = new RateLimiterRedis({ storeClient: theirStub, points: 1e9, duration: 60 })
const subjects: Array<[string, Op]> = [
  ['ours, synchronous', async (key) => await limiter.hit(key)],
  ['RateLimiterRedis', (key) => theirs.consume(key)],
]
try {
  console.log(`| in flight | ${subjects.map(([name]) => `${name}: client CPU µs/decision`).join(' | ')} | ratio |`)
  console.log(`|---:|${subjects.map(() => '---:').join('|')}|---:|`)
  for (const inFlight of [1, 64]) {
    for (const [, op] of subjects) for (let w = 0; w < 20_000; w++) await op(KEYS[w % KEYS.length] as string) // warm-up
    const samples = subjects.map((): number[] => [])
    for (let r = 0; r < ROUNDS; r++) {
      const order = r % 2 === 0 ? [0, 1] : [1, 0]
      for (const s of order) (samples[s] as number[]).push(await round((subjects[s] as [string, Op])[1], inFlight))
    }
    const medians = samples.map((xs) => median(xs))
    console.log(
      `| ${inFlight} | ${medians.map((m) => m.toFixed(2)).join(' | ')} | ${((medians[0] as number) / (medians[1] as number)).toFixed(1)}x |`,
    )
  }
} finally {
  await rl.close()
  engine.cleanup()
}
