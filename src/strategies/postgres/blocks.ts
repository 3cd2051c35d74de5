/**
 * Blocks in PostgreSQL (`DiffBatch.blocks`, `readBlocks`): the statements that write and read
 * them within a push, the purge of ended ones, and how a batch's block writes become parameters.
 * The blocks table is made by the DDL in sql.ts. A push without blocks and without `readBlocks`
 * never comes here: it sends the very statements it always sent.
 */
import { type BlockWrite, type CounterRow, foldBlockWrites, type WindowRef } from '../../core/strategy.js'
import { encodeKey, num } from './options.js'
import { type PushExtension, pushOneSql, pushSql, type SynchronousCommit, type TableNames } from './sql.js'

/**
 * A push that writes blocks, and answers every row with its key's block end (the column
 * `blocked_until_ms`, NULL for none), in one statement: CTEs ahead of the push's own upsert
 * the blocks and delete the lifted ones, then the push runs as without blocks.
 *
 * $1-$10 as in {@link pushSql}; $11 block keys, $12 their ends (0: lift), $13 whether the batch
 * lifted the key before setting it (the end then replaces the stored one instead of keeping the
 * later of the two), one entry per key ({@link blockParams}).
 *
 * - Sets are an upsert keeping `GREATEST` of the stored and the written end: two processes
 *   blocking at once never shorten each other's block, and an ended block is overwritten in
 *   place (a write deletes the key's ended block). Lifts are a DELETE.
 * - All CTEs share the statement's snapshot, so the rows cannot read the blocks just written
 *   from the table: a key written by the batch reads its end from the upsert's RETURNING (the
 *   end as stored, a concurrent writer's included) or 0 when lifted; other keys read the table.
 * - Keys are upserted in key order: two batches blocking the same keys lock them in the same
 *   order and never deadlock. (A batch lifting a key that another blocks at the same moment,
 *   while blocking one the other lifts, could; PostgreSQL then fails one of the two pushes.)
 * - The arrays go through `unnest` (re-planned on each call): blocks are written only when a
 *   key is blocked or lifted, so the planning time is not worth a cached plan.
 */
export function pushBlocksSql(names: TableNames): string {
  const B = names.blocks
  const extra: PushExtension = {
    ctes: `bw AS (
  SELECT * FROM unnest($11::text[], $12::bigint[], $13::boolean[]) AS b(key, until_ms, replace)
), bset AS (
  INSERT INTO ${B} AS t (namespace, key, until_ms)
  SELECT $1, bw.key, bw.until_ms FROM bw WHERE bw.until_ms > 0 ORDER BY bw.key
  ON CONFLICT (namespace, key) DO UPDATE SET until_ms = CASE
    WHEN EXISTS (SELECT FROM bw WHERE bw.key = EXCLUDED.key AND bw.replace) THEN EXCLUDED.until_ms
    ELSE GREATEST(t.until_ms, EXCLUDED.until_ms) END
  RETURNING t.key, t.until_ms
), blift AS (
  DELETE FROM ${B} t USING bw WHERE bw.until_ms = 0 AND t.namespace = $1 AND t.key = bw.key
)`,
    columns: `CASE WHEN bw.key IS NULL THEN (SELECT bl.until_ms FROM ${B} bl WHERE bl.namespace = $1 AND bl.key = r.key)
    ELSE COALESCE(bset.until_ms, 0) END AS blocked_until_ms`,
    joins: `
LEFT JOIN bw ON bw.key = r.key
LEFT JOIN bset ON bset.key = r.key`,
  }
  return pushSql(names, false, extra)
}

/**
 * A push with `readBlocks` that writes no block (the usual sync of a namespace that keeps
 * blocks): the push as without blocks, and one primary-key lookup in the blocks table per row
 * (column `blocked_until_ms`, NULL for none). `small` as in {@link pushSql}.
 */
export function pushReadSql(names: TableNames, small: boolean): string {
  return pushSql(names, small, {
    ctes: '',
    columns: `(SELECT bl.until_ms FROM ${names.blocks} bl WHERE bl.namespace = $1 AND bl.key = r.key) AS blocked_until_ms`,
    joins: '',
  })
}

/**
 * A synchronous hit with `readBlocks` that writes no block: {@link pushOneSql} and one index
 * scan of the blocks table for the written key ($4, column `blocked`) and the read one ($8,
 * `read_blocked`); NULL for none. `commit` as in {@link pushOneSql}.
 */
export function hitReadSql(names: TableNames, commit?: SynchronousCommit): string {
  return pushOneSql(
    names,
    {
      ctes: '',
      columns: 'b.blocked, b.read_blocked',
      joins: `, (
  SELECT max(until_ms) FILTER (WHERE key = $4) AS blocked, max(until_ms) FILTER (WHERE key = $8) AS read_blocked
  FROM ${names.blocks} WHERE namespace = $1 AND key IN ($4, $8)
) b`,
    },
    commit,
  )
}

/**
 * Deletes at most $3 blocks of namespace $1 that ended by $2 (epoch ms), found through the
 * (namespace, until_ms) index. The outer condition on `until_ms` is checked again on a row
 * that a concurrent write extended meanwhile, which is then kept.
 */
export function purgeBlocksSql(names: TableNames): string {
  return `DELETE FROM ${names.blocks}
WHERE until_ms <= $2 AND ctid = ANY(ARRAY(
  SELECT ctid FROM ${names.blocks}
  WHERE namespace = $1 AND until_ms <= $2
  LIMIT $3
))`
}

/** A batch's block writes as the parameters $11-$13 of {@link pushBlocksSql}. */
export interface BlockParams {
  readonly keys: string[]
  readonly untils: number[]
  readonly replace: boolean[]
}

/**
 * A batch's block writes, one per key ({@link foldBlockWrites}: one statement cannot upsert a row
 * twice): a lift deletes the key's block, a set after a lift replaces the stored end, sets alone
 * keep the latest end.
 */
export function blockParams(blocks: readonly BlockWrite[]): BlockParams {
  const keys: string[] = []
  const untils: number[] = []
  const replace: boolean[] = []
  for (const b of foldBlockWrites(blocks)) {
    keys.push(encodeKey(b.key))
    untils.push(b.untilMs)
    replace.push(b.lift)
  }
  return { keys, untils, replace }
}

/** A stored block end (bigint: text from the driver, or NULL) as `blockedUntilMs` at `nowMs`. */
export function blockedUntil(value: unknown, nowMs: number): number {
  const until = typeof value === 'string' || typeof value === 'number' ? Number(value) : 0
  return until > nowMs ? until : 0
}

/**
 * The rows of a synchronous hit sent with `readBlocks` ({@link hitReadSql}): the written window's
 * (counts already read) and the read one's, each with its key's block.
 */
export function hitRows(written: CounterRow, read: WindowRef | undefined, row: Record<string, unknown>, nowMs: number): CounterRow[] {
  const rows: CounterRow[] = [{ ...written, blockedUntilMs: blockedUntil(row.blocked, nowMs) }]
  if (read !== undefined)
    rows.push({
      key: read.key,
      windowStartMs: read.windowStartMs,
      windowSizeMs: read.windowSizeMs,
      count: num(row.read_count),
      own: num(row.read_own),
      blockedUntilMs: blockedUntil(row.read_blocked, nowMs),
    })
  return rows
}
