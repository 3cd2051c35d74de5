import type * as pg from 'pg'
import { StoreError } from '../../core/errors.js'
import { withTimeout } from '../../core/timeout.js'

/** The part of a `pg` pool client the strategy uses. */
export type PgClientLike = Pick<pg.PoolClient, 'query' | 'release'>

/** The part of a `pg.Pool` the strategy uses: it only checks clients out. */
export interface PgPoolLike {
  connect(): Promise<PgClientLike>
}

/** A prepared statement: parsed once per connection under its name. */
export interface Statement {
  readonly name: string
  readonly text: string
}

const SQLSTATE_UNDEFINED_TABLE = '42P01'
// a function migrate() creates (escrow's) is missing: a database migrated by an earlier version
const SQLSTATE_UNDEFINED_FUNCTION = '42883'
// Clients given their no-op 'error' listener (see guard), shared by every strategy: several on
// one pool add one listener per client, not one each (Node warns past 10).
const guarded = new WeakSet<object>()
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  '57P01',
  '57P02',
  '57P03',
])

/**
 * The PostgreSQL strategy's sessions: a client checked out of the pool and one statement run on
 * it, each bounded by `queryTimeoutMs` (core/timeout.ts); a client whose statement timed out or
 * whose connection failed is destroyed, not returned to the pool; driver errors become
 * StoreErrors that say whether the server was unreachable.
 */
export class Sessions {
  private readonly pool: PgPoolLike
  private readonly strategy: string
  private readonly queryTimeoutMs: number
  /** The tables migrate() creates, for the message of a missing one. */
  private readonly tables: string
  private readonly closed: () => boolean

  constructor(pool: PgPoolLike, strategy: string, queryTimeoutMs: number, tables: string, closed: () => boolean) {
    this.pool = pool
    this.strategy = strategy
    this.queryTimeoutMs = queryTimeoutMs
    this.tables = tables
    this.closed = closed
  }

  /** Runs one prepared statement on a pooled client. */
  async query(what: string, statement: Statement, values: unknown[]): Promise<pg.QueryResult> {
    const client = await this.checkout(what)
    let broken: Error | undefined
    try {
      return await this.timed(client, what, { name: statement.name, text: statement.text, values })
    } catch (err) {
      // a timed-out or dropped connection must not go back to the pool
      if (!(err instanceof StoreError) || err.code !== 'STORE_ERROR') broken = err instanceof Error ? err : new Error(String(err))
      throw err
    } finally {
      client.release(broken)
    }
  }

  /** A client from the pool, within `queryTimeoutMs`. */
  checkout(what: string): Promise<PgClientLike> {
    if (this.closed()) return Promise.reject(new StoreError('STORE_UNAVAILABLE', this.strategy, `${what}: strategy is closed`))
    const connecting = this.pool.connect().then(
      (client) => {
        this.guard(client)
        return client
      },
      (err: unknown) => {
        throw this.storeError(what, err)
      },
    )
    // a connection that comes after the deadline goes straight back to the pool
    return withTimeout(connecting, this.queryTimeoutMs, this.strategy, `${what}: connection checkout`, {
      onLate: (client) => client.release(),
    })
  }

  /** Runs one statement; past `queryTimeoutMs` the call fails (and `query` destroys the client). */
  timed(client: PgClientLike, what: string, config: pg.QueryConfig): Promise<pg.QueryResult> {
    const running = client.query(config).catch((err: unknown) => {
      throw this.storeError(what, err)
    })
    return withTimeout(running, this.queryTimeoutMs, this.strategy, what, { detail: 'the write may have landed' })
  }

  /** A driver error as a StoreError: the server unreachable, a missing table, or another failure. */
  storeError(what: string, err: unknown): StoreError {
    if (err instanceof StoreError) return err
    const e = err as { code?: unknown; message?: unknown } | undefined
    const code = typeof e?.code === 'string' ? e.code : undefined
    const message = typeof e?.message === 'string' ? e.message : String(err)
    if (code === SQLSTATE_UNDEFINED_TABLE || code === SQLSTATE_UNDEFINED_FUNCTION)
      return new StoreError('STORE_ERROR', this.strategy, `${what}: ${message} (run migrate() first: it creates ${this.tables})`, {
        cause: err,
      })
    const unavailable =
      (code !== undefined && CONNECTION_CODES.has(code)) || /Connection terminated|connect|ECONNRESET|socket/i.test(message)
    return new StoreError(unavailable ? 'STORE_UNAVAILABLE' : 'STORE_ERROR', this.strategy, `${what}: ${message}`, { cause: err })
  }

  // pg emits 'error' on a client whose socket dies while it is checked out, and pg-pool only
  // listens while it is idle: without a listener of our own that would crash the process. The
  // failure itself reaches the pending query.
  private guard(client: PgClientLike): void {
    const emitter = client as unknown as { on?: (event: string, listener: (err: Error) => void) => unknown }
    if (guarded.has(client) || typeof emitter.on !== 'function') return
    guarded.add(client)
    emitter.on('error', () => undefined)
  }
}
