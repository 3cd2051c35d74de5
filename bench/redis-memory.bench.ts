/**
 * Redis memory per key-window as the strategy writes it, against the number of processes that
 * write it: each process adds two fields (`c:<nodeId>`, `s:<nodeId>`) to the window's hash
 * (docs/STORES-redis.md, "Memory"). Pushes through `RedisStrategy.pushDiffs` with the engine's
 * default node ids and, to compare, with UUIDs (the default before 2026-11-26), on a redis-server
 * the bench starts for itself; `MEMORY USAGE` of every key-window, medians. Prints only. The
 * figures depend on the Redis version and its encoding settings, not on the machine's load.
 *
 *   node --import tsx bench/redis-memory.bench.ts [--keys N]
 */
import { randomUUID } from 'node:crypto'
import type { Redis } from 'ioredis'
import { newNodeId } from '../src/core/namespace.js'
import type { WindowPush } from '../src/core/strategy.js'
import { RedisStrategy } from '../src/strategies/redis/index.js'
import { median, positiveIntOption } from './lib/harness.js'
import { singleNode } from './lib/redis-bench.js'

const KEYS = positiveIntOption(process.argv.slice(2), '--keys', 200)
const NODES = [1, 8, 32]
const WINDOW_MS = 60_000
const redis = await singleNode()
const client = redis.client() as Redis

// `nodes` processes with ids from `makeId` each push one window of KEYS keys; the median bytes
// of a key-window
async function bytesPerWindow(prefix: string, nodes: number, makeId: () => string): Promise<number> {
  const strategy = new RedisStrategy({ client, prefix })
  const start = Math.floor(Date.now() / WINDOW_MS) * WINDOW_MS
  const windows: WindowPush[] = Array.from({ length: KEYS }, (_, k) => ({
    key: `user-${k}`,
    windowSizeMs: WINDOW_MS,
    windowStartMs: start,
    count: 1 + (k % 50),
    diff: 1 + (k % 50),
  }))
  for (let n = 0; n < nodes; n++) {
    await strategy.pushDiffs({ namespace: 'api', nodeId: makeId(), seq: Date.now(), nowMs: Date.now(), windows, refresh: [] })
  }
  const names = await client.keys(`${prefix}:*`)
  if (names.length !== KEYS) throw new Error(`${prefix}: expected ${KEYS} key-windows, found ${names.length}`)
  return median(await Promise.all(names.map(async (name) => (await client.memory('USAGE', name)) ?? Number.NaN)))
}

try {
  console.log('| processes writing a key-window | node id | bytes per key-window (MEMORY USAGE, median) |')
  console.log('|---:|---|---:|')
  for (const nodes of NODES) {
    const short = await bytesPerWindow(`short${nodes}`, nodes, newNodeId)
    const uuid = await bytesPerWindow(`uuid${nodes}`, nodes, randomUUID)
    console.log(`| ${nodes} | default (16 characters) | ${short} |`)
    console.log(`| ${nodes} | a UUID (36 characters) | ${uuid} |`)
  }
  console.log(`\n${KEYS} key-windows per row; redis-server ${await redis.version()}.`)
} finally {
  client.disconnect()
  await redis.stop()
}
