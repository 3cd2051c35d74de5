/**
 * Where a synchronous decision's time goes at 1 in flight on Redis (issue 14): the same hits
 * through each layer of our stack, one at a time, against the floor and RateLimiterRedis, on a
 * redis-server the bench starts for itself:
 *
 * - floor: an EVALSHA of a script that only returns, one key (what any script call costs);
 * - the floor with our hit's arguments, and with RateLimiterRedis's: a script that only returns a
 *   reply as long as the real one, sent the real call's keys and arguments (what the call's shape
 *   costs on the wire and in ioredis, apart from the script's work in Redis);
 * - our script: SYNC_PUSH over ioredis with the arguments a hit sends (no strategy, no engine);
 * - our strategy: `RedisStrategy.pushDiffs` of a hit's batch (arguments, nonce, reply parsing);
 * - our limiter: `limiter.hit` of a synchronous namespace (the whole engine);
 * - RateLimiterRedis: `consume` (its whole stack).
 *
 * Per layer: wall time, this process's CPU time and redis-server's CPU time per decision, and the
 * bytes each way. Rounds rotate the order of the layers; medians of rounds. Prints only.
 *
 *   node --import tsx bench/redis-layers.bench.ts [--rounds N] [--decisions N]
 */
import { cpus, loadavg } from 'node:os'
import { RateLimiterRedis } from 'rate-limiter-flexible'
import { newNodeId } from '../src/core/namespace.js'
import type { RedisStrategy as RedisStrategyClass } from '../src/strategies/redis/index.js'
import type { LuaScript } from '../src/strategies/redis/scripts.js'
import { median, positiveIntOption } from './lib/harness.js'
import { loadOurs } from './lib/load-ours.js'
import { singleNode } from './lib/redis-bench.js'

const args = process.argv.slice(2)
const option = (name: string, fallback: number): number => positiveIntOption(args, name, fallback)
const ROUNDS = option('--rounds', 9)
const DECISIONS = option('--decisions', 3000)
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)
const WINDOW_MS = 60_000

const engine = await loadOurs('build')
const { RedisStrategy } = await engine.load<{ RedisStrategy: typeof RedisStrategyClass }>('strategies/redis/index.ts')
const { SYNC_PUSH } = await engine.load<{ SYNC_PUSH: LuaScript }>('strategies/redis/lua.ts')
const redis = await singleNode()

type Op = (key: string) => Promise<unknown>
type Client = ReturnType<typeof redis.client>
interface Layer {
  readonly name: string
  readonly op: Op
}

// A process's cumulative counts per key-window, as the engine would push them.
function counter(): (key: string, startMs: number) => number {
  const counts = new Map<string, number>()
  let start = 0
  return (key, startMs) => {
    if (startMs !== start) {
      counts.clear()
      start = startMs
    }
    const count = (counts.get(key) ?? 0) + 1
    counts.set(key, count)
    return count
  }
}

const clients = Array.from({ length: 5 }, () => redis.client())
const [floorClient, rawClient, strategyClient, limiterClient, theirClient] = clients as [Client, Client, Client, Client, Client]
const floorSha = (await floorClient.script('LOAD', 'return 1')) as string
// replies as long as SYNC_PUSH's (nonce, total, own) and RateLimiterRedis's (consumed points, PTTL)
const ourShapeSha = (await floorClient.script('LOAD', "return ARGV[1] .. ' ' .. ARGV[4] .. ' ' .. ARGV[4]")) as string
const theirShapeSha = (await floorClient.script('LOAD', 'return { tonumber(ARGV[1]), 59000 }')) as string
await rawClient.script('LOAD', SYNC_PUSH.source)

const nodeId = newNodeId() // as the engine's default
const rawCount = counter()
let rawSeq = 0
// SYNC_PUSH's keys and arguments for a hit of `key`, as the strategy sends them
function rawArgs(prefix: string, key: string): string[] {
  const now = Date.now()
  const start = now - (now % WINDOW_MS)
  const seq = ++rawSeq
  return [
    `${prefix}:{api:${key}}:${WINDOW_MS}:${start}`,
    `nonce:${seq}`,
    nodeId,
    String(seq),
    String(rawCount(key, start)),
    String(start + 2 * WINDOW_MS + 60_000),
  ]
}
const strategy = new RedisStrategy({ client: strategyClient as never, prefix: 'strategy' })
const strategyCount = counter()
let strategySeq = 0
const rl = engine.ours.RateLimiting.newInstance('layers')
rl.new({
  namespace: 'api',
  windowSizes: [WINDOW_MS / 1000],
  syncRate: 0,
  strategy: new RedisStrategy({ client: limiterClient as never, prefix: 'limiter' }),
})
const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 1e12, window: WINDOW_MS / 1000 }] })
const theirs = new RateLimiterRedis({ storeClient: theirClient, points: 1e9, duration: WINDOW_MS / 1000, keyPrefix: 'rlf' })

const layers: Layer[] = [
  { name: 'floor: EVALSHA of `return 1`', op: (key) => floorClient.evalsha(floorSha, 1, key) },
  { name: "the floor with our script's arguments and reply", op: (key) => floorClient.evalsha(ourShapeSha, 1, ...rawArgs('shape', key)) },
  {
    name: "the floor with RateLimiterRedis's arguments and reply",
    op: (key) => floorClient.evalsha(theirShapeSha, 1, `rlf:${key}`, '1', '60', '1000000000', '60'),
  },
  { name: 'our script (SYNC_PUSH over ioredis)', op: (key) => rawClient.evalsha(SYNC_PUSH.sha, 1, ...rawArgs('raw', key)) },
  {
    name: 'our strategy (RedisStrategy.pushDiffs)',
    op: (key) => {
      const now = Date.now()
      const start = now - (now % WINDOW_MS)
      const count = strategyCount(key, start)
      return strategy.pushDiffs({
        namespace: 'api',
        nodeId,
        seq: ++strategySeq,
        nowMs: now,
        windows: [{ key, windowSizeMs: WINDOW_MS, windowStartMs: start, count, diff: 1 }],
        refresh: [],
      })
    },
  },
  { name: 'our limiter (limiter.hit, synchronous)', op: async (key) => await limiter.hit(key) },
  { name: 'RateLimiterRedis (consume)', op: (key) => theirs.consume(key) },
]

interface Sample {
  wallUs: number
  cpuUs: number
  serverCpuUs: number
  bytesIn: number
  bytesOut: number
}

async function round(op: Op): Promise<Sample> {
  const before = await redis.counters()
  const cpu = process.cpuUsage()
  const started = performance.now()
  for (let i = 0; i < DECISIONS; i++) await op(KEYS[i % KEYS.length] as string)
  const wallUs = ((performance.now() - started) * 1000) / DECISIONS
  const used = process.cpuUsage(cpu)
  const after = await redis.counters()
  const per = (field: string) => ((after[field] as number) - (before[field] as number)) / DECISIONS
  return {
    wallUs,
    cpuUs: (used.user + used.system) / DECISIONS,
    serverCpuUs: per('serverCpuUs'),
    bytesIn: per('bytesIn'),
    bytesOut: per('bytesOut'),
  }
}

try {
  const load = loadavg()[0] as number
  for (const layer of layers) for (let w = 0; w < 2000; w++) await layer.op(KEYS[w % KEYS.length] as string) // warm-up
  const samples = layers.map((): Sample[] => [])
  for (let r = 0; r < ROUNDS; r++) {
    for (let j = 0; j < layers.length; j++) {
      const s = (j + r) % layers.length
      ;(samples[s] as Sample[]).push(await round((layers[s] as Layer).op))
    }
  }
  const med = (s: number, field: keyof Sample) => median((samples[s] as Sample[]).map((x) => x[field]))
  const floorWall = med(0, 'wallUs')
  console.log(
    `| layer (1 in flight) | wall µs/decision | over the floor | client CPU µs | redis-server CPU µs | bytes to Redis | bytes from Redis |`,
  )
  console.log('|---|---:|---:|---:|---:|---:|---:|')
  for (const [s, layer] of layers.entries()) {
    const wall = med(s, 'wallUs')
    console.log(
      `| ${layer.name} | ${wall.toFixed(1)} | ${(wall - floorWall).toFixed(1)} | ${med(s, 'cpuUs').toFixed(1)} | ${med(s, 'serverCpuUs').toFixed(1)} | ${med(s, 'bytesIn').toFixed(0)} | ${med(s, 'bytesOut').toFixed(0)} |`,
    )
  }
  // issue 14's target at 1 in flight: 1.1x RateLimiterRedis's decisions per second
  const theirWall = med(layers.length - 1, 'wallUs')
  console.log(
    `\n1.1x RateLimiterRedis's rate needs at most ${(theirWall / 1.1).toFixed(1)} µs per decision, ${(theirWall / 1.1 - floorWall).toFixed(1)} over the floor.`,
  )
  console.log(
    `\n${ROUNDS} rounds of ${DECISIONS} decisions per layer, order rotated per round; medians. ${cpus().length} cores (${cpus()[0]?.model.trim() ?? 'unknown'}), load average ${load.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end; redis-server ${await redis.version()}, Node ${process.version}.`,
  )
} finally {
  await rl.close()
  for (const client of clients) client.disconnect()
  await redis.stop()
  engine.cleanup()
}
