import { createRequire } from 'node:module'
import type { ConnectionOptions } from 'node:tls'
import type * as Ioredis from 'ioredis'
import { ConfigError } from '../../core/errors.js'
import { clientProblem, type RedisAdapter, redisAdapter, type SupportedRedisClient } from './client-adapter.js'
import { checkSentinelOptions, sentinelClientOptions, watchFailovers } from './sentinel.js'

// ioredis, loaded only to make a client from `url` or `sentinels`: with a client of another
// driver (node-redis), ioredis need not be installed
function ioredis(): typeof Ioredis {
  return createRequire(import.meta.url)('ioredis') as typeof Ioredis
}

/**
 * The commands the strategy sends on one connection. An ioredis `Redis` has them; so does each
 * master of an ioredis `Cluster`. Bring any client that does (a small adapter is enough).
 */
export interface RedisCommands {
  evalsha(sha: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>
  eval(script: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>
  scan(cursor: string, matchToken: 'MATCH', pattern: string, countToken: 'COUNT', count: number): Promise<[string, string[]]>
  unlink(...keys: string[]): Promise<number>
}

/**
 * What the strategy needs from a client: an ioredis `Redis` or `Cluster` fits as it is.
 * A cluster client is recognised by its `nodes('master')` method (SCAN runs on every master).
 */
export interface RedisClientLike extends RedisCommands {
  /** Closes the connection; called by `close()` only on a client the strategy created (from `url` or `sentinels`). */
  quit(): Promise<unknown>
  /** Called with `true` to reconnect when replies arrive out of order (see docs/STORES-redis.md). */
  disconnect?(reconnect?: boolean): void
  /** The connection state; `close()` sends QUIT only when it is "ready". */
  readonly status?: string
  /** A cluster client's master connections. */
  nodes?(role: 'master'): RedisCommands[]
}

/** Options of {@link RedisStrategy}: give one of `client`, `url` or `sentinels` (with `name`). */
export interface RedisStrategyOptions {
  /**
   * A client you own, never closed by the strategy: an ioredis or iovalkey `Redis` or `Cluster`,
   * a node-redis client or cluster (redis 5 or 6, connected by you), or a `RedisAdapter`
   * (docs/STORES-redis.md, "Clients").
   */
  readonly client?: RedisClientLike | SupportedRedisClient
  /**
   * A `redis://` or `rediss://` URL: the strategy creates an ioredis `Redis` and closes it on
   * `close()`. For a Redis Cluster pass `client: new Cluster([...])`.
   */
  readonly url?: string
  /**
   * Instead of `client` and `url`: the Sentinels to ask for the current master of `name` (Redis
   * Sentinel). The strategy creates an ioredis `Redis` that follows the master across failovers
   * and closes it on `close()`. One reachable Sentinel is enough; list them all.
   */
  readonly sentinels?: ReadonlyArray<{ readonly host: string; readonly port: number }>
  /** With `sentinels`: the master's name, as in the Sentinels' `sentinel monitor <name> …`. */
  readonly name?: string
  /** With `sentinels`: the data nodes' password (their `requirepass`). */
  readonly password?: string
  /** With `sentinels`: the Sentinels' own password (their `requirepass`), when they have one. */
  readonly sentinelPassword?: string
  /** First part of every key name; no braces (they would break the hash tag). @default "rl" */
  readonly prefix?: string
  /** How long a window outlives the two windows a rate can read, ms (covers clock skew). @default 10_000 */
  readonly graceMs?: number
  /** COUNT hint of each SCAN step in `getCounters` and `purge`. @default 1000 */
  readonly scanCount?: number
  /**
   * Send a sync (and an escrow namespace's grants) as script calls of up to 512 key-windows
   * whatever their hash slots, instead of one call per slot: 2 calls instead of about 1,000 for
   * 1,000 keys. On by default with a client that is not a cluster (one server, a Sentinel-managed
   * master, the client made from `url`): with many keys each hit about once a sync, one call per
   * slot cost 4.45 script calls per decision, batched 0.03 (docs/BENCHMARKS-escrow.md, "Many
   * keys"). Off, and refused when asked for, with a cluster
   * client (every call must stay in one slot). Set `false` behind a sharding proxy (Redis
   * Enterprise, Envoy, serverless offerings), which answers a call across slots with CROSSSLOT.
   * @default true without a cluster client, false with one
   */
  readonly batchAcrossSlots?: boolean
  /**
   * With `url` or `sentinels`: TLS options of the client the strategy makes (node:tls's, such as
   * `ca`, `cert` and `key` for a server with `--tls-auth-clients yes`), merged over what a
   * `rediss://` URL turns on. Refused with `client`: configure that client's TLS yourself.
   */
  readonly tls?: ConnectionOptions
}

// Most key-windows in one script call when batching across slots: bounds the time one call holds Redis.
const CHUNK_SIZE = 512

/** {@link RedisStrategyOptions} checked, with the client made from `url` or `sentinels` when given. */
export interface ResolvedRedisOptions {
  readonly client: RedisAdapter
  /** Whether the strategy made the client (from `url` or `sentinels`) and so closes it. */
  readonly ownsClient: boolean
  readonly prefix: string
  readonly graceMs: number
  readonly scanCount: number
  /** Most key-windows per script call, or 0 to split by hash slot. */
  readonly chunkSize: number
}

function isPositiveInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value > 0
}

/** Checks the options once, naming the one refused; makes an ioredis client from `url` or `sentinels`. */
export function resolveRedisOptions(options: RedisStrategyOptions): ResolvedRedisOptions {
  let resolvedClient: RedisClientLike | SupportedRedisClient
  let ownsClient: boolean
  if (typeof options !== 'object' || options === null) throw new ConfigError('INVALID_OPTION', 'redis: options must be an object')
  const { client, url, prefix = 'rl', graceMs = 10_000, scanCount = 1000, batchAcrossSlots } = options
  if (client !== undefined && url !== undefined) throw new ConfigError('INVALID_OPTION', 'redis: give either client or url, not both')
  const sentinels = checkSentinelOptions(options)
  const tls = options.tls
  if (tls !== undefined && (typeof tls !== 'object' || tls === null))
    throw new ConfigError('INVALID_OPTION', `redis: tls must be an object of node:tls options, got ${JSON.stringify(tls)}`)
  if (tls !== undefined && client !== undefined)
    throw new ConfigError(
      'INVALID_OPTION',
      'redis: tls is for the client made from url or sentinels; configure the TLS of your client instead',
    )
  const tlsOption = tls === undefined ? {} : { tls }
  if (typeof prefix !== 'string' || prefix.length === 0 || /[{}]/.test(prefix))
    throw new ConfigError('INVALID_OPTION', `redis: prefix must be a non-empty string without braces, got ${JSON.stringify(prefix)}`)
  if (typeof graceMs !== 'number' || !Number.isFinite(graceMs) || graceMs < 0)
    throw new ConfigError('INVALID_OPTION', `redis: graceMs must be a finite number >= 0, got ${String(graceMs)}`)
  if (!isPositiveInteger(scanCount))
    throw new ConfigError('INVALID_OPTION', `redis: scanCount must be a positive integer, got ${String(scanCount)}`)
  if (batchAcrossSlots !== undefined && typeof batchAcrossSlots !== 'boolean')
    throw new ConfigError('INVALID_OPTION', `redis: batchAcrossSlots must be a boolean, got ${String(batchAcrossSlots)}`)
  if (client !== undefined) {
    const problem = clientProblem(client)
    if (problem !== undefined) throw new ConfigError('INVALID_OPTION', `redis: ${problem}`)
    if ('evalsha' in client && typeof (client as { scan?: unknown }).scan !== 'function')
      throw new ConfigError('INVALID_OPTION', 'redis: an ioredis client must have scan and unlink (getCounters and purge use them)')
    const keyPrefix = clientKeyPrefix(client)
    if (keyPrefix)
      throw new ConfigError(
        'INVALID_OPTION',
        `redis: the client has keyPrefix ${JSON.stringify(keyPrefix)}, which SCAN does not apply; use the strategy's prefix option instead`,
      )
    if (batchAcrossSlots === true && redisAdapter(client).cluster)
      throw new ConfigError(
        'INVALID_OPTION',
        'redis: batchAcrossSlots cannot be used with a cluster client (every script call must stay in one slot)',
      )
    resolvedClient = client
    ownsClient = false
  } else if (url !== undefined) {
    if (typeof url !== 'string' || !/^rediss?:\/\//.test(url))
      throw new ConfigError('INVALID_OPTION', `redis: url must be a redis:// or rediss:// URL, got ${JSON.stringify(url)}`)
    // One retry per command: an outage fails calls fast (the engine re-pushes on the next
    // sync) instead of queueing every sync in memory until the server is back. No
    // auto-pipelining: it sends one batch per connection at a time, so a single lost reply
    // would stall every later call until the connection drops.
    const redis = new (ioredis().Redis)(url, { maxRetriesPerRequest: 1, ...tlsOption })
    // failures reach callers through the failed calls (the engine's onError); without a
    // listener ioredis would print every connection error
    redis.on('error', () => undefined)
    resolvedClient = redis as unknown as RedisClientLike
    ownsClient = true
  } else if (sentinels) {
    // as from url: one retry per command, no auto-pipelining
    const { Redis } = ioredis()
    const redis = new Redis({ ...sentinelClientOptions(options), maxRetriesPerRequest: 1, ...tlsOption })
    redis.on('error', () => undefined)
    watchFailovers(redis, Redis, options)
    resolvedClient = redis as unknown as RedisClientLike
    ownsClient = true
  } else {
    throw new ConfigError('INVALID_OPTION', 'redis: needs client (an ioredis, iovalkey or node-redis client or cluster), url or sentinels')
  }
  const adapter = redisAdapter(resolvedClient)
  // the default follows the client the strategy talks to: the one given, or the one made above
  const acrossSlots = batchAcrossSlots ?? !adapter.cluster
  return { client: adapter, ownsClient, prefix, graceMs, scanCount, chunkSize: acrossSlots ? CHUNK_SIZE : 0 }
}

function clientKeyPrefix(client: object): string | undefined {
  const options = (client as { options?: { keyPrefix?: unknown; redisOptions?: { keyPrefix?: unknown } } }).options
  const keyPrefix = options?.keyPrefix ?? options?.redisOptions?.keyPrefix
  return typeof keyPrefix === 'string' ? keyPrefix : undefined
}
