import type { RedisScriptClient } from '../algorithms/types.js'
import type { Strategy } from '../core/strategy.js'
import { withTimeout } from '../core/timeout.js'
import { MemoryStrategy } from '../strategies/memory.js'
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

/** Where the built-in strategies live, relative to this file (src/server or dist/server). */
const STRATEGY_MODULES = {
  redis: '../strategies/redis/index.js',
  postgres: '../strategies/postgres/index.js',
  memcached: '../strategies/memcached/index.js',
} as const

const DRIVERS = { redis: 'ioredis', postgres: 'pg' } as const

/** Loads a module by specifier; missing modules become a {@link StoreStartError} saying what to install. */
export async function loadStoreModule(specifier: string, storeType: string): Promise<Record<string, unknown>> {
  try {
    // a computed specifier: the module may not exist in every build, and is only loaded when a config asks for it
    const url = specifier.startsWith('.') ? new URL(specifier, import.meta.url).href : specifier
    return (await import(url)) as Record<string, unknown>
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    const message = err instanceof Error ? err.message : String(err)
    if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
      const driver = DRIVERS[storeType as keyof typeof DRIVERS]
      if (driver !== undefined && message.includes(`'${driver}'`))
        throw new StoreStartError(`store type ${storeType} needs the "${driver}" package: npm install ${driver}`, { cause: err })
      throw new StoreStartError(`store type ${storeType} is not available in this build of ratelimiting (${message})`, { cause: err })
    }
    throw new StoreStartError(`store type ${storeType}: loading ${specifier} failed: ${message}`, { cause: err })
  }
}

function exportedClass<T>(module: Record<string, unknown>, name: string, storeType: string): new (options: Record<string, unknown>) => T {
  const value = module[name]
  if (typeof value !== 'function') throw new StoreStartError(`store type ${storeType}: the strategy module does not export ${name}`)
  return value as new (options: Record<string, unknown>) => T
}

/** Checks that the modules a store section needs can be loaded, without connecting. */
export async function checkStoreModules(store: StoreConfig, needsStrategy: boolean): Promise<void> {
  if (store.type === 'memory') return
  if (store.type === 'redis') await loadStoreModule('ioredis', 'redis')
  if (needsStrategy || store.type !== 'redis') await loadStoreModule(STRATEGY_MODULES[store.type], store.type)
}

/** Identifies a store section and key prefix: a reload with the same signature keeps the connections. */
export function storeSignature(store: StoreConfig, keyPrefix: string): string {
  // the memory store has no connection and no key names: any memory section keeps its counters
  if (store.type === 'memory') return 'memory'
  return `${JSON.stringify([store.type, store.url ?? '', store.nodes ?? [], store.servers ?? [], store.timeoutMs])}|${keyPrefix}`
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
    commandTimeout: store.timeoutMs,
    retryStrategy: (times: number) => Math.min(100 * times, 2000),
    lazyConnect: true,
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

/** Options of {@link openStore}. */
export interface OpenStoreOptions {
  /** Whether a policy uses the counter algorithm (which needs an engine strategy). */
  readonly needsStrategy: boolean
  /** Called with connection errors (they are also what /readyz reports). */
  readonly onError: (err: Error) => void
  /** The key prefix; the counter algorithm's Redis keys go under `<prefix>:counter`. */
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

  // the strategy module is loaded first so a missing module fails before any connection opens
  const strategyModule =
    options.needsStrategy || store.type !== 'redis' ? await loadStoreModule(STRATEGY_MODULES[store.type], store.type) : undefined
  const redis = store.type === 'redis' ? await connectRedis(store, options.onError) : undefined
  let strategy: Strategy | undefined
  const makeStrategy = async (): Promise<Strategy> => {
    if (strategy !== undefined) return strategy
    if (strategyModule === undefined) throw new StoreStartError(`store type ${store.type}: no strategy module loaded`)
    if (store.type === 'redis') {
      const RedisStrategy = exportedClass<Strategy>(strategyModule, 'RedisStrategy', 'redis')
      strategy = new RedisStrategy({
        client: redis,
        prefix: `${options.keyPrefix}:counter`,
      })
    } else if (store.type === 'postgres') {
      const PostgresStrategy = exportedClass<Strategy & { migrate?: () => Promise<void> }>(strategyModule, 'PostgresStrategy', 'postgres')
      const pg = new PostgresStrategy({
        connectionString: store.url,
        queryTimeoutMs: timeoutMs,
        onError: options.onError,
      })
      try {
        await pg.migrate?.()
      } catch (err) {
        await pg.close().catch(() => undefined)
        throw new StoreStartError(`store type postgres: creating the counters table failed: ${(err as Error).message}`, { cause: err })
      }
      strategy = pg
    } else {
      const MemcachedStrategy = exportedClass<Strategy>(strategyModule, 'MemcachedStrategy', 'memcached')
      strategy = new MemcachedStrategy({
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
      await withTimeout(s.getWindow('readyz', 'readyz', 0, 1), probeTimeoutMs, s.name, 'readiness probe')
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
