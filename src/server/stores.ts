import { createHash } from 'node:crypto'
import type { RedisScriptClient } from '../algorithms/types.js'
import { createStrategy } from '../core/registry.js'
import type { Strategy } from '../core/strategy.js'
import { withTimeout } from '../core/timeout.js'
import { registerBuiltInStrategies } from '../strategies/built-in.js'
import { MemoryStrategy } from '../strategies/memory.js'
import { type FollowingClient, sentinelClientOptions, watchFailovers } from '../strategies/redis/sentinel.js'
import { sentinelAddress } from './config-sentinels.js'
import { readStoreTls, sslModeOf } from './config-tls.js'
import type { StoreConfig } from './config.js'

/** A Redis client as the service uses it: scripts for the algorithms, PING for readiness. */
export interface ServiceRedisClient extends RedisScriptClient {
  ping(): Promise<string>
  quit(): Promise<unknown>
  disconnect(): void
  on(event: 'error', listener: (err: Error) => void): unknown
}

/** Thrown when a store cannot be set up: its module or driver is missing, or it refused to start. */
export class StoreStartError extends Error {
  override readonly name = 'StoreStartError'
}

/**
 * The connections of one `store` section, shared by every policy of a config (and carried over
 * by a reload that does not change the section).
 */
export interface StoreHandle {
  readonly type: StoreConfig['type']
  /** Identifies the section; equal signatures can share the handle. */
  readonly signature: string
  /** The Redis client (store type redis). */
  readonly redis: ServiceRedisClient | undefined
  /** The engine strategy for the counter algorithm; made on first use. */
  strategy(): Promise<Strategy>
  /** Resolves when the store answers within `timeoutMs`; rejects with the reason otherwise. */
  ready(timeoutMs: number): Promise<void>
  close(): Promise<void>
}

const DRIVERS = { redis: 'ioredis', postgres: 'pg' } as const

// The service makes its strategies through the engine's registry, like `strategy: "redis"`: one
// table of the built-in stores (strategies/built-in.ts), whose modules load on first use.
let builtInsRegistered = false
function registerBuiltIns(): void {
  if (builtInsRegistered) return
  registerBuiltInStrategies()
  builtInsRegistered = true
}

/** A failure to load a store's module, as a {@link StoreStartError} saying what to install. */
function startError(err: unknown, storeType: string, what: string): StoreStartError {
  if (err instanceof StoreStartError) return err
  const code = (err as NodeJS.ErrnoException).code
  const message = err instanceof Error ? err.message : String(err)
  if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
    const driver = DRIVERS[storeType as keyof typeof DRIVERS]
    if (driver !== undefined && message.includes(`'${driver}'`))
      return new StoreStartError(`store type ${storeType} needs the "${driver}" package: npm install ${driver}`, { cause: err })
    return new StoreStartError(`store type ${storeType} is not available in this build of ratelimiting (${message})`, { cause: err })
  }
  return new StoreStartError(`store type ${storeType}: ${what} failed: ${message}`, { cause: err })
}

/** Loads a module by specifier (a driver); missing modules become a {@link StoreStartError} saying what to install. */
export async function loadStoreModule(specifier: string, storeType: string): Promise<Record<string, unknown>> {
  try {
    // a computed specifier: the driver is an optional peer dependency, loaded only when a config asks for it
    const url = specifier.startsWith('.') ? new URL(specifier, import.meta.url).href : specifier
    return (await import(url)) as Record<string, unknown>
  } catch (err) {
    throw startError(err, storeType, `loading ${specifier}`)
  }
}

/** Makes a built-in strategy by its type through the engine's registry, as `strategy: "<type>"` does. */
async function makeBuiltIn(storeType: string, options: Record<string, unknown>): Promise<Strategy> {
  registerBuiltIns()
  try {
    return await createStrategy(storeType, options)
  } catch (err) {
    throw startError(err, storeType, 'making the store')
  }
}

function exportedClass<T>(module: Record<string, unknown>, name: string, storeType: string): new (options: Record<string, unknown>) => T {
  const value = module[name]
  if (typeof value !== 'function') throw new StoreStartError(`store type ${storeType}: the strategy module does not export ${name}`)
  return value as new (options: Record<string, unknown>) => T
}

/** Checks that the driver a store section needs can be loaded, without connecting. */
export async function checkStoreModules(store: StoreConfig, _needsStrategy: boolean): Promise<void> {
  if (store.type === 'redis' || store.type === 'postgres') await loadStoreModule(DRIVERS[store.type], store.type)
}

/** Identifies a store section and key prefix: a reload with the same signature keeps the connections. */
export function storeSignature(store: StoreConfig, keyPrefix: string): string {
  // the memory store has no connection and no key names: any memory section keeps its counters
  if (store.type === 'memory') return 'memory'
  const sentinel =
    store.sentinels === undefined ? [] : [store.sentinels, store.masterName, digest(store.password), digest(store.sentinelPassword)]
  return `${JSON.stringify([store.type, store.url ?? '', store.nodes ?? [], store.servers ?? [], store.schema ?? '', store.timeoutMs, store.batchAcrossSlots === true, ...sentinel, store.tls ?? null])}|${keyPrefix}`
}

// a changed password opens new connections, and the signature holds no password
function digest(secret: string | undefined): string {
  return secret === undefined ? '' : createHash('sha256').update(secret).digest('base64url')
}

/**
 * The prefix of the counter algorithm's Redis keys: `<prefix>#counter`, so its keys are
 * `<prefix>#counter:{<policy>:<userId>}:<size>:<start>` (RedisStrategy's format). After the
 * prefix, `#` is the counter's, `:` the default policy's seed keys and `@` the named policies'
 * keys: no user id of one can name a key of another.
 */
export function counterPrefix(keyPrefix: string): string {
  return `${keyPrefix}#counter`
}

/** How a Redis Cluster node is written in the config: `host:port` or a URL. */
function clusterNode(node: string): { host: string; port: number } {
  const url = new URL(node.includes('://') ? node : `redis://${node}`)
  return { host: url.hostname, port: Number(url.port || 6379) }
}

async function connectRedis(store: StoreConfig, onError: (err: Error) => void): Promise<ServiceRedisClient> {
  const ioredis = await loadStoreModule('ioredis', 'redis')
  const common = {
    // a rate limiter must answer now: a command while disconnected fails at once (then the
    // fail policy decides) instead of waiting in an unbounded offline queue
    enableOfflineQueue: false,
    maxRetriesPerRequest: 1,
    connectTimeout: Math.max(store.timeoutMs, 1000),
    // no commandTimeout: every call the service makes is already bounded by store.timeout-ms
    // (the algorithms' scripts, the counter engine's store calls, overrides, PING and QUIT, each
    // through core/timeout.ts, one shared timer per timeout), and ioredis would set and clear a
    // timer of its own per command on the decision path
    retryStrategy: (times: number) => Math.min(100 * times, 2000),
    lazyConnect: true,
    // store.tls: merged over the tls: true a rediss:// URL sets
    ...(store.tls !== undefined ? { tls: await readStoreTls(store.tls) } : {}),
  }
  let client: ServiceRedisClient & { connect(): Promise<void> }
  if (store.nodes !== undefined) {
    const Cluster = exportedClass<ServiceRedisClient & { connect(): Promise<void> }>(ioredis, 'Cluster', 'redis')
    const ClusterWithNodes = Cluster as unknown as new (nodes: unknown[], options: unknown) => typeof client
    client = new ClusterWithNodes(store.nodes.map(clusterNode), {
      enableOfflineQueue: false,
      lazyConnect: true,
      redisOptions: common,
    })
  } else if (store.sentinels !== undefined) {
    // the master the Sentinels name, followed across failovers (docs/STORES-redis.md, "Sentinel")
    const Redis = exportedClass<typeof client>(ioredis, 'Redis', 'redis')
    const RedisWithOptions = Redis as unknown as new (options: unknown) => typeof client
    const sentinels = store.sentinels.map((s) => sentinelAddress(s) as { host: string; port: number })
    const { masterName: name, password, sentinelPassword } = store
    const sentinelOptions = { sentinels, name, password, sentinelPassword }
    client = new RedisWithOptions({
      ...common,
      ...sentinelClientOptions(sentinelOptions),
      // a Sentinel that hangs is skipped for the next one after this long
      sentinelCommandTimeout: store.timeoutMs,
    })
    watchFailovers(client as unknown as FollowingClient, RedisWithOptions as never, sentinelOptions)
  } else {
    const Redis = exportedClass<typeof client>(ioredis, 'Redis', 'redis')
    const RedisWithUrl = Redis as unknown as new (url: string, options: unknown) => typeof client
    client = new RedisWithUrl(store.url as string, common)
  }
  client.on('error', onError)
  // Not fatal, and bounded: the service starts, /readyz reports the store down, and ioredis
  // keeps reconnecting (a cluster whose nodes cannot be reached would otherwise never settle).
  const connectMs = Math.max(store.timeoutMs, 1000)
  await withTimeout(client.connect(), connectMs, 'redis', 'connect').catch(onError)
  return client
}

/**
 * The postgres URL with `store.tls`'s files as pg's `sslrootcert`, `sslcert` and `sslkey`
 * (pg reads them; a URL's own TLS options win over a `ssl` object, so the URL carries them), and
 * `sslmode=verify-full` unless the URL says otherwise. The files are read first, so a missing one
 * is a ConfigFileError naming it.
 */
async function postgresUrl(store: StoreConfig): Promise<string> {
  const url = store.url as string
  if (store.tls === undefined) return url
  await readStoreTls(store.tls)
  const withTls = new URL(url)
  if (sslModeOf(url) === undefined) withTls.searchParams.set('sslmode', 'verify-full')
  if (store.tls.ca !== undefined) withTls.searchParams.set('sslrootcert', store.tls.ca)
  if (store.tls.cert !== undefined) withTls.searchParams.set('sslcert', store.tls.cert)
  if (store.tls.key !== undefined) withTls.searchParams.set('sslkey', store.tls.key)
  return withTls.href
}

/** Options of {@link openStore}. */
export interface OpenStoreOptions {
  /** Whether a policy uses the counter algorithm (which needs an engine strategy). */
  readonly needsStrategy: boolean
  /** Called with connection errors (they are also what /readyz reports). */
  readonly onError: (err: Error) => void
  /** The key prefix; the counter algorithm's Redis keys go under `<prefix>#counter` (memcached: `<prefix>:counter:`). */
  readonly keyPrefix: string
}

/**
 * Opens the store of a config: connects to Redis, loads and migrates the engine strategy for
 * the counter algorithm. Missing modules or drivers throw a {@link StoreStartError} naming them.
 */
export async function openStore(store: StoreConfig, options: OpenStoreOptions): Promise<StoreHandle> {
  const signature = storeSignature(store, options.keyPrefix)
  const timeoutMs = store.timeoutMs
  if (store.type === 'memory') {
    const memory = new MemoryStrategy()
    return {
      type: 'memory',
      signature,
      redis: undefined,
      strategy: async () => memory,
      ready: async () => undefined,
      close: async () => memory.close(),
    }
  }

  // the driver is loaded first so a missing one fails before any connection opens
  await checkStoreModules(store, options.needsStrategy)
  const redis = store.type === 'redis' ? await connectRedis(store, options.onError) : undefined
  let strategy: Strategy | undefined
  const makeStrategy = async (): Promise<Strategy> => {
    if (strategy !== undefined) return strategy
    if (store.type === 'redis') {
      strategy = await makeBuiltIn('redis', {
        client: redis,
        prefix: counterPrefix(options.keyPrefix),
        batchAcrossSlots: store.batchAcrossSlots === true,
      })
    } else if (store.type === 'postgres') {
      // the registry's postgres factory runs migrate() (the counters table) before answering
      strategy = await makeBuiltIn('postgres', {
        connectionString: await postgresUrl(store),
        ...(store.schema !== undefined ? { schema: store.schema } : {}),
        queryTimeoutMs: timeoutMs,
        onError: options.onError,
      })
    } else {
      strategy = await makeBuiltIn('memcached', {
        servers: store.servers,
        prefix: `${options.keyPrefix}:counter:`,
        timeoutMs,
        onError: options.onError,
      })
    }
    return strategy
  }
  if (options.needsStrategy) await makeStrategy()

  return {
    type: store.type,
    signature,
    redis,
    strategy: makeStrategy,
    async ready(probeTimeoutMs: number) {
      if (redis !== undefined) {
        await withTimeout(redis.ping(), probeTimeoutMs, 'redis', 'PING')
        return
      }
      const s = await makeStrategy()
      // a read through the one call every store has: a refresh-only push
      const probe = {
        namespace: 'readyz',
        nodeId: 'readyz',
        seq: 0,
        nowMs: Date.now(),
        windows: [],
        refresh: [{ key: 'readyz', windowStartMs: 0, windowSizeMs: 1 }],
      }
      await withTimeout(s.pushDiffs(probe), probeTimeoutMs, s.name, 'readiness probe')
    },
    async close() {
      const errors: unknown[] = []
      if (strategy !== undefined) await strategy.close().catch((err: unknown) => errors.push(err))
      if (redis !== undefined) {
        await withTimeout(redis.quit(), timeoutMs, 'redis', 'QUIT').catch(() => redis.disconnect())
      }
      if (errors.length > 0) throw errors[0]
    },
  }
}
