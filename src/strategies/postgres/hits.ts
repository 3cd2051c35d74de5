/**
 * Synchronous hits on PostgreSQL (a push of one window written, at most one read, no block
 * written): each commit waits for its WAL flush, a large share of a hit's time
 * (docs/BENCHMARKS-postgres.md). A hit goes out alone, on its own statement, while the
 * strategy has fewer statements running than its pool has connections; past that, hits wait
 * here instead of in the pool's queue, and the next connection that frees takes all of them
 * (up to {@link MAX_HITS}) in one statement: one commit for many hits, and no added wait for a
 * hit that finds a connection free.
 */
import type { StoreError } from '../../core/errors.js'
import type { CounterRow, DiffBatch, WindowPush } from '../../core/strategy.js'
import { deadline, type Deadline } from '../../core/timeout.js'
import { hitRows } from './blocks.js'
import { encodeKey, num } from './options.js'
import type { Sessions, Statement } from './sessions.js'
import { commitItem, type SynchronousCommit, type TableNames } from './sql.js'

/** Hits one statement carries at most (subscripting a text array is linear per element). */
export const MAX_HITS = 128

/**
 * Many synchronous hits in one statement, each answered as {@link pushOneSql} answers one: the
 * written window's total is the other nodes' sum in the snapshot plus the count the hit pushed,
 * the read window's total and the hit's node's share as in the snapshot.
 *
 * $1-$7 the rows written, one per (namespace, node, window, key) in lock order ({@link hitsParams}):
 * namespaces, node ids, seqs, keys, sizes, starts, counts (text). $8-$12 the hits, in order: the
 * index (from 1) of the row each wrote, the count it pushed, then the key, size and start of the
 * window it reads (NULL: none). With `blocks`, every answer also carries the written key's block
 * end (`blocked`) and the read key's (`read_blocked`), NULL for none.
 *
 * The arrays are read by subscript: `generate_subscripts` has a fixed row estimate, so the cached
 * generic plan is used, where `unnest` of known arrays is planned again on every call.
 * `commit` as in {@link pushOneSql}.
 */
export function hitsSql(names: TableNames, blocks: boolean, commit?: SynchronousCommit): string {
  const T = names.qualified
  const at = (param: number, type: string, i = 'w') => `($${param}::${type}[])[${i}]`
  const blocked = blocks
    ? `,
  (SELECT b.until_ms FROM ${names.blocks} b WHERE b.namespace = h.namespace AND b.key = h.key) AS blocked,
  (SELECT b.until_ms FROM ${names.blocks} b WHERE b.namespace = h.namespace AND b.key = h.read_key) AS read_blocked`
    : ''
  return `WITH up AS (
  INSERT INTO ${T} AS t (namespace, window_size_ms, window_start_ms, key, node_id, count, seq)
  SELECT ${at(1, 'text', 'i')}, ${at(5, 'bigint', 'i')}, ${at(6, 'bigint', 'i')}, ${at(4, 'text', 'i')}, ${at(2, 'text', 'i')}, ${at(7, 'numeric', 'i')}, ${at(3, 'bigint', 'i')}
  FROM generate_subscripts($1::text[], 1) AS i ORDER BY i
  ON CONFLICT (namespace, window_size_ms, window_start_ms, key, node_id)
  DO UPDATE SET count = EXCLUDED.count, seq = EXCLUDED.seq WHERE t.seq < EXCLUDED.seq
), h AS (
  SELECT j, ${at(1, 'text')} AS namespace, ${at(2, 'text')} AS node_id, ${at(4, 'text')} AS key,
    ${at(5, 'bigint')} AS window_size_ms, ${at(6, 'bigint')} AS window_start_ms, ($9::numeric[])[j] AS pushed,
    ($10::text[])[j] AS read_key, ($11::bigint[])[j] AS read_size, ($12::bigint[])[j] AS read_start
  FROM generate_subscripts($8::int[], 1) AS j, LATERAL (SELECT ($8::int[])[j] AS w) AS x
)
SELECT (COALESCE(o.others, 0) + h.pushed)::text AS count, r.count AS read_count, r.own AS read_own${blocked}
FROM h
CROSS JOIN LATERAL (
  SELECT sum(t.count) AS others FROM ${T} t
  WHERE t.namespace = h.namespace AND t.window_size_ms = h.window_size_ms AND t.window_start_ms = h.window_start_ms
    AND t.key = h.key AND t.node_id <> h.node_id
) o
CROSS JOIN LATERAL (
  SELECT COALESCE(sum(t.count), 0)::text AS count, COALESCE(sum(t.count) FILTER (WHERE t.node_id = h.node_id), 0)::text AS own
  FROM ${T} t
  WHERE t.namespace = h.namespace AND t.window_size_ms = h.read_size AND t.window_start_ms = h.read_start AND t.key = h.read_key
) r${commitItem(commit)}
ORDER BY h.j`
}

/** One queued hit: its batch, and how to answer it. */
interface Hit {
  readonly batch: DiffBatch
  readonly readBlocks: boolean
  readonly resolve: (rows: CounterRow[]) => void
  readonly reject: (err: unknown) => void
  /** The wait for a connection; undefined once the hit is sent or failed. */
  waiting: Deadline | undefined
}

/**
 * The parameters $1-$12 of {@link hitsSql}. A row written by several hits (one key hit twice
 * by one process) is written once, with the newest seq's count: one statement cannot upsert a
 * row twice. Rows go in one order (namespace, size, start, key, node), so that two statements
 * of this process that lock the same rows lock them in the same order and never deadlock.
 */
export function hitsParams(batches: readonly DiffBatch[]): unknown[] {
  const rows = new Map<string, { batch: DiffBatch; w: WindowPush; key: string; index: number }>()
  const rowOf: string[] = []
  for (const batch of batches) {
    const w = batch.windows[0] as WindowPush
    const key = encodeKey(w.key)
    const id = `${batch.namespace}\u0000${w.windowSizeMs}\u0000${w.windowStartMs}\u0000${key}\u0000${batch.nodeId}`
    const seen = rows.get(id)
    if (seen === undefined || seen.batch.seq < batch.seq) rows.set(id, { batch, w, key, index: 0 })
    rowOf.push(id)
  }
  const ids = [...rows.keys()].sort()
  const namespaces: string[] = []
  const nodes: string[] = []
  const seqs: number[] = []
  const keys: string[] = []
  const sizes: number[] = []
  const starts: number[] = []
  const counts: string[] = []
  for (const [i, id] of ids.entries()) {
    const row = rows.get(id) as { batch: DiffBatch; w: WindowPush; key: string; index: number }
    row.index = i + 1
    namespaces.push(row.batch.namespace)
    nodes.push(row.batch.nodeId)
    seqs.push(row.batch.seq)
    keys.push(row.key)
    sizes.push(row.w.windowSizeMs)
    starts.push(row.w.windowStartMs)
    counts.push(String(row.w.count))
  }
  const index: number[] = []
  const pushed: string[] = []
  const readKeys: Array<string | null> = []
  const readSizes: Array<number | null> = []
  const readStarts: Array<number | null> = []
  for (const [i, batch] of batches.entries()) {
    const r = batch.refresh[0]
    index.push((rows.get(rowOf[i] as string) as { index: number }).index)
    pushed.push(String((batch.windows[0] as WindowPush).count))
    readKeys.push(r === undefined ? null : encodeKey(r.key))
    readSizes.push(r?.windowSizeMs ?? null)
    readStarts.push(r?.windowStartMs ?? null)
  }
  return [namespaces, nodes, seqs, keys, sizes, starts, counts, index, pushed, readKeys, readSizes, readStarts]
}

/**
 * The statements a {@link HitSender} sends: one hit, many hits; each without and with blocks read.
 * `oneWrite` is `one` for a hit that reads no other window.
 */
export interface HitStatements {
  readonly one: Statement
  readonly oneWrite: Statement
  readonly oneBlocks: Statement
  readonly many: Statement
  readonly manyBlocks: Statement
}

/** Sends synchronous hits: alone while connections are free, together past that (see the top). */
export class HitSender {
  private readonly sessions: Sessions
  private readonly statements: HitStatements
  private readonly maxRunning: number
  private readonly strategy: string
  private readonly timeoutMs: number
  private readonly counted: () => void
  private queue: Hit[] = []
  private running = 0

  /**
   * `maxRunning`: statements of hits sent at once (the pool's connections); `counted` is called
   * once per statement sent; `timeoutMs` bounds a hit's wait for a connection.
   */
  constructor(sessions: Sessions, statements: HitStatements, maxRunning: number, strategy: string, timeoutMs: number, counted: () => void) {
    this.sessions = sessions
    this.statements = statements
    this.maxRunning = maxRunning
    this.strategy = strategy
    this.timeoutMs = timeoutMs
    this.counted = counted
  }

  /** Sends one hit's batch (one window written, at most one read, no blocks) and answers its rows. */
  send(batch: DiffBatch, readBlocks: boolean): Promise<CounterRow[]> {
    if (this.running < this.maxRunning && this.queue.length === 0) {
      this.running++
      const sent = this.one(batch, readBlocks)
      sent.then(this.done, this.done)
      return sent
    }
    return new Promise<CounterRow[]>((resolve, reject) => {
      const hit: Hit = { batch, readBlocks, resolve, reject, waiting: undefined }
      hit.waiting = deadline(
        this.timeoutMs,
        this.strategy,
        'pushDiffs: connection checkout',
        (err: StoreError) => {
          // not sent: drop it from the queue, so that it never lands after its failure
          hit.waiting = undefined
          this.queue = this.queue.filter((h) => h !== hit)
          reject(err)
        },
        'nothing was written',
      )
      this.queue.push(hit)
    })
  }

  // A statement ended: the queued hits take the freed connection.
  private readonly done = (): void => {
    this.running--
    while (this.running < this.maxRunning && this.queue.length > 0) {
      const hits = this.queue.length <= MAX_HITS ? this.queue : this.queue.slice(0, MAX_HITS)
      this.queue = this.queue.length <= MAX_HITS ? [] : this.queue.slice(MAX_HITS)
      for (const hit of hits) {
        hit.waiting?.settle()
        hit.waiting = undefined
      }
      // a namespace that reads blocks needs the blocks table; others go without (a table
      // migrated before blocks has none)
      const withBlocks = hits.filter((h) => h.readBlocks)
      const plain = withBlocks.length === 0 ? hits : hits.filter((h) => !h.readBlocks)
      for (const group of [plain, withBlocks]) {
        if (group.length === 0) continue
        this.running++
        this.many(group).then(this.done, this.done)
      }
    }
  }

  // One hit alone: the statement with scalar parameters.
  private async one(batch: DiffBatch, readBlocks: boolean): Promise<CounterRow[]> {
    const w = batch.windows[0] as WindowPush
    const r = batch.refresh[0]
    this.counted()
    const written = [batch.namespace, batch.nodeId, batch.seq, encodeKey(w.key), w.windowSizeMs, w.windowStartMs, String(w.count)]
    const result =
      r === undefined && !readBlocks
        ? await this.sessions.query('pushDiffs', this.statements.oneWrite, written)
        : await this.sessions.query('pushDiffs', readBlocks ? this.statements.oneBlocks : this.statements.one, [
            ...written,
            r === undefined ? null : encodeKey(r.key),
            r?.windowSizeMs ?? null,
            r?.windowStartMs ?? null,
          ])
    return answer(batch, readBlocks, (result.rows[0] ?? {}) as Record<string, unknown>)
  }

  // Several hits in one statement; each is answered (or fails) with it.
  private async many(hits: readonly Hit[]): Promise<void> {
    if (hits.length === 1) {
      const hit = hits[0] as Hit
      await this.one(hit.batch, hit.readBlocks).then(hit.resolve, hit.reject)
      return
    }
    const blocks = (hits[0] as Hit).readBlocks
    this.counted()
    let rows: Array<Record<string, unknown>>
    try {
      const params = hitsParams(hits.map((h) => h.batch))
      rows = (await this.sessions.query('pushDiffs', blocks ? this.statements.manyBlocks : this.statements.many, params)).rows
    } catch (err) {
      for (const hit of hits) hit.reject(err)
      return
    }
    for (const [i, hit] of hits.entries()) hit.resolve(answer(hit.batch, blocks, rows[i] ?? {}))
  }
}

// The rows of one hit from its answer: the written window's (own: the count pushed) and the read one's.
function answer(batch: DiffBatch, readBlocks: boolean, row: Record<string, unknown>): CounterRow[] {
  const w = batch.windows[0] as WindowPush
  const r = batch.refresh[0]
  const written: CounterRow = {
    key: w.key,
    windowStartMs: w.windowStartMs,
    windowSizeMs: w.windowSizeMs,
    count: num(row.count),
    own: w.count,
  }
  if (readBlocks) return hitRows(written, r, row, batch.nowMs)
  if (r === undefined) return [written]
  return [
    written,
    { key: r.key, windowStartMs: r.windowStartMs, windowSizeMs: r.windowSizeMs, count: num(row.read_count), own: num(row.read_own) },
  ]
}
