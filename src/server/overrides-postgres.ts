import type * as pg from 'pg'
import { type Statement, Sessions } from '../strategies/postgres/sessions.js'
import type { ServiceConfig } from './config.js'
import {
  CHANGE_LOG_SIZE,
  firstVersion,
  newStamp,
  type OverrideBackend,
  type OverrideChange,
  type OverrideChanges,
  type OverrideSnapshot,
  type OverrideWrite,
  type StoredOverride,
} from './overrides-store.js'
import { loadStoreModule } from './stores.js'

// The runtime overrides on PostgreSQL: three tables in `store.schema`, created when missing (by
// the first call that needs them, so the service starts while the database is down), next to the
// counters table. Every override row, version row and log row carries the config's key prefix as
// `scope`, so services with different prefixes can share a database, as they share a Redis.
// A write, its version bump and its log row are one statement; a reader asks for the log rows
// after the version it holds, joined with the overrides they name, in one statement too.

/** The table of the overrides. */
export const OVERRIDES_TABLE = 'ratelimiting_overrides'
/** The table of their version, one row per scope. */
export const OVERRIDES_VERSION_TABLE = 'ratelimiting_overrides_version'
/** The change log: one row per write (its version, its stamp, the override written), the last CHANGE_LOG_SIZE per scope. */
export const OVERRIDES_LOG_TABLE = 'ratelimiting_overrides_log'

/**
 * The DDL: idempotent, and run by one instance at a time (an advisory lock held for the
 * statement's implicit transaction), since concurrent `CREATE TABLE IF NOT EXISTS` may collide.
 * Tables made by an earlier version (the overrides and their version, no log) are kept as they
 * are: the log table is added next to them, and the first reader loads the whole set once.
 */
export function overridesDdl(schema: string): string {
  return `SELECT pg_advisory_xact_lock(hashtextextended('ratelimiting:overrides:${schema}', 0));
CREATE SCHEMA IF NOT EXISTS "${schema}";
CREATE TABLE IF NOT EXISTS "${schema}"."${OVERRIDES_TABLE}" (
  scope        text COLLATE "C" NOT NULL,
  policy       text COLLATE "C" NOT NULL,
  user_id      text COLLATE "C" NOT NULL,
  max_requests bigint NOT NULL CHECK (max_requests > 0),
  updated_at   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT "${OVERRIDES_TABLE}_pkey" PRIMARY KEY (scope, policy, user_id)
);
CREATE TABLE IF NOT EXISTS "${schema}"."${OVERRIDES_VERSION_TABLE}" (
  scope   text COLLATE "C" NOT NULL PRIMARY KEY,
  version bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS "${schema}"."${OVERRIDES_LOG_TABLE}" (
  scope   text COLLATE "C" NOT NULL,
  version bigint NOT NULL,
  stamp   text NOT NULL,
  policy  text COLLATE "C" NOT NULL,
  user_id text COLLATE "C" NOT NULL,
  CONSTRAINT "${OVERRIDES_LOG_TABLE}_pkey" PRIMARY KEY (scope, version)
);`
}

/** The statements, named per schema (each is parsed once per connection). */
function statements(schema: string): Record<'version' | 'load' | 'changes' | 'set' | 'remove', Statement> {
  const overrides = `"${schema}"."${OVERRIDES_TABLE}"`
  const versions = `"${schema}"."${OVERRIDES_VERSION_TABLE}"`
  const log = `"${schema}"."${OVERRIDES_LOG_TABLE}"`
  // a write, its version bump and its log row are one statement: one transaction, no window
  // between them. The bump locks the scope's version row until the commit, so versions are
  // consecutive and commit in order: a reader that sees a version sees every log row up to it.
  // A new scope's version starts at firstVersion() ($first); the log keeps the last $size rows.
  const bump = (
    first: string,
    stamp: string,
    size: string,
  ) => `b AS (INSERT INTO ${versions} AS v (scope, version) SELECT $1, ${first}::bigint FROM w
  ON CONFLICT (scope) DO UPDATE SET version = v.version + 1 RETURNING v.version),
l AS (INSERT INTO ${log} (scope, version, stamp, policy, user_id) SELECT $1, version, ${stamp}::text, $2, $3 FROM b),
t AS (DELETE FROM ${log} WHERE scope = $1 AND version <= (SELECT version FROM b) - ${size}::bigint)
SELECT version::text AS version FROM b`
  const head = `coalesce((SELECT version FROM ${versions} WHERE scope = $1), 0)`
  const id = `rl_ov_${schema}`.slice(0, 50)
  return {
    version: {
      name: `${id}_version`,
      text: `SELECT ${head}::text AS version`,
    },
    // one statement, one snapshot: the rows and the version agree
    load: {
      name: `${id}_load`,
      text: `SELECT h.version::text AS version, (SELECT stamp FROM ${log} WHERE scope = $1 AND version = h.version) AS stamp,
  coalesce((SELECT json_agg(json_build_array(policy, user_id, max_requests::text)) FROM ${overrides} WHERE scope = $1), '[]'::json) AS entries
FROM (SELECT ${head} AS version) h`,
    },
    // $2 the version the reader holds, $3 the most log rows to read: the stamp of $2's row, and
    // when the version moved forward by at most $3, the log rows after $2 with their overrides now
    changes: {
      name: `${id}_changes`,
      text: `SELECT h.version::text AS version, (SELECT stamp FROM ${log} WHERE scope = $1 AND version = $2::bigint) AS stamp,
  CASE WHEN h.version > $2::bigint AND h.version - $2::bigint <= $3::bigint THEN coalesce((
    SELECT json_agg(json_build_array(l.version::text, l.stamp, l.policy, l.user_id, o.max_requests::text) ORDER BY l.version)
    FROM ${log} l LEFT JOIN ${overrides} o ON o.scope = l.scope AND o.policy = l.policy AND o.user_id = l.user_id
    WHERE l.scope = $1 AND l.version > $2::bigint AND l.version <= h.version), '[]'::json) END AS changes
FROM (SELECT ${head} AS version) h`,
    },
    set: {
      name: `${id}_set`,
      text: `WITH w AS (INSERT INTO ${overrides} (scope, policy, user_id, max_requests) VALUES ($1, $2, $3, $4)
  ON CONFLICT (scope, policy, user_id) DO UPDATE SET max_requests = EXCLUDED.max_requests, updated_at = now() RETURNING 1),
${bump('$5', '$6', '$7')}`,
    },
    remove: {
      name: `${id}_remove`,
      text: `WITH w AS (DELETE FROM ${overrides} WHERE scope = $1 AND policy = $2 AND user_id = $3 RETURNING 1),
${bump('$4', '$5', '$6')}`,
    },
  }
}

/** Opens a small pool of its own on `store.url` (the counters' strategy keeps its pool to itself). */
export async function openPostgresOverrides(config: ServiceConfig, onError: (err: Error) => void): Promise<OverrideBackend> {
  const module = await loadStoreModule('pg', 'postgres')
  const driver = (module.default ?? module) as typeof pg
  const timeoutMs = config.store.timeoutMs
  const pool = new driver.Pool({
    connectionString: config.store.url,
    max: 2,
    connectionTimeoutMillis: Math.max(timeoutMs, 1000),
    idleTimeoutMillis: 10_000,
  })
  // an idle client whose connection dies emits on the pool: report it, never crash
  pool.on('error', onError)
  return new PostgresOverrides(pool, config.store.schema ?? 'public', config.keyPrefix, timeoutMs)
}

class PostgresOverrides implements OverrideBackend {
  readonly type = 'postgres'
  private readonly sessions: Sessions
  private readonly sql: ReturnType<typeof statements>
  private created: Promise<void> | undefined
  private closed = false

  constructor(
    private readonly pool: pg.Pool,
    private readonly schema: string,
    private readonly scope: string,
    timeoutMs: number,
  ) {
    this.sessions = new Sessions(pool, 'postgres', timeoutMs, `"${schema}"."${OVERRIDES_TABLE}"`, () => this.closed)
    this.sql = statements(schema)
  }

  async version(): Promise<number> {
    const result = await this.query('overrides version', this.sql.version, [])
    return Number((result.rows[0] as { version: string }).version)
  }

  async load(): Promise<OverrideSnapshot> {
    const result = await this.query('overrides load', this.sql.load, [])
    const row = result.rows[0] as { version: string; stamp: string | null; entries: Array<[string, string, string]> }
    const entries: StoredOverride[] = row.entries.map(([policy, userId, max]) => ({ policy, userId, maxRequests: Number(max) }))
    return { version: Number(row.version), stamp: row.stamp ?? '', entries }
  }

  async changesSince(known: number, stamp: string): Promise<OverrideChanges> {
    const result = await this.query('overrides changes', this.sql.changes, [String(known), CHANGE_LOG_SIZE - 1])
    const row = result.rows[0] as {
      version: string
      stamp: string | null
      changes: Array<[string, string, string, string, string | null]> | null
    }
    const version = Number(row.version)
    // the row of the version held is another write than the one read: the store lost data
    if ((row.stamp ?? '') !== stamp) return { version, stamp: '', changes: undefined }
    if (version === known) return { version, stamp, changes: [] }
    const rows = row.changes
    // too far behind, gone back, or a gap (a row trimmed, or a write by an earlier version that logs none)
    if (rows === null || rows.length !== version - known) return { version, stamp: '', changes: undefined }
    const byOverride = new Map<string, OverrideChange>()
    for (let i = 0; i < rows.length; i++) {
      const [at, , policy, userId, max] = rows[i] as [string, string, string, string, string | null]
      if (Number(at) !== known + 1 + i) return { version, stamp: '', changes: undefined }
      byOverride.set(`${policy}\0${userId}`, { policy, userId, maxRequests: max === null ? undefined : Number(max) })
    }
    return {
      version,
      stamp: (rows[rows.length - 1] as [string, string, string, string, string | null])[1],
      changes: [...byOverride.values()],
    }
  }

  async set(override: StoredOverride): Promise<OverrideWrite> {
    const stamp = newStamp()
    const values = [override.policy, override.userId, override.maxRequests, firstVersion(), stamp, CHANGE_LOG_SIZE]
    const result = await this.query('overrides set', this.sql.set, values)
    return { version: Number((result.rows[0] as { version: string }).version), stamp }
  }

  async remove(policy: string, userId: string): Promise<OverrideWrite | undefined> {
    const stamp = newStamp()
    const result = await this.query('overrides remove', this.sql.remove, [policy, userId, firstVersion(), stamp, CHANGE_LOG_SIZE])
    const row = result.rows[0] as { version: string } | undefined
    return row === undefined ? undefined : { version: Number(row.version), stamp }
  }

  async close(): Promise<void> {
    this.closed = true
    await this.pool.end()
  }

  private async query(what: string, statement: Statement, values: unknown[]): Promise<pg.QueryResult> {
    await this.createTables()
    return this.sessions.query(what, statement, [this.scope, ...values])
  }

  // Creates the tables on first use; a failure is tried again by the next call.
  private createTables(): Promise<void> {
    this.created ??= (async () => {
      const what = 'creating the overrides tables'
      const client = await this.sessions.checkout(what)
      let broken: Error | undefined
      try {
        await this.sessions.timed(client, what, { text: overridesDdl(this.schema) })
      } catch (err) {
        broken = err instanceof Error ? err : new Error(String(err))
        throw err
      } finally {
        client.release(broken)
      }
    })().catch((err: unknown) => {
      this.created = undefined
      throw err
    })
    return this.created
  }
}
