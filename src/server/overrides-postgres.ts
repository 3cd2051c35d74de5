import type * as pg from 'pg'
import { type Statement, Sessions } from '../strategies/postgres/sessions.js'
import type { ServiceConfig } from './config.js'
import { firstVersion, type OverrideBackend, type OverrideSnapshot, type StoredOverride } from './overrides-store.js'
import { loadStoreModule } from './stores.js'

// The runtime overrides on PostgreSQL: two tables in `store.schema`, created when missing (by the
// first call that needs them, so the service starts while the database is down), next to the
// counters table. Every override row and the version row carry the config's key prefix as
// `scope`, so services with different prefixes can share a database, as they share a Redis.

/** The table of the overrides. */
export const OVERRIDES_TABLE = 'ratelimiting_overrides'
/** The table of their version, one row per scope. */
export const OVERRIDES_VERSION_TABLE = 'ratelimiting_overrides_version'

/**
 * The DDL: idempotent, and run by one instance at a time (an advisory lock held for the
 * statement's implicit transaction), since concurrent `CREATE TABLE IF NOT EXISTS` may collide.
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
);`
}

/** The statements, named per schema (each is parsed once per connection). */
function statements(schema: string): Record<'version' | 'load' | 'set' | 'remove', Statement> {
  const overrides = `"${schema}"."${OVERRIDES_TABLE}"`
  const versions = `"${schema}"."${OVERRIDES_VERSION_TABLE}"`
  // a write and its version bump are one statement: one transaction, no window between them
  // a new scope's version starts at firstVersion(), the statement's last parameter
  const bump = (start: string) => `INSERT INTO ${versions} AS v (scope, version) SELECT $1, ${start}::bigint FROM w
ON CONFLICT (scope) DO UPDATE SET version = v.version + 1 RETURNING v.version::text AS version`
  const id = `rl_ov_${schema}`.slice(0, 50)
  return {
    version: {
      name: `${id}_version`,
      text: `SELECT coalesce((SELECT version FROM ${versions} WHERE scope = $1), 0)::text AS version`,
    },
    // one statement, one snapshot: the rows and the version agree
    load: {
      name: `${id}_load`,
      text: `SELECT coalesce((SELECT version FROM ${versions} WHERE scope = $1), 0)::text AS version,
  coalesce((SELECT json_agg(json_build_array(policy, user_id, max_requests::text)) FROM ${overrides} WHERE scope = $1), '[]'::json) AS entries`,
    },
    set: {
      name: `${id}_set`,
      text: `WITH w AS (INSERT INTO ${overrides} (scope, policy, user_id, max_requests) VALUES ($1, $2, $3, $4)
  ON CONFLICT (scope, policy, user_id) DO UPDATE SET max_requests = EXCLUDED.max_requests, updated_at = now() RETURNING 1)
${bump('$5')}`,
    },
    remove: {
      name: `${id}_remove`,
      text: `WITH w AS (DELETE FROM ${overrides} WHERE scope = $1 AND policy = $2 AND user_id = $3 RETURNING 1)
${bump('$4')}`,
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
    const row = result.rows[0] as { version: string; entries: Array<[string, string, string]> }
    const entries: StoredOverride[] = row.entries.map(([policy, userId, max]) => ({ policy, userId, maxRequests: Number(max) }))
    return { version: Number(row.version), entries }
  }

  async set(override: StoredOverride): Promise<number> {
    const result = await this.query('overrides set', this.sql.set, [override.policy, override.userId, override.maxRequests, firstVersion()])
    return Number((result.rows[0] as { version: string }).version)
  }

  async remove(policy: string, userId: string): Promise<number | undefined> {
    const result = await this.query('overrides remove', this.sql.remove, [policy, userId, firstVersion()])
    const row = result.rows[0] as { version: string } | undefined
    return row === undefined ? undefined : Number(row.version)
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
