/**
 * The stores this package ships, registered under their names by the root entry: `strategy:
 * "postgres"` works without importing the subpath, and a store's module (and its driver) loads
 * on first use, before the first store call: a user of the memory engine never loads a driver.
 */
import { registerStrategy } from '../core/registry.js'
import { BUILT_IN_STORES } from './capabilities.js'
import { MemoryStrategy, type MemoryStrategyOptions } from './memory.js'

/** Registers "memory", "redis", "postgres" and "memcached". */
export function registerBuiltInStrategies(): void {
  registerStrategy('memory', (options) => new MemoryStrategy(options as MemoryStrategyOptions), BUILT_IN_STORES.memory)
  registerStrategy(
    'redis',
    async (options) => {
      const { RedisStrategy } = await import('./redis/index.js')
      return new RedisStrategy(options as ConstructorParameters<typeof RedisStrategy>[0])
    },
    BUILT_IN_STORES.redis,
  )
  registerStrategy(
    'postgres',
    async (options) => (await import('./postgres/index.js')).createPostgresStrategy({ migrate: true, ...options }),
    BUILT_IN_STORES.postgres,
  )
  registerStrategy(
    'memcached',
    async (options) => {
      const { MemcachedStrategy } = await import('./memcached/index.js')
      return new MemcachedStrategy(options as ConstructorParameters<typeof MemcachedStrategy>[0])
    },
    BUILT_IN_STORES.memcached,
  )
}
