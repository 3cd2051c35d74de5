/**
 * `ratelimiting/redis`: the Redis store (single node or Redis Cluster) over ioredis, iovalkey or
 * node-redis (client-adapter.ts).
 * docs/STORES-redis.md describes the data model, the scripts and the fault behaviour.
 */
export type { RedisClientLike, RedisCommands, RedisStrategyOptions } from './options.js'
export { RedisStrategy } from './redis-strategy.js'
export {
  type IoredisLike,
  ioredisAdapter,
  type NodeRedisClientLike,
  type NodeRedisClusterLike,
  type NodeRedisClusterNode,
  type NodeRedisCommandOptions,
  nodeRedisAdapter,
  nodeRedisClusterAdapter,
  type RedisAdapter,
  redisAdapter,
  type RedisNodeAdapter,
  type Corkable,
  type SupportedRedisClient,
} from './client-adapter.js'
