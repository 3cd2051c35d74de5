/**
 * `ratelimiting/redis`: the Redis store (single node or Redis Cluster) over ioredis.
 * docs/STORES-redis.md describes the data model, the scripts and the fault behaviour.
 */
export type { RedisClientLike, RedisCommands, RedisStrategyOptions } from './options.js'
export { RedisStrategy } from './redis-strategy.js'
