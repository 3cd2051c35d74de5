/**
 * `ratelimiting/algorithms`: the RLaaS service's two algorithms, fixed window and exact sliding
 * log, each in memory and on Redis (the seed's key formats and scripts; docs/SERVICE.md).
 */
export { MemoryFixedWindow, type MemoryFixedWindowOptions } from './fixed-window-memory.js'
export { RedisFixedWindow, type RedisFixedWindowOptions } from './fixed-window-redis.js'
export { DEFAULT_PREFIX, KeyNames, type KeyOptions } from './keys.js'
export { MemorySlidingLog, type MemorySlidingLogOptions } from './sliding-log-memory.js'
export { RedisSlidingLog, type RedisSlidingLogOptions } from './sliding-log-redis.js'
// the clients the Redis algorithms take (docs/STORES-redis.md, "Clients")
export type { RedisAdapter, SupportedRedisClient } from '../strategies/redis/scripts.js'
export type {
  AlgorithmOptions,
  AlgorithmResult,
  MaybePromise,
  MemoryAlgorithmOptions,
  RateLimitAlgorithm,
  RedisAlgorithmOptions,
  RedisScriptClient,
} from './types.js'
