/** The PostgreSQL strategy's options, how their numbers are checked, and how keys and counts are stored. */
import { ConfigError } from '../../core/errors.js'
import { hasLoneSurrogate } from '../../core/strategy.js'
import type { PgPoolLike } from './sessions.js'
import type { SynchronousCommit } from './sql.js'

/** Options of {@link PostgresStrategy}. Give `pool` or `connectionString`, not both. */
export interface PostgresStrategyOptions {
  /** A `pg.Pool` you own: the strategy checks clients out of it and never ends it. */
  readonly pool?: PgPoolLike
  /** A connection URI; the strategy then opens (and on `close()` ends) a pool of its own. */
  readonly connectionString?: string
  /** Connections of the strategy's own pool (with `connectionString`). @default 10 */
  readonly poolSize?: number
  /** Schema of the counters table; created by `migrate()` if missing. @default "public" */
  readonly schema?: string
  /** Name of the counters table. @default "ratelimiting_counters" */
  readonly table?: string
  /** How long a window outlives the two windows a rate can read, ms. @default 10_000 */
  readonly graceMs?: number
  /**
   * Longest wait for a connection or one statement, ms. On expiry the connection is destroyed
   * (a hung connection never comes back to the pool) and the call fails with STORE_TIMEOUT.
   * Keep it at or below the namespaces' `storeTimeoutMs`. @default 1000
   */
  readonly queryTimeoutMs?: number
  /** Rows per page of `getCounters`. @default 1000 */
  readonly pageSize?: number
  /** Rows one purge statement deletes at most. @default 1000 */
  readonly purgeBatchSize?: number
  /** Purge statements one `purge()` runs at most per window size; the rest waits for the next run. @default 100 */
  readonly purgeMaxBatches?: number
  /**
   * Pushes start a background purge of their namespace at most this often, ms (no timer: the
   * purge rides on the traffic). 0 leaves purging to your calls of `purge()`. @default 60_000
   */
  readonly purgeIntervalMs?: number
  /**
   * `synchronous_commit` for the transactions of synchronous hits only (`syncRate: 0`), set by
   * their own statement: the session's and the server's setting stay as they are. Unset: the
   * server's. `"off"`: a hit is answered without waiting for its commit's WAL flush, which is
   * most of a hit's time on a disk that flushes slowly; a server crash (not a client's) then
   * loses the commits of its last moments (up to 3 × `wal_writer_delay`, 600 ms by default),
   * which the live processes push again (their `own` came back lower), and never corrupts the
   * table; blocks are written durably as ever. docs/STORES-postgres.md, "Faults". @default undefined
   */
  readonly synchronousCommit?: SynchronousCommit
  /** Called with failures of background work (the automatic purge); the strategy never prints. */
  readonly onError?: (error: Error) => void
}

/** What one purge run did. */
export interface PurgeReport {
  /** False when another process held the purge lock: this run deleted nothing. */
  readonly locked: boolean
  /** Window rows deleted. */
  readonly deleted: number
  /** Ended blocks deleted (rows of the blocks table). */
  readonly blocksDeleted: number
  /** DELETE statements run (windows and blocks). */
  readonly batches: number
}

// Postgres text cannot hold NUL; such keys (and keys that would look escaped) are stored as
// \u0001 + JSON, which is injective and leaves every other key as it is.
const ESCAPE = '\u0001'
export function encodeKey(key: string): string {
  // JSON.stringify writes a lone surrogate as \udXXX: UTF-8 would turn it into U+FFFD
  return key.includes('\u0000') || key.startsWith(ESCAPE) || hasLoneSurrogate(key) ? ESCAPE + JSON.stringify(key) : key
}
export function decodeKey(stored: string): string {
  return stored.startsWith(ESCAPE) ? (JSON.parse(stored.slice(1)) as string) : stored
}

export function positiveInteger(name: string, value: unknown, fallback: number, min = 1): number {
  const v = value ?? fallback
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min)
    throw new ConfigError('INVALID_OPTION', `postgres: ${name} must be an integer >= ${min}, got ${String(value)}`)
  return v
}

// numeric comes back as text; counts are sums of JS numbers, so Number() is exact for every
// count the engine can have produced.
export function num(text: unknown): number {
  return typeof text === 'string' ? Number(text) : typeof text === 'number' ? text : 0
}
