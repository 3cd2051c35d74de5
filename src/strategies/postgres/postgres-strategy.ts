import pg from 'pg'
import { ConfigError, StoreError } from '../../core/errors.js'
import {
  type CounterRow,
  currentAndPrevious,
  type DiffBatch,
  type EscrowBatch,
  type EscrowReply,
  type Strategy,
} from '../../core/strategy.js'
import { BUILT_IN_STORES } from '../capabilities.js'
import { blockedUntil, blockParams, hitReadSql, purgeBlocksSql, pushBlocksSql, pushReadSql } from './blocks.js'
import { escrowDdl, escrowParams, escrowReply, escrowSql } from './escrow.js'
import { HitSender, hitsSql } from './hits.js'
import { runPurge } from './purge.js'
import { decodeKey, encodeKey, num, type PostgresStrategyOptions, positiveInteger, type PurgeReport } from './options.js'
import { type PgPoolLike, Sessions, type Statement } from './sessions.js'
import {
  bounded,
  ddl,
  isIdentifier,
  pageSql,
  purgeBatchSql,
  pushOneSql,
  pushParams,
  pushSql,
  RESET_NODE,
  SYNCHRONOUS_COMMIT,
  resetSql,
  type TableNames,
  tableNames,
  windowSql,
} from './sql.js'

// Up to this many written (and refreshed) windows a push uses the statement with a cached plan.
const SMALL_BATCH = 16

/**
 * A central store in PostgreSQL (9.5+ for ON CONFLICT; tested on 15). Each process owns its own
 * rows: one per key-window and node, holding its cumulative count and the `seq` of the batch
 * that wrote it. A push is one statement (arrays bound as parameters, unnested), so a
 * synchronous hit costs one round trip. Blocks live in a table beside the counters
 * (`<table>_blocks`), written and read by the same statement as the counts (blocks.ts). Create
 * the tables with {@link PostgresStrategy.migrate} or the DDL in docs/STORES-postgres.md; the
 * constructor has no side effects.
 *
 * @example
 * const store = new PostgresStrategy({ pool })
 * await store.migrate()
 * rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0.1, strategy: store })
 */
export class PostgresStrategy implements Strategy {
  readonly name = 'postgres'
  /** Counts are `numeric`: decimals are held exactly. */
  readonly supportsDecimals = BUILT_IN_STORES.postgres.supportsDecimals
  /** Blocks are rows of the blocks table, ended ones deleted by the purge. */
  readonly supportsBlocks = BUILT_IN_STORES.postgres.supportsBlocks
  /** Statements sent, by kind, for tests and benchmarks. */
  readonly calls = { push: 0, window: 0, page: 0, reset: 0, purge: 0, escrow: 0 }
  readonly names: TableNames
  private readonly pool: PgPoolLike
  private readonly ownPool: pg.Pool | undefined
  private readonly graceMs: number
  private readonly queryTimeoutMs: number
  private readonly pageSize: number
  private readonly purgeBatchSize: number
  private readonly purgeMaxBatches: number
  private readonly purgeIntervalMs: number
  private readonly onError: ((error: Error) => void) | undefined
  private readonly push: Statement
  private readonly pushSmall: Statement
  private readonly pushBlocks: Statement
  private readonly pushRead: Statement
  private readonly pushReadSmall: Statement
  private readonly hits: HitSender
  private readonly purgeBlocks: Statement
  private readonly window: Statement
  private readonly firstPage: Statement
  private readonly nextPage: Statement
  private readonly reset: Statement
  private readonly purgeBatch: Statement
  private readonly escrowCall: Statement
  /** Per namespace: window sizes seen in pushes and when the next automatic purge is due. */
  private readonly purgeState = new Map<string, { sizes: Set<number>; dueMs: number }>()
  private readonly background = new Set<Promise<unknown>>()
  private readonly sessions: Sessions
  private closed = false

  constructor(options: PostgresStrategyOptions) {
    if (typeof options !== 'object' || options === null) throw new ConfigError('INVALID_OPTION', 'postgres: options must be an object')
    const { pool, connectionString } = options
    if ((pool === undefined) === (connectionString === undefined))
      throw new ConfigError('INVALID_OPTION', 'postgres: give exactly one of pool (a pg.Pool) or connectionString')
    const schema = options.schema ?? 'public'
    const table = options.table ?? 'ratelimiting_counters'
    if (!isIdentifier(schema))
      throw new ConfigError(
        'INVALID_OPTION',
        `postgres: schema must be a plain identifier ([A-Za-z_][A-Za-z0-9_]*, 63 max), got ${JSON.stringify(schema)}`,
      )
    if (!isIdentifier(table) || table.length > 58)
      throw new ConfigError(
        'INVALID_OPTION',
        `postgres: table must be a plain identifier ([A-Za-z_][A-Za-z0-9_]*, 58 max), got ${JSON.stringify(table)}`,
      )
    const graceMs = options.graceMs ?? 10_000
    if (typeof graceMs !== 'number' || !Number.isFinite(graceMs) || graceMs < 0)
      throw new ConfigError('INVALID_OPTION', `postgres: graceMs must be a finite number >= 0, got ${String(options.graceMs)}`)
    this.graceMs = graceMs
    this.queryTimeoutMs = positiveInteger('queryTimeoutMs', options.queryTimeoutMs, 1000)
    this.pageSize = positiveInteger('pageSize', options.pageSize, 1000)
    this.purgeBatchSize = positiveInteger('purgeBatchSize', options.purgeBatchSize, 1000)
    this.purgeMaxBatches = positiveInteger('purgeMaxBatches', options.purgeMaxBatches, 100)
    this.purgeIntervalMs = positiveInteger('purgeIntervalMs', options.purgeIntervalMs, 60_000, 0)
    if (options.onError !== undefined && typeof options.onError !== 'function')
      throw new ConfigError('INVALID_OPTION', 'postgres: onError must be a function')
    this.onError = options.onError
    const commit = options.synchronousCommit
    if (commit !== undefined && !SYNCHRONOUS_COMMIT.includes(commit))
      throw new ConfigError(
        'INVALID_OPTION',
        `postgres: synchronousCommit must be one of ${SYNCHRONOUS_COMMIT.join(', ')}, got ${JSON.stringify(commit)}`,
      )
    if (pool !== undefined) {
      if (typeof pool !== 'object' || pool === null || typeof pool.connect !== 'function')
        throw new ConfigError('INVALID_OPTION', 'postgres: pool must be a pg.Pool (an object with connect())')
      this.pool = pool
    } else {
      if (typeof connectionString !== 'string' || connectionString.length === 0)
        throw new ConfigError('INVALID_OPTION', 'postgres: connectionString must be a non-empty string')
      // pg.Pool connects lazily: constructing it opens nothing.
      this.ownPool = new pg.Pool({
        connectionString,
        max: positiveInteger('poolSize', options.poolSize, 10),
        connectionTimeoutMillis: this.queryTimeoutMs,
      })
      // an idle client's socket error must not crash the process; the next checkout reconnects
      this.ownPool.on('error', (err) => this.onError?.(err))
      this.pool = this.ownPool
    }
    this.names = tableNames(schema, table)
    this.sessions = new Sessions(
      this.pool,
      this.name,
      this.queryTimeoutMs,
      `${this.names.qualified}, ${this.names.blocks} and the escrow tables and function`,
      () => this.closed,
    )
    // Named statements are parsed once per connection; the name is unique per table (a long
    // one ends in a hash: two tables sharing the first 50 characters must not share statements).
    const id = bounded(`rl_${schema}_${table}`, 50)
    this.push = { name: `${id}_push`, text: pushSql(this.names) }
    this.pushSmall = { name: `${id}_push1`, text: pushSql(this.names, true) }
    this.pushBlocks = { name: `${id}_pushb`, text: pushBlocksSql(this.names) }
    this.pushRead = { name: `${id}_pushr`, text: pushReadSql(this.names, false) }
    this.pushReadSmall = { name: `${id}_pushr1`, text: pushReadSql(this.names, true) }
    // the hits' statements differ with synchronousCommit, and so do their names
    const sc = commit === undefined ? '' : `_c${SYNCHRONOUS_COMMIT.indexOf(commit)}`
    const hits = {
      one: { name: `${id}_hit${sc}`, text: pushOneSql(this.names, undefined, commit) },
      oneWrite: { name: `${id}_hitw${sc}`, text: pushOneSql(this.names, undefined, commit, false) },
      oneBlocks: { name: `${id}_hitr${sc}`, text: hitReadSql(this.names, commit) },
      many: { name: `${id}_hits${sc}`, text: hitsSql(this.names, false, commit) },
      manyBlocks: { name: `${id}_hitsr${sc}`, text: hitsSql(this.names, true, commit) },
    }
    // hits past the pool's connections wait in the strategy and go out together (hits.ts)
    const connections = this.ownPool?.options.max ?? (pool as { options?: { max?: unknown } }).options?.max
    this.hits = new HitSender(
      this.sessions,
      hits,
      typeof connections === 'number' && connections >= 1 ? connections : 10,
      this.name,
      this.queryTimeoutMs,
      () => this.calls.push++,
    )
    this.purgeBlocks = { name: `${id}_purgeb`, text: purgeBlocksSql(this.names) }
    this.window = { name: `${id}_window`, text: windowSql(this.names) }
    this.firstPage = { name: `${id}_page0`, text: pageSql(this.names, false) }
    this.nextPage = { name: `${id}_page`, text: pageSql(this.names, true) }
    this.reset = { name: `${id}_reset`, text: resetSql(this.names) }
    this.purgeBatch = { name: `${id}_purge`, text: purgeBatchSql(this.names) }
    this.escrowCall = { name: `${id}_escrow`, text: escrowSql(this.names) }
  }

  /** The DDL `migrate()` runs, for those who apply migrations with their own tool. */
  ddl(): string {
    return `${ddl(this.names)}\n${escrowDdl(this.names)}`
  }

  /**
   * Creates the schema and tables (counters and blocks) if they do not exist, upgrading those of
   * an earlier version. Idempotent and safe to run from several processes at once (they take
   * turns on an advisory lock).
   */
  async migrate(): Promise<void> {
    const client = await this.sessions.checkout('migrate')
    let broken: Error | undefined
    try {
      await client.query('BEGIN')
      await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`ratelimiting:migrate:${this.names.qualified}`])
      await client.query(this.ddl())
      await client.query('COMMIT')
    } catch (err) {
      await client.query('ROLLBACK').catch((e: Error) => {
        broken = e
      })
      throw this.sessions.storeError('migrate', err)
    } finally {
      client.release(broken)
    }
  }

  async pushDiffs(batch: DiffBatch): Promise<CounterRow[]> {
    this.checkNode(batch.nodeId)
    // without blocks and readBlocks, the statements pushes have always sent
    const blocks = batch.blocks !== undefined && batch.blocks.length > 0 ? batch.blocks : undefined
    const readBlocks = batch.readBlocks === true
    if (batch.windows.length === 0 && batch.refresh.length === 0 && blocks === undefined) return []
    if (batch.windows.length === 1 && batch.refresh.length <= 1 && blocks === undefined) return this.pushOne(batch, readBlocks)
    const values = pushParams(batch)
    this.calls.push++
    const small = values[3].length <= SMALL_BATCH && values[7].length <= SMALL_BATCH
    let statement = small ? this.pushSmall : this.push
    if (blocks !== undefined) {
      const b = blockParams(blocks)
      values.push(b.keys, b.untils, b.replace)
      statement = this.pushBlocks
    } else if (readBlocks) statement = small ? this.pushReadSmall : this.pushRead
    const result = await this.sessions.query('pushDiffs', statement, values)
    this.schedulePurge(batch)
    const rows: CounterRow[] = []
    for (const r of result.rows as Array<Record<string, unknown>>) {
      const row: CounterRow = {
        key: decodeKey(r.key as string),
        windowStartMs: Number(r.window_start_ms),
        windowSizeMs: Number(r.window_size_ms),
        count: num(r.count),
        own: num(r.own),
      }
      rows.push(readBlocks ? { ...row, blockedUntilMs: blockedUntil(r.blocked_until_ms, batch.nowMs) } : row)
    }
    return rows
  }

  /**
   * Escrow (docs/STORES-postgres.md, "Escrow"): the batch's writes, reads and grants in one call
   * of the escrow function `migrate()` creates (escrow.ts): one round trip.
   */
  async escrow(batch: EscrowBatch): Promise<EscrowReply> {
    this.checkNode(batch.nodeId)
    this.calls.escrow++
    const result = await this.sessions.query('escrow', this.escrowCall, escrowParams(batch))
    this.schedulePurge({ namespace: batch.namespace, nowMs: batch.nowMs, windows: [...batch.windows, ...batch.grants] })
    try {
      return escrowReply(batch, result.rows as Array<Record<string, unknown>>)
    } catch (err) {
      throw this.sessions.storeError('escrow', err)
    }
  }

  private checkNode(nodeId: string): void {
    if (nodeId === RESET_NODE)
      throw new StoreError('STORE_ERROR', this.name, `node id "${RESET_NODE}" is reserved for reset offsets; use another nodeId`)
  }

  // A synchronous hit (one window written, at most one read): alone or with others (hits.ts).
  private async pushOne(batch: DiffBatch, readBlocks: boolean): Promise<CounterRow[]> {
    const rows = await this.hits.send(batch, readBlocks)
    this.schedulePurge(batch)
    return rows
  }

  async *getCounters(namespace: string, windowSizesMs: readonly number[], nowMs: number, nodeId = ''): AsyncIterable<CounterRow> {
    for (const { windowSizeMs: size, windowStartMs } of currentAndPrevious(nowMs, windowSizesMs)) {
      let after: string | undefined
      for (;;) {
        this.calls.page++
        const result =
          after === undefined
            ? await this.sessions.query('getCounters', this.firstPage, [namespace, size, windowStartMs, nodeId, this.pageSize])
            : await this.sessions.query('getCounters', this.nextPage, [namespace, size, windowStartMs, nodeId, this.pageSize, after])
        const page = result.rows as Array<Record<string, unknown>>
        for (const r of page) {
          yield {
            key: decodeKey(r.key as string),
            windowStartMs,
            windowSizeMs: size,
            count: num(r.count),
            own: num(r.own),
          }
        }
        if (page.length < this.pageSize) break
        after = (page[page.length - 1] as Record<string, unknown>).key as string
      }
    }
  }

  async getWindow(key: string, namespace: string, windowStartMs: number, windowSizeMs: number, nodeId = ''): Promise<CounterRow> {
    this.calls.window++
    const result = await this.sessions.query('getWindow', this.window, [namespace, windowSizeMs, windowStartMs, encodeKey(key), nodeId])
    const r = (result.rows[0] ?? {}) as Record<string, unknown>
    return {
      key,
      windowStartMs,
      windowSizeMs,
      count: num(r.count),
      own: num(r.own),
    }
  }

  async resetKey(namespace: string, key: string, windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    const spans = currentAndPrevious(nowMs, windowSizesMs)
    const sizes = spans.map((w) => w.windowSizeMs)
    const starts = spans.map((w) => w.windowStartMs)
    this.calls.reset++
    await this.sessions.query('resetKey', this.reset, [namespace, encodeKey(key), sizes, starts])
  }

  async purge(namespace: string, windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    await this.purgeNow(namespace, windowSizesMs, nowMs)
  }

  /**
   * Deletes the namespace's windows of `windowSizesMs` that expired at `nowMs`, and its blocks
   * that ended `graceMs` before it, in statements of at most `purgeBatchSize` rows, while holding
   * a session advisory lock: a process that finds the lock taken returns at once
   * (`locked: false`), so one process purges at a time (purge.ts).
   */
  purgeNow(namespace: string, windowSizesMs: readonly number[], nowMs: number): Promise<PurgeReport> {
    return runPurge(
      this.sessions,
      {
        lockKey: `ratelimiting:purge:${this.names.qualified}:${namespace}`,
        graceMs: this.graceMs,
        batchSize: this.purgeBatchSize,
        maxBatches: this.purgeMaxBatches,
        windows: this.purgeBatch,
        blocks: this.purgeBlocks,
        onStatement: () => this.calls.purge++,
      },
      namespace,
      windowSizesMs,
      nowMs,
    )
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    await Promise.allSettled([...this.background])
    await this.ownPool?.end()
  }

  private schedulePurge(batch: { namespace: string; nowMs: number; windows: ReadonlyArray<{ windowSizeMs: number }> }): void {
    if (this.purgeIntervalMs === 0 || this.closed) return
    let state = this.purgeState.get(batch.namespace)
    if (state === undefined) {
      state = { sizes: new Set(), dueMs: batch.nowMs + this.purgeIntervalMs }
      this.purgeState.set(batch.namespace, state)
    }
    for (const w of batch.windows) state.sizes.add(w.windowSizeMs)
    if (batch.nowMs < state.dueMs || state.sizes.size === 0) return
    state.dueMs = batch.nowMs + this.purgeIntervalMs
    const run = this.purgeNow(batch.namespace, [...state.sizes], batch.nowMs).then(
      () => undefined,
      (err: unknown) => this.onError?.(err instanceof Error ? err : new Error(String(err))),
    )
    this.background.add(run)
    void run.finally(() => this.background.delete(run))
  }
}
