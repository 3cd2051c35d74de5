/**
 * An example store written outside src/: the fleet's counters in one MySQL 8 / MariaDB 10.6+
 * table, through the mysql2 driver. It implements the whole `Strategy` contract and passes the
 * package's own store suites (test/integration/example-mysql-store.test.ts); docs/STORES.md,
 * "An example: MySQL and MariaDB", walks through it. To use it in your project, copy this file
 * and import from 'ratelimiting' where it imports from '../src/index.js'.
 *
 * Run: node --import tsx examples/mysql-store.ts
 *      (MariaDB or MySQL on 127.0.0.1:3306, database "test"; RL_MYSQL_URL overrides)
 */
import { createHash } from 'node:crypto'
import mysql, { type Pool, type PoolConnection } from 'mysql2/promise'
import {
  type BlockWrite,
  ConfigError,
  type CounterRow,
  currentAndPrevious,
  type Decision,
  foldBlockWrites,
  type DiffBatch,
  RateLimiting,
  StoreError,
  type Strategy,
  type WindowPush,
  type WindowRef,
  withTimeout,
} from '../src/index.js'

/** Options of {@link MysqlStrategy}. Give `pool` or `uri`, not both. */
export interface MysqlStrategyOptions {
  /**
   * A mysql2/promise pool you own, created with `multipleStatements: true` (a push is one query
   * of three statements). The strategy checks connections out of it and never ends it.
   */
  readonly pool?: Pool
  /** A connection URI (`mysql://user:password@host:3306/database`); the strategy then opens its own pool and ends it on `close()`. */
  readonly uri?: string
  /** Connections of the strategy's own pool (with `uri`). @default 10 */
  readonly poolSize?: number
  /** The table, in the connection's database; `migrate()` creates it. @default "ratelimiting_counters" */
  readonly table?: string
  /**
   * Longest wait for a connection or one query, ms. On expiry the connection is destroyed (a
   * query may still be running on it) and the call fails with STORE_TIMEOUT. Keep it at or
   * below the namespaces' `storeTimeoutMs`. @default 1000
   */
  readonly timeoutMs?: number
  /** How long `purge()` keeps a window beyond the two windows a rate can read, ms. @default 10_000 */
  readonly graceMs?: number
  /** Keys per page of `getCounters` (the `fetch()` warm-up). @default 1000 */
  readonly pageSize?: number
  /** Rows one purge statement deletes at most. @default 1000 */
  readonly purgeBatchSize?: number
}

/** The node id whose row holds a key-window's reset offset. Reserved: a push from it is refused. */
export const RESET_NODE = '~reset'

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/
const ER_NO_SUCH_TABLE = 1146
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'ENOTFOUND',
  'EHOSTUNREACH',
  'PROTOCOL_CONNECTION_LOST',
  'PROTOCOL_SEQUENCE_TIMEOUT',
  'ER_CON_COUNT_ERROR',
  'ER_SERVER_SHUTDOWN',
])

/**
 * Keys, namespaces and node ids are any JavaScript string, lone surrogates and NUL included.
 * Their UTF-16LE bytes are the string itself, code unit by code unit (UTF-8 would turn a lone
 * surrogate into U+FFFD), and their SHA-256 is a fixed-length primary key column however long
 * the string is.
 */
function utf16(text: string): Buffer {
  return Buffer.from(text, 'utf16le')
}
function sha256(bytes: Buffer): Buffer {
  return createHash('sha256').update(bytes).digest()
}

// DECIMAL(65,30) holds a count to 30 decimal places (the server rounds what is finer) and up
// to 10^35. A count travels as the shortest text that reads back as the same number (the server
// parses exponents exactly): counts of 0.1 and 0.2 from two nodes then sum to exactly 0.3, not
// to the sum of the binary doubles' long expansions.
function decimalText(key: string, count: number): string {
  if (!Number.isFinite(count))
    throw new StoreError('STORE_ERROR', 'mysql', `pushDiffs: the count of key ${JSON.stringify(key)} is ${count}`)
  return String(count)
}

function positiveInteger(name: string, value: unknown, fallback: number, min = 1): number {
  const v = value ?? fallback
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min)
    throw new ConfigError('INVALID_OPTION', `mysql: ${name} must be an integer >= ${min}, got ${String(value)}`)
  return v
}

// DECIMAL sums come back as text (mysql2's default); they are sums of the counts we wrote.
function num(value: unknown): number {
  return typeof value === 'string' ? Number(value) : typeof value === 'number' ? value : 0
}

/** The lookup key of a key-window in a push's reply. */
function windowId(size: unknown, start: unknown, keyHash: Buffer): string {
  return `${String(size)}|${String(start)}|${keyHash.toString('hex')}`
}

/** The SQL of one table: every statement, built once from a validated identifier. */
class Statements {
  readonly table: string
  readonly ddl: string
  readonly firstPage: string
  readonly nextPage: string
  readonly window: string
  readonly purge: string
  readonly blocks: string
  readonly purgeBlocks: string

  constructor(table: string) {
    const t = `\`${table}\``
    this.table = t
    // blocks (limiter.block(), a limit's blockMs) beside the counters: one row per blocked key
    this.blocks = `\`${table}_blocks\``
    this.ddl = `CREATE TABLE IF NOT EXISTS ${t} (
  ns_hash         BINARY(32)     NOT NULL COMMENT 'SHA-256 of the namespace in UTF-16LE',
  window_size_ms  BIGINT         NOT NULL,
  window_start_ms BIGINT         NOT NULL,
  key_hash        BINARY(32)     NOT NULL COMMENT 'SHA-256 of key_bytes',
  node_hash       BINARY(32)     NOT NULL COMMENT 'SHA-256 of the node id in UTF-16LE; of "${RESET_NODE}" for the reset offset',
  key_bytes       MEDIUMBLOB     NOT NULL COMMENT 'the key in UTF-16LE',
  hits            DECIMAL(65,30) NOT NULL COMMENT 'the node''s cumulative count in the window',
  seq             BIGINT         NOT NULL COMMENT 'the batch that wrote it',
  PRIMARY KEY (ns_hash, window_size_ms, window_start_ms, key_hash, node_hash)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS ${this.blocks} (
  ns_hash  BINARY(32) NOT NULL,
  key_hash BINARY(32) NOT NULL COMMENT 'SHA-256 of the key in UTF-16LE',
  until_ms BIGINT     NOT NULL COMMENT 'when the block ends, epoch ms',
  PRIMARY KEY (ns_hash, key_hash)
) ENGINE=InnoDB`
    const page = `SELECT key_hash, MAX(key_bytes) AS key_bytes, SUM(hits) AS total, SUM(IF(node_hash = ?, hits, 0)) AS own
FROM ${t} WHERE ns_hash = ? AND window_size_ms = ? AND window_start_ms = ?`
    this.firstPage = `${page} GROUP BY key_hash ORDER BY key_hash LIMIT ?`
    this.nextPage = `${page} AND key_hash > ? GROUP BY key_hash ORDER BY key_hash LIMIT ?`
    this.window = `SELECT SUM(hits) AS total, SUM(IF(node_hash = ?, hits, 0)) AS own
FROM ${t} WHERE ns_hash = ? AND window_size_ms = ? AND window_start_ms = ? AND key_hash = ?`
    this.purge = `DELETE FROM ${t} WHERE ns_hash = ? AND window_size_ms = ? AND window_start_ms <= ? LIMIT ?`
    this.purgeBlocks = `DELETE FROM ${this.blocks} WHERE ns_hash = ? AND until_ms <= ? LIMIT ?`
  }

  /**
   * One push, one query of three statements (one round trip): the batch's constants into
   * session variables; this node's rows, each replaced only by a newer seq (hits is assigned
   * before seq, so it compares the stored seq); then the total and this node's share of every
   * written and refreshed key-window. Each statement commits on its own, so the read sees this
   * write and every write committed before it.
   */
  push(writes: number, reads: number, blocks: BlockStatements = NO_BLOCKS): string {
    const parts = ['SET @rl_ns = ?, @rl_node = ?, @rl_seq = ?']
    // block writes first, so the reads see them: lifts, then blocks keeping the later end
    if (blocks.lifts > 0)
      parts.push(
        `DELETE FROM ${this.blocks} WHERE ns_hash = @rl_ns AND key_hash IN (${Array.from({ length: blocks.lifts }, () => '?').join(', ')})`,
      )
    if (blocks.sets > 0)
      parts.push(`INSERT INTO ${this.blocks} (ns_hash, key_hash, until_ms) VALUES ${Array.from({ length: blocks.sets }, () => '(@rl_ns, ?, ?)').join(', ')}
ON DUPLICATE KEY UPDATE until_ms = GREATEST(until_ms, VALUES(until_ms))`)
    if (writes > 0)
      parts.push(`INSERT INTO ${this.table} (ns_hash, window_size_ms, window_start_ms, key_hash, node_hash, key_bytes, hits, seq)
VALUES ${Array.from({ length: writes }, () => '(@rl_ns, ?, ?, ?, @rl_node, ?, ?, @rl_seq)').join(', ')}
ON DUPLICATE KEY UPDATE hits = IF(seq < VALUES(seq), VALUES(hits), hits), seq = GREATEST(seq, VALUES(seq))`)
    // (a batch of blocks alone reads nothing)
    if (reads > 0)
      parts.push(`SELECT window_size_ms, window_start_ms, key_hash, SUM(hits) AS total, SUM(IF(node_hash = @rl_node, hits, 0)) AS own,
  SUM(IF(node_hash = @rl_node, 0, hits)) AS others
FROM ${this.table} WHERE ns_hash = @rl_ns AND (window_size_ms, window_start_ms, key_hash) IN (${Array.from({ length: reads }, () => '(?, ?, ?)').join(', ')})
GROUP BY window_size_ms, window_start_ms, key_hash`)
    if (blocks.reads > 0)
      parts.push(`SELECT key_hash, until_ms FROM ${this.blocks} WHERE ns_hash = @rl_ns AND until_ms > ?
  AND key_hash IN (${Array.from({ length: blocks.reads }, () => '?').join(', ')})`)
    return parts.join(';\n')
  }

  /**
   * A reset: each listed window's offset row becomes minus the sum of its node rows, so its
   * total reads zero and later pushes count from there. Windows with no rows are left alone.
   */
  reset(windows: number): string {
    return `INSERT INTO ${this.table} (ns_hash, window_size_ms, window_start_ms, key_hash, node_hash, key_bytes, hits, seq)
SELECT ?, c.window_size_ms, c.window_start_ms, ?, ?, ?, -SUM(c.hits), 0 FROM ${this.table} AS c
WHERE c.ns_hash = ? AND c.key_hash = ? AND c.node_hash <> ?
  AND (c.window_size_ms, c.window_start_ms) IN (${Array.from({ length: windows }, () => '(?, ?)').join(', ')})
GROUP BY c.window_size_ms, c.window_start_ms
ON DUPLICATE KEY UPDATE hits = VALUES(hits)`
  }
}

/** How many block statements' parameters a push carries. */
interface BlockStatements {
  readonly lifts: number
  readonly sets: number
  readonly reads: number
}

const NO_BLOCKS: BlockStatements = { lifts: 0, sets: 0, reads: 0 }

// A batch's block writes, one per key (foldBlockWrites), in key-hash order: the keys whose
// block is lifted first, and the ends set after.
function blockWrites(blocks: readonly BlockWrite[]): { lifts: Buffer[]; sets: Array<{ hash: Buffer; untilMs: number }> } {
  const folded = foldBlockWrites(blocks)
    .map((b) => ({ ...b, hash: sha256(utf16(b.key)) }))
    .sort((a, b) => Buffer.compare(a.hash, b.hash))
  return {
    lifts: folded.filter((b) => b.lift).map((b) => b.hash),
    sets: folded.filter((b) => b.untilMs > 0).map((b) => ({ hash: b.hash, untilMs: b.untilMs })),
  }
}

/** A key-window to write, with its key's bytes and hash. */
interface Write {
  readonly push: WindowPush
  readonly bytes: Buffer
  readonly hash: Buffer
}

/**
 * A central store in MySQL 8 or MariaDB 10.6+. Each process owns its rows: one per key-window
 * and node, holding its cumulative count and the `seq` of the batch that wrote it, so a retried
 * or reordered push changes nothing. A push (every sync, every synchronous hit) is one query.
 * Create the table with {@link MysqlStrategy.migrate} or the DDL of {@link MysqlStrategy.ddl};
 * the constructor opens nothing.
 *
 * @example
 * const store = new MysqlStrategy({ uri: 'mysql://app:secret@127.0.0.1:3306/app' })
 * await store.migrate()
 * rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0.1, strategy: store })
 */
export class MysqlStrategy implements Strategy {
  readonly name = 'mysql'
  /** Counts are DECIMAL(65,30): decimals are held and summed exactly, to 30 places. */
  readonly supportsDecimals = true
  /** Blocks are rows of `<table>_blocks`, written and read by the push's one query. */
  readonly supportsBlocks = true
  /** Queries sent, by kind (each is one round trip), for tests and benchmarks. */
  readonly calls = { push: 0, page: 0, window: 0, reset: 0, purge: 0 }
  readonly table: string
  private readonly pool: Pool
  private readonly ownPool: boolean
  private readonly sql: Statements
  private readonly timeoutMs: number
  private readonly graceMs: number
  private readonly pageSize: number
  private readonly purgeBatchSize: number
  private readonly resetHash = sha256(utf16(RESET_NODE))
  // namespaces and node ids are few: hash each once
  private readonly hashes = new Map<string, Buffer>()
  private readonly guarded = new WeakSet<object>()
  private closed = false

  constructor(options: MysqlStrategyOptions) {
    if (typeof options !== 'object' || options === null) throw new ConfigError('INVALID_OPTION', 'mysql: options must be an object')
    const { pool, uri } = options
    if ((pool === undefined) === (uri === undefined))
      throw new ConfigError('INVALID_OPTION', 'mysql: give exactly one of pool (a mysql2/promise pool) or uri')
    const table = options.table ?? 'ratelimiting_counters'
    if (typeof table !== 'string' || !IDENTIFIER.test(table))
      throw new ConfigError(
        'INVALID_OPTION',
        `mysql: table must be a plain identifier ([A-Za-z_][A-Za-z0-9_]*, 64 max), got ${JSON.stringify(table)}`,
      )
    this.timeoutMs = positiveInteger('timeoutMs', options.timeoutMs, 1000)
    this.pageSize = positiveInteger('pageSize', options.pageSize, 1000)
    this.purgeBatchSize = positiveInteger('purgeBatchSize', options.purgeBatchSize, 1000)
    const graceMs = options.graceMs ?? 10_000
    if (typeof graceMs !== 'number' || !Number.isFinite(graceMs) || graceMs < 0)
      throw new ConfigError('INVALID_OPTION', `mysql: graceMs must be a finite number >= 0, got ${String(options.graceMs)}`)
    this.graceMs = graceMs
    if (pool !== undefined) {
      if (typeof pool !== 'object' || pool === null || typeof pool.getConnection !== 'function')
        throw new ConfigError('INVALID_OPTION', 'mysql: pool must be a mysql2/promise pool (an object with getConnection())')
      // the push is three statements in one query: the pool must allow it
      const config = (pool as { pool?: { config?: { connectionConfig?: { multipleStatements?: unknown } } } }).pool?.config
      if (config?.connectionConfig?.multipleStatements !== true)
        throw new ConfigError('INVALID_OPTION', 'mysql: the pool must be created with multipleStatements: true (a push is one query)')
      this.pool = pool
      this.ownPool = false
    } else {
      if (typeof uri !== 'string' || uri.length === 0) throw new ConfigError('INVALID_OPTION', 'mysql: uri must be a non-empty string')
      // mysql2 connects lazily: creating the pool opens nothing
      this.pool = mysql.createPool({
        uri,
        connectionLimit: positiveInteger('poolSize', options.poolSize, 10),
        multipleStatements: true,
        connectTimeout: this.timeoutMs,
        enableKeepAlive: true,
      })
      this.ownPool = true
    }
    this.table = table
    this.sql = new Statements(table)
  }

  /** The DDL `migrate()` runs, for those who apply migrations with their own tool. */
  ddl(): string {
    return this.sql.ddl
  }

  /**
   * Creates the table if it does not exist. Idempotent, and safe from several processes at once:
   * the server serializes CREATE TABLE on a metadata lock, and IF NOT EXISTS makes the later
   * ones no-ops.
   */
  async migrate(): Promise<void> {
    await this.query('migrate', this.sql.ddl, [])
  }

  async pushDiffs(batch: DiffBatch): Promise<CounterRow[]> {
    if (batch.nodeId === RESET_NODE)
      throw new StoreError('STORE_ERROR', this.name, `node id "${RESET_NODE}" is reserved for reset offsets; use another nodeId`)
    const blocks = blockWrites(batch.blocks ?? [])
    if (batch.windows.length === 0 && batch.refresh.length === 0 && blocks.lifts.length === 0 && blocks.sets.length === 0) return []
    // One row per key-window (the last write wins, as the engine never sends two), in primary
    // key order: two pushes of one node then lock shared rows in the same order.
    const byWindow = new Map<string, Write>()
    for (const push of batch.windows) {
      const bytes = utf16(push.key)
      const hash = sha256(bytes)
      byWindow.set(windowId(push.windowSizeMs, push.windowStartMs, hash), { push, bytes, hash })
    }
    const writes = [...byWindow.values()].sort(
      (a, b) => a.push.windowSizeMs - b.push.windowSizeMs || a.push.windowStartMs - b.push.windowStartMs || Buffer.compare(a.hash, b.hash),
    )
    const values: unknown[] = [this.hash(batch.namespace), this.hash(batch.nodeId), batch.seq]
    for (const w of writes) values.push(w.push.windowSizeMs, w.push.windowStartMs, w.hash, w.bytes, decimalText(w.push.key, w.push.count))
    // the read-back: what was written, then the refreshed key-windows
    const reads: { ref: WindowRef; hash: Buffer }[] = writes.map((w) => ({ ref: w.push, hash: w.hash }))
    for (const ref of batch.refresh) reads.push({ ref, hash: sha256(utf16(ref.key)) })
    // block parameters go where their statements are: the writes before the windows', the read after
    const blockValues: unknown[] = [...blocks.lifts]
    for (const b of blocks.sets) blockValues.push(b.hash, b.untilMs)
    values.splice(3, 0, ...blockValues)
    for (const r of reads) values.push(r.ref.windowSizeMs, r.ref.windowStartMs, r.hash)
    const blockReads = batch.readBlocks === true ? [...new Set(reads.map((r) => r.hash.toString('hex')))] : []
    if (blockReads.length > 0) values.push(batch.nowMs, ...blockReads.map((h) => Buffer.from(h, 'hex')))
    const shape = { lifts: blocks.lifts.length, sets: blocks.sets.length, reads: blockReads.length }
    this.calls.push++
    const results = (await this.query(
      'pushDiffs',
      this.sql.push(writes.length, reads.length, shape),
      values,
      'the write may have landed',
    )) as unknown[]
    if (reads.length === 0) return []
    const ends = new Map<string, number>()
    if (blockReads.length > 0)
      for (const row of results[results.length - 1] as Array<Record<string, unknown>>)
        ends.set((row.key_hash as Buffer).toString('hex'), num(row.until_ms))
    // the rows of the counts' statement (the last one, or the one before the blocks' read)
    const selected = results[results.length - (blockReads.length > 0 ? 2 : 1)] as Array<Record<string, unknown>>
    const stored = new Map<string, Record<string, unknown>>()
    for (const row of selected) stored.set(windowId(row.window_size_ms, row.window_start_ms, row.key_hash as Buffer), row)
    return reads.map(({ ref, hash }, i) => {
      const row = stored.get(windowId(ref.windowSizeMs, ref.windowStartMs, hash))
      const at = { key: ref.key, windowStartMs: ref.windowStartMs, windowSizeMs: ref.windowSizeMs }
      // a write is answered in its place in the node's sequence: its own count, the others' as
      // stored (a newer write of this node, committed first on another connection, kept its own)
      const written = i < writes.length ? (writes[i] as Write).push.count : undefined
      const answer =
        written !== undefined
          ? { ...at, count: num(row?.others) + written, own: written }
          : { ...at, count: num(row?.total), own: num(row?.own) }
      return batch.readBlocks === true ? { ...answer, blockedUntilMs: ends.get(hash.toString('hex')) ?? 0 } : answer
    })
  }

  async *getCounters(namespace: string, windowSizesMs: readonly number[], nowMs: number, nodeId = ''): AsyncIterable<CounterRow> {
    const ns = this.hash(namespace)
    const node = this.hash(nodeId)
    for (const { windowSizeMs, windowStartMs } of currentAndPrevious(nowMs, windowSizesMs)) {
      // keyset pagination: each page is a range of the primary key, however deep
      let after: Buffer | undefined
      for (;;) {
        this.calls.page++
        const page = (await (after === undefined
          ? this.query('getCounters', this.sql.firstPage, [node, ns, windowSizeMs, windowStartMs, this.pageSize])
          : this.query('getCounters', this.sql.nextPage, [node, ns, windowSizeMs, windowStartMs, after, this.pageSize]))) as Array<
          Record<string, unknown>
        >
        for (const row of page) {
          yield {
            key: (row.key_bytes as Buffer).toString('utf16le'),
            windowStartMs,
            windowSizeMs,
            count: num(row.total),
            own: num(row.own),
          }
        }
        if (page.length < this.pageSize) break
        after = (page[page.length - 1] as Record<string, unknown>).key_hash as Buffer
      }
    }
  }

  async getWindow(key: string, namespace: string, windowStartMs: number, windowSizeMs: number, nodeId = ''): Promise<CounterRow> {
    this.calls.window++
    const rows = (await this.query('getWindow', this.sql.window, [
      this.hash(nodeId),
      this.hash(namespace),
      windowSizeMs,
      windowStartMs,
      sha256(utf16(key)),
    ])) as Array<Record<string, unknown>>
    return { key, windowStartMs, windowSizeMs, count: num(rows[0]?.total), own: num(rows[0]?.own) }
  }

  async resetKey(namespace: string, key: string, windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    const spans = currentAndPrevious(nowMs, windowSizesMs)
    if (spans.length === 0) return
    const ns = this.hash(namespace)
    const bytes = utf16(key)
    const hash = sha256(bytes)
    const values: unknown[] = [ns, hash, this.resetHash, bytes, ns, hash, this.resetHash]
    for (const s of spans) values.push(s.windowSizeMs, s.windowStartMs)
    this.calls.reset++
    await this.query('resetKey', this.sql.reset(spans.length), values, 'the reset may have landed')
  }

  /**
   * Deletes the namespace's windows of `windowSizesMs` that no rate can read at `nowMs` any
   * more (those past `windowExpiresAtMs` with `graceMs`), in statements of at most
   * `purgeBatchSize` rows. Nothing expires by itself: call it now and then from one process.
   */
  async purge(namespace: string, windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    const ns = this.hash(namespace)
    for (const size of windowSizesMs) {
      // expired when start + 2 * size + grace <= now
      const cutoff = nowMs - this.graceMs - 2 * size
      for (;;) {
        this.calls.purge++
        const result = (await this.query('purge', this.sql.purge, [ns, size, cutoff, this.purgeBatchSize])) as { affectedRows?: number }
        if ((result.affectedRows ?? 0) < this.purgeBatchSize) break
      }
    }
    // ended blocks read as none already; purged a grace period after their end
    for (;;) {
      this.calls.purge++
      const result = (await this.query('purge', this.sql.purgeBlocks, [ns, nowMs - this.graceMs, this.purgeBatchSize])) as {
        affectedRows?: number
      }
      if ((result.affectedRows ?? 0) < this.purgeBatchSize) break
    }
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.ownPool) await this.pool.end()
  }

  private hash(text: string): Buffer {
    let hash = this.hashes.get(text)
    if (hash === undefined) {
      hash = sha256(utf16(text))
      if (this.hashes.size < 1024) this.hashes.set(text, hash)
    }
    return hash
  }

  /** Runs one query on a connection of its own, both bounded by `timeoutMs`; resolves with its results. */
  private async query(what: string, sql: string, values: unknown[], detail?: string): Promise<unknown> {
    const conn = await this.checkout(what)
    let broken = false
    try {
      const running = conn.query(sql, values).then(
        ([results]) => results,
        (err: unknown) => {
          throw this.storeError(what, err)
        },
      )
      return await withTimeout(running, this.timeoutMs, this.name, what, detail === undefined ? undefined : { detail })
    } catch (err) {
      // a timed-out or dropped connection must not go back to the pool; one that answered a
      // SQL error is fine
      broken = !(err instanceof StoreError && err.code === 'STORE_ERROR')
      throw err
    } finally {
      if (broken) conn.destroy()
      else conn.release()
    }
  }

  private checkout(what: string): Promise<PoolConnection> {
    if (this.closed) return Promise.reject(new StoreError('STORE_UNAVAILABLE', this.name, `${what}: strategy is closed`))
    const connecting = this.pool.getConnection().then(
      (conn) => {
        this.guard(conn)
        return conn
      },
      (err: unknown) => {
        throw this.storeError(what, err)
      },
    )
    // a connection that comes after the deadline goes straight back to the pool
    return withTimeout(connecting, this.timeoutMs, this.name, `${what}: connection checkout`, { onLate: (conn) => conn.release() })
  }

  // mysql2 emits 'error' on a connection that dies between queries, and the pool listens only
  // once: a listener of our own keeps that from crashing the process. A query in flight gets the
  // failure itself.
  private guard(conn: PoolConnection): void {
    const core = conn.connection as unknown as { on?: (event: string, listener: () => void) => unknown }
    if (this.guarded.has(core) || typeof core.on !== 'function') return
    this.guarded.add(core)
    core.on('error', () => undefined)
  }

  private storeError(what: string, err: unknown): StoreError {
    if (err instanceof StoreError) return err
    const e = err as { code?: unknown; errno?: unknown; fatal?: unknown; message?: unknown } | undefined
    const message = typeof e?.message === 'string' ? e.message : String(err)
    if (e?.errno === ER_NO_SUCH_TABLE)
      return new StoreError('STORE_ERROR', this.name, `${what}: table \`${this.table}\` does not exist; run migrate() first (${message})`, {
        cause: err,
      })
    const unavailable = e?.fatal === true || (typeof e?.code === 'string' && CONNECTION_CODES.has(e.code))
    return new StoreError(unavailable ? 'STORE_UNAVAILABLE' : 'STORE_ERROR', this.name, `${what}: ${message}`, { cause: err })
  }
}

/**
 * The example end to end: two "processes" (two RateLimiting instances) share one limit of 10
 * hits a minute through a table of their own, first syncing every 50 ms, then deciding every
 * hit in the store (syncRate 0); the table is dropped at the end. Returns what each saw.
 */
export async function runMysqlExample(
  options: { uri?: string; table?: string } = {},
): Promise<{ periodic: { allowed: number; views: number[] }; synchronous: { allowed: number; denied: number; views: number[] } }> {
  const uri = options.uri ?? process.env.RL_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test'
  const table = options.table ?? `ratelimiting_example_${process.pid}`
  const store = new MysqlStrategy({ uri, table })
  const fleet = ['web-1', 'web-2'].map((name) => RateLimiting.newInstance(name))
  try {
    await store.migrate()
    for (const rl of fleet) {
      rl.new({ namespace: 'periodic', windowSizes: [60], syncRate: 0.05, strategy: store })
      rl.new({ namespace: 'synchronous', windowSizes: [60], syncRate: 0, strategy: store })
    }
    // periodic: each process decides locally and syncs its counts every 50 ms
    const periodic = fleet.map((rl) => rl.limiter({ namespace: 'periodic', limits: [{ limit: 10, window: 60 }] }))
    let allowed = 0
    for (let i = 0; i < 8; i++) if ((periodic[i % 2]?.hit('client-42') as Decision).allowed) allowed++
    // two rounds: the first pushes every process's hits, the second reads them all back
    for (let round = 0; round < 2; round++) for (const rl of fleet) await rl.sync('periodic')
    const periodicViews = fleet.map((rl) => rl.slidingWindow('client-42', 60, undefined, 'periodic') as number)
    // synchronous: every hit is one query, and the store's reply decides
    const synchronous = fleet.map((rl) => rl.limiter({ namespace: 'synchronous', limits: [{ limit: 10, window: 60 }] }))
    let syncAllowed = 0
    let syncDenied = 0
    for (let i = 0; i < 14; i++) {
      const decision = await synchronous[i % 2]?.hit('client-42')
      if (decision?.allowed === true) syncAllowed++
      else syncDenied++
    }
    const syncViews = await Promise.all(fleet.map((rl) => rl.slidingWindow('client-42', 60, undefined, 'synchronous') as Promise<number>))
    return { periodic: { allowed, views: periodicViews }, synchronous: { allowed: syncAllowed, denied: syncDenied, views: syncViews } }
  } finally {
    await Promise.all(fleet.map((rl) => rl.close()))
    const admin = await mysql.createConnection(uri)
    await admin.query(`DROP TABLE IF EXISTS \`${table}\``).finally(() => admin.end())
    await store.close()
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { periodic, synchronous } = await runMysqlExample()
  console.log(`periodic: ${periodic.allowed} of 8 hits allowed; both processes now count ${periodic.views.join(' and ')}`)
  console.log(`synchronous: ${synchronous.allowed} allowed, ${synchronous.denied} denied; both count ${synchronous.views.join(' and ')}`)
}
