import { randomBytes } from 'node:crypto'
import { withTimeout } from '../core/timeout.js'
import { evalScript, luaScript, redisError } from '../strategies/redis/scripts.js'
import type { ServiceConfig } from './config.js'
import { openPostgresOverrides } from './overrides-postgres.js'
import type { ServiceRedisClient, StoreHandle } from './stores.js'

// Where the runtime overrides (PUT /v1/overrides/{policy}/{userId}) live, so every instance of
// the service sees them: a Redis hash, a PostgreSQL table, or this process's memory. Each store
// keeps a version that every write bumps by one, and a change log: one entry per write, for the
// last CHANGE_LOG_SIZE versions, naming the override written. An instance asks what changed
// since the version it holds, and reads only those overrides; it reads the whole set when the
// log cannot answer (it no longer reaches back that far, an entry is missing, or the entry of
// the version it holds is not the write it read: the store lost data and wrote other versions).

/** One runtime override as the store holds it. */
export interface StoredOverride {
  readonly policy: string
  readonly userId: string
  readonly maxRequests: number
}

/** Every runtime override, and the version they were read at. */
export interface OverrideSnapshot {
  readonly version: number
  /** The stamp of the write that made `version` ('' when the log has no entry for it). */
  readonly stamp: string
  readonly entries: readonly StoredOverride[]
}

/** An override changed since a version: its value now, or undefined when it was removed. */
export interface OverrideChange {
  readonly policy: string
  readonly userId: string
  readonly maxRequests: number | undefined
}

/** What changed since the version a reader holds. */
export interface OverrideChanges {
  /** The version now; the reader's own when nothing changed. */
  readonly version: number
  /** The stamp of the write that made `version`. */
  readonly stamp: string
  /**
   * Each override written since the reader's version, once, with its value now; undefined when
   * the log cannot tell (the reader must read everything).
   */
  readonly changes: readonly OverrideChange[] | undefined
}

/** What a write made: the version after it, and the stamp its log entry carries. */
export interface OverrideWrite {
  readonly version: number
  readonly stamp: string
}

/** A store of runtime overrides. Every call is bounded by `store.timeout-ms` and fails with a StoreError. */
export interface OverrideBackend {
  /** The store type, for messages. */
  readonly type: string
  /** The version: 0 before the first write; every write makes it larger. */
  version(): Promise<number>
  load(): Promise<OverrideSnapshot>
  /**
   * What changed since `known`, whose write carried `stamp` (from a snapshot or a change read,
   * '' when it had none). Absent: the store keeps no log (memory, where this process is the
   * only writer), and a reader compares versions and loads everything when they differ.
   */
  changesSince?(known: number, stamp: string): Promise<OverrideChanges>
  /** Sets (or replaces) one override; resolves with the version after the write. */
  set(override: StoredOverride): Promise<OverrideWrite>
  /** Removes one override; resolves with the version after the write, or undefined when there was none. */
  remove(policy: string, userId: string): Promise<OverrideWrite | undefined>
  close(): Promise<void>
}

/**
 * Writes the change log keeps (Redis and PostgreSQL): a reader more than this many versions
 * behind (one poll after that many writes fleet-wide) reads the whole set instead of the changes.
 */
export const CHANGE_LOG_SIZE = 1000

/**
 * The stamp of a write's log entry: random, so that two writes that got the same version from
 * two histories of the store (one lost in a restart or a failover, then written again) differ.
 */
export function newStamp(): string {
  return randomBytes(6).toString('base64url')
}

/** Whether the stored text is an override's max-requests (a field edited by hand is skipped). */
function storedLimit(text: unknown): number | undefined {
  if (text === null || text === undefined) return undefined
  const value = Number(text)
  return Number.isInteger(value) && value >= 1 ? value : undefined
}

/** The field of the Redis hash that holds the version (a policy name starts with a letter or digit). */
export const VERSION_FIELD = '#version'

/**
 * The fields of the Redis hash that hold the change log: `#log:<version>`, whose value is
 * `<stamp> <field>` (the field written at that version, set or removed).
 */
export const LOG_FIELD_PREFIX = '#log:'

/**
 * The Redis key of the runtime overrides: `<prefix>!overrides`, a HASH whose fields are
 * `<policy>:<userId>` (a policy name has no `:`), {@link VERSION_FIELD} and the change log's
 * {@link LOG_FIELD_PREFIX} fields (one key, so each script runs in one slot of a Redis Cluster).
 * After the prefix, `:` is the default policy's keys, `@` a named policy's, `#` the counter's and
 * `~` Envoy's, so no user id and no rule can name it.
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

/** The memory store: this process is the whole fleet (no change log: no other instance reads it). */
class MemoryOverrides implements OverrideBackend {
  readonly type = 'memory'
  private current = 0
  private readonly entries = new Map<string, StoredOverride>()

  async version(): Promise<number> {
    return this.current
  }

  async load(): Promise<OverrideSnapshot> {
    return { version: this.current, stamp: '', entries: [...this.entries.values()] }
  }

  async set(override: StoredOverride): Promise<OverrideWrite> {
    this.entries.set(`${override.policy}:${override.userId}`, override)
    return { version: ++this.current, stamp: '' }
  }

  async remove(policy: string, userId: string): Promise<OverrideWrite | undefined> {
    return this.entries.delete(`${policy}:${userId}`) ? { version: ++this.current, stamp: '' } : undefined
  }

  async close(): Promise<void> {}
}

// One key per script, so each runs in one slot of a Redis Cluster. Versions are integers below
// 2^53 (µs since 1970 plus the writes), exact in Lua's doubles; '%.0f' prints them whole.
const VERSION = luaScript(`return redis.call('HGET', KEYS[1], '${VERSION_FIELD}') or '0'`)
const LOAD = luaScript(`return redis.call('HGETALL', KEYS[1])`)
// Logs the write made at version `v` (ARGV[1] the stamp, ARGV[2] the field) and forgets the
// entry ARGV[3] versions older: the log keeps the last ARGV[3] writes.
const LOG_WRITE = `
redis.call('HSET', KEYS[1], '${LOG_FIELD_PREFIX}' .. string.format('%.0f', v), ARGV[1] .. ' ' .. ARGV[2])
redis.call('HDEL', KEYS[1], '${LOG_FIELD_PREFIX}' .. string.format('%.0f', v - tonumber(ARGV[3])))
return v`
// ARGV: stamp, field, log size, max-requests, the first version of a new hash (see firstVersion)
const SET = luaScript(`
redis.call('HSETNX', KEYS[1], '${VERSION_FIELD}', ARGV[5])
redis.call('HSET', KEYS[1], ARGV[2], ARGV[4])
local v = redis.call('HINCRBY', KEYS[1], '${VERSION_FIELD}', 1)
${LOG_WRITE}`)
// ARGV: stamp, field, log size
const REMOVE = luaScript(`
if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then return -1 end
local v = redis.call('HINCRBY', KEYS[1], '${VERSION_FIELD}', 1)
${LOG_WRITE}`)
// What changed since ARGV[1], whose log entry the reader holds with stamp ARGV[2], reading at
// most ARGV[3] entries. Replies {version} when nothing changed; {version, 0} when the log cannot
// tell (another history than the reader's, a version gone back, too far behind, a missing entry);
// else {version, its stamp, field, value or nil, ...}: each field written since, once, as it is now.
const CHANGES = luaScript(`
local function stamp(entry)
  if not entry then return '' end
  return string.sub(entry, 1, (string.find(entry, ' ', 1, true) or 0) - 1)
end
local head = redis.call('HGET', KEYS[1], '${VERSION_FIELD}') or '0'
if stamp(redis.call('HGET', KEYS[1], '${LOG_FIELD_PREFIX}' .. ARGV[1])) ~= ARGV[2] then return {head, 0} end
if head == ARGV[1] then return {head} end
local from, to = tonumber(ARGV[1]), tonumber(head)
if to < from or to - from > tonumber(ARGV[3]) then return {head, 0} end
local names = {}
for v = from + 1, to do names[#names + 1] = '${LOG_FIELD_PREFIX}' .. string.format('%.0f', v) end
local log = redis.call('HMGET', KEYS[1], unpack(names))
local fields, seen = {}, {}
for i = 1, #log do
  local entry = log[i]
  if not entry then return {head, 0} end
  local field = string.sub(entry, (string.find(entry, ' ', 1, true) or 0) + 1)
  if not seen[field] then
    seen[field] = true
    fields[#fields + 1] = field
  end
end
local reply = {head, stamp(log[#log])}
local values = redis.call('HMGET', KEYS[1], unpack(fields))
for i = 1, #fields do
  reply[#reply + 1] = fields[i]
  reply[#reply + 1] = values[i]
end
return reply`)

/** `<policy>:<userId>` as a change, or undefined for a field this service did not write. */
function fieldChange(field: string, value: unknown): OverrideChange | undefined {
  const colon = field.indexOf(':')
  if (colon <= 0 || field.startsWith('#')) return undefined
  return { policy: field.slice(0, colon), userId: field.slice(colon + 1), maxRequests: storedLimit(value) }
}

/** Redis: one HASH under the key prefix, written and read by scripts under `store.timeout-ms`. */
class RedisOverrides implements OverrideBackend {
  readonly type = 'redis'

  constructor(
    private readonly client: ServiceRedisClient,
    private readonly key: string,
    private readonly timeoutMs: number,
    private readonly logSize = CHANGE_LOG_SIZE,
  ) {}

  async version(): Promise<number> {
    return Number(await this.run(VERSION, [], 'overrides version'))
  }

  async load(): Promise<OverrideSnapshot> {
    const reply = (await this.run(LOAD, [], 'overrides load')) as unknown[]
    let version = 0
    const stamps = new Map<string, string>()
    const entries: StoredOverride[] = []
    for (let i = 0; i + 1 < reply.length; i += 2) {
      const field = String(reply[i])
      if (field === VERSION_FIELD) {
        version = Number(reply[i + 1])
        continue
      }
      if (field.startsWith(LOG_FIELD_PREFIX)) {
        const entry = String(reply[i + 1])
        stamps.set(field.slice(LOG_FIELD_PREFIX.length), entry.slice(0, Math.max(0, entry.indexOf(' '))))
        continue
      }
      // a field this service did not write (an edit by hand) is skipped, never half-read
      const change = fieldChange(field, reply[i + 1])
      if (change?.maxRequests !== undefined) entries.push(change as StoredOverride)
    }
    return { version, stamp: stamps.get(String(version)) ?? '', entries }
  }

  async changesSince(known: number, stamp: string): Promise<OverrideChanges> {
    const reply = (await this.run(CHANGES, [String(known), stamp, this.logSize - 1], 'overrides changes')) as unknown[]
    const version = Number(reply[0])
    if (reply.length === 1) return { version, stamp, changes: [] }
    if (typeof reply[1] !== 'string') return { version, stamp: '', changes: undefined }
    const changes: OverrideChange[] = []
    for (let i = 2; i + 1 < reply.length; i += 2) {
      const change = fieldChange(String(reply[i]), reply[i + 1])
      if (change !== undefined) changes.push(change)
    }
    return { version, stamp: reply[1], changes }
  }

  async set(override: StoredOverride): Promise<OverrideWrite> {
    const stamp = newStamp()
    const field = `${override.policy}:${override.userId}`
    const args = [stamp, field, this.logSize, override.maxRequests, firstVersion()]
    return { version: Number(await this.run(SET, args, 'overrides set')), stamp }
  }

  async remove(policy: string, userId: string): Promise<OverrideWrite | undefined> {
    const stamp = newStamp()
    const version = Number(await this.run(REMOVE, [stamp, `${policy}:${userId}`, this.logSize], 'overrides remove'))
    return version < 0 ? undefined : { version, stamp }
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
