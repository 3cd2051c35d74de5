import { withTimeout } from '../core/timeout.js'
import { evalScript, luaScript, redisError } from '../strategies/redis/scripts.js'
import type { ServiceConfig } from './config.js'
import { openPostgresOverrides } from './overrides-postgres.js'
import type { ServiceRedisClient, StoreHandle } from './stores.js'

// Where the runtime overrides (PUT /v1/overrides/{policy}/{userId}) live, so every instance of
// the service sees them: a Redis hash, a PostgreSQL table, or this process's memory. Each store
// keeps a version that every write bumps: instances poll the version, a cheap read, and load the
// whole set only when it moved.

/** One runtime override as the store holds it. */
export interface StoredOverride {
  readonly policy: string
  readonly userId: string
  readonly maxRequests: number
}

/** Every runtime override, and the version they were read at. */
export interface OverrideSnapshot {
  readonly version: number
  readonly entries: readonly StoredOverride[]
}

/** A store of runtime overrides. Every call is bounded by `store.timeout-ms` and fails with a StoreError. */
export interface OverrideBackend {
  /** The store type, for messages. */
  readonly type: string
  /** The version: 0 before the first write; every write makes it larger. */
  version(): Promise<number>
  load(): Promise<OverrideSnapshot>
  /** Sets (or replaces) one override; resolves with the version after the write. */
  set(override: StoredOverride): Promise<number>
  /** Removes one override; resolves with the version after the write, or undefined when there was none. */
  remove(policy: string, userId: string): Promise<number | undefined>
  close(): Promise<void>
}

/** The field of the Redis hash that holds the version (a policy name starts with a letter or digit). */
export const VERSION_FIELD = '#version'

/**
 * The Redis key of the runtime overrides: `<prefix>!overrides`, a HASH whose fields are
 * `<policy>:<userId>` (a policy name has no `:`) and {@link VERSION_FIELD}. After the prefix,
 * `:` is the default policy's keys, `@` a named policy's, `#` the counter's and `~` Envoy's, so
 * no user id and no rule can name it.
 */
export function overridesKey(keyPrefix: string): string {
  return `${keyPrefix}!overrides`
}

/**
 * Where the version of a new set of overrides starts: the time in µs, not 1. A store that lost
 * them (a Redis restarted without persistence, a key deleted by hand) then never hands out again
 * a version an instance already read, so no instance mistakes the new set for the one it holds.
 */
export function firstVersion(): number {
  return Date.now() * 1000
}

/** Makes the backend of a store, or undefined for a store that cannot hold them (memcached). */
export async function openOverrideBackend(
  config: ServiceConfig,
  store: StoreHandle,
  onError: (err: Error) => void,
): Promise<OverrideBackend | undefined> {
  if (store.type === 'memory') return new MemoryOverrides()
  if (store.type === 'redis' && store.redis !== undefined)
    return new RedisOverrides(store.redis, overridesKey(config.keyPrefix), config.store.timeoutMs)
  if (store.type === 'postgres') return openPostgresOverrides(config, onError)
  return undefined
}

/** Whether `value` is a max-requests an override may have (what the schema accepts). */
export function isOverrideLimit(value: unknown, max: number): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= max
}

/** The memory store: this process is the whole fleet. */
class MemoryOverrides implements OverrideBackend {
  readonly type = 'memory'
  private current = 0
  private readonly entries = new Map<string, StoredOverride>()

  async version(): Promise<number> {
    return this.current
  }

  async load(): Promise<OverrideSnapshot> {
    return { version: this.current, entries: [...this.entries.values()] }
  }

  async set(override: StoredOverride): Promise<number> {
    this.entries.set(`${override.policy}:${override.userId}`, override)
    return ++this.current
  }

  async remove(policy: string, userId: string): Promise<number | undefined> {
    return this.entries.delete(`${policy}:${userId}`) ? ++this.current : undefined
  }

  async close(): Promise<void> {}
}

// One key per script, so each runs in one slot of a Redis Cluster.
const VERSION = luaScript(`return redis.call('HGET', KEYS[1], '${VERSION_FIELD}') or '0'`)
const LOAD = luaScript(`return redis.call('HGETALL', KEYS[1])`)
// A new hash starts its version at ARGV[3] (see firstVersion), not 1.
const SET = luaScript(`
redis.call('HSETNX', KEYS[1], '${VERSION_FIELD}', ARGV[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('HINCRBY', KEYS[1], '${VERSION_FIELD}', 1)`)
const REMOVE = luaScript(`
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return -1 end
return redis.call('HINCRBY', KEYS[1], '${VERSION_FIELD}', 1)`)

/** Redis: one HASH under the key prefix, written and read by scripts under `store.timeout-ms`. */
class RedisOverrides implements OverrideBackend {
  readonly type = 'redis'

  constructor(
    private readonly client: ServiceRedisClient,
    private readonly key: string,
    private readonly timeoutMs: number,
  ) {}

  async version(): Promise<number> {
    return Number(await this.run(VERSION, [], 'overrides version'))
  }

  async load(): Promise<OverrideSnapshot> {
    const reply = (await this.run(LOAD, [], 'overrides load')) as unknown[]
    let version = 0
    const entries: StoredOverride[] = []
    for (let i = 0; i + 1 < reply.length; i += 2) {
      const field = String(reply[i])
      const value = Number(reply[i + 1])
      if (field === VERSION_FIELD) {
        version = value
        continue
      }
      const colon = field.indexOf(':')
      // a field this service did not write (an edit by hand) is skipped, never half-read
      if (colon <= 0 || !Number.isInteger(value) || value < 1) continue
      entries.push({ policy: field.slice(0, colon), userId: field.slice(colon + 1), maxRequests: value })
    }
    return { version, entries }
  }

  async set(override: StoredOverride): Promise<number> {
    const field = `${override.policy}:${override.userId}`
    return Number(await this.run(SET, [field, override.maxRequests, firstVersion()], 'overrides set'))
  }

  async remove(policy: string, userId: string): Promise<number | undefined> {
    const version = Number(await this.run(REMOVE, [`${policy}:${userId}`], 'overrides remove'))
    return version < 0 ? undefined : version
  }

  async close(): Promise<void> {}

  private async run(script: ReturnType<typeof luaScript>, args: Array<string | number>, what: string): Promise<unknown> {
    try {
      return await withTimeout(
        evalScript(this.client, script, 1, [this.key, ...args], (r) => r),
        this.timeoutMs,
        'redis',
        what,
      )
    } catch (err) {
      throw redisError(err)
    }
  }
}
