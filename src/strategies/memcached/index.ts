/**
 * `ratelimiting/memcached`: the memcached strategy and its small meta-protocol client. See
 * docs/STORES-memcached.md for the data model, the key and TTL rules and the limits.
 */
export type { MemcachedClientOptions, MetaCommand, MetaReply } from './client.js'
export { MemcachedClient } from './client.js'
export { exptime, MAX_KEY_BYTES, MAX_RELATIVE_TTL_SEC, MIN_TTL_SEC } from './keys.js'
export type { MemcachedStrategyOptions } from './memcached-strategy.js'
export { MemcachedStrategy } from './memcached-strategy.js'
