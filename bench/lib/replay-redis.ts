/**
 * The accuracy replay (src/simulate) on a real Redis: each shard of keys a simulated fleet makes
 * (src/simulate/fleet.ts) gets a RedisStrategy of its own over one shared client, under a prefix
 * of its own, so no two shards, and no two cells of a run, ever read each other's key-windows
 * (a shard of a MemoryStrategy run has a store of its own for the same reason).
 *
 * Redis expires what the engine writes at an absolute time computed from the engine's (fake)
 * clock, so a trace replayed on Redis must start at or after the server's present
 * ({@link replayStartMs}): a trace of 2023 would expire as it is written.
 */
import type { Redis } from 'ioredis'
import type { Strategy } from '../../src/core/strategy.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'

/** A store factory for ReplaySetup.strategy: a RedisStrategy per call, each under `<prefix>:<n>`. */
export function redisShardStores(client: Redis, prefix: string): () => Strategy {
  let made = 0
  return () => new RedisStrategy({ client, prefix: `${prefix}:${++made}` })
}

/** A trace start for a replay on Redis: the next window boundary from now. */
export function replayStartMs(windowSec: number): number {
  const windowMs = windowSec * 1000
  return Math.ceil(Date.now() / windowMs) * windowMs
}

/** Deletes every key under `prefix` (SCAN, then DEL in pages): what a replay left on the server. */
export async function deleteReplayKeys(client: Redis, prefix: string): Promise<number> {
  let cursor = '0'
  let deleted = 0
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000)
    cursor = next
    if (keys.length > 0) deleted += await client.del(...keys)
  } while (cursor !== '0')
  return deleted
}
