/**
 * The SQL of the PostgreSQL strategy: the DDL and every statement, built once per table from
 * validated identifiers. Values never enter the text: they are bound parameters ($1, $2, ...),
 * a batch travels as arrays that `unnest` turns back into rows. The blocks' SQL is in
 * blocks.ts.
 */
import { createHash } from 'node:crypto'
import type { DiffBatch, WindowPush } from '../../core/strategy.js'
import { encodeKey } from './options.js'

/** Schema, table and index names, quoted and ready to splice (they were validated first). */
export interface TableNames {
  /** `"schema"."table"` */
  readonly qualified: string
  readonly schema: string
  readonly table: string
  /** `"schema"."<table>_blocks"`: the blocks table beside the counters (see {@link blocksTable}). */
  readonly blocks: string
  /** The blocks table's name, unquoted. */
  readonly blocksTable: string
}

/** The node id of the row that holds a key-window's reset offset. */
export const RESET_NODE = '~reset'

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}$/

/** Whether `name` is a plain PostgreSQL identifier we accept for a schema or table. */
export function isIdentifier(name: unknown): name is string {
  return typeof name === 'string' && IDENTIFIER.test(name)
}

/** Names of the table in `schema`; both must satisfy {@link isIdentifier}. */
export function tableNames(schema: string, table: string): TableNames {
  const blocks = blocksTable(table)
  return { qualified: `"${schema}"."${table}"`, schema, table, blocks: `"${schema}"."${blocks}"`, blocksTable: blocks }
}

/**
 * `<table><suffix>` when it fits PostgreSQL's 63 bytes; else the table name cut short, a hash of
 * the whole and the suffix. PostgreSQL would truncate a long name silently, and two tables
 * that differ only at the end would then share one name.
 */
export function relatedName(table: string, suffix: string): string {
  return `${bounded(table, 63 - suffix.length)}${suffix}`
}

/** `name` if it has at most `max` characters, else its start, `_` and a hash of the whole (same length). */
export function bounded(name: string, max: number): string {
  if (name.length <= max) return name
  const hash = createHash('sha256').update(name).digest('hex').slice(0, 8)
  return `${name.slice(0, max - hash.length - 1)}_${hash}`
}

/** The blocks table of a counters table: `<table>_blocks` (shortened past 63 bytes). */
export function blocksTable(table: string): string {
  return relatedName(table, '_blocks')
}

/**
 * Room left free in every heap page, percent. A synchronous hit rewrites its node's row (count,
 * seq: neither indexed), and with room on the row's page PostgreSQL updates it in place (a HOT
 * update: no new index entry, less WAL, no index bloat); full pages (the default, 100) send every
 * update to another page and add an index entry each time.
 */
export const FILLFACTOR = 70

/**
 * The DDL `migrate()` runs: the schema, the table and nothing else (the primary key serves
 * every read and the purge). Idempotent.
 *
 * - One row per (namespace, window_size_ms, window_start_ms, key, node_id): each process writes
 *   only its own rows, so two processes never wait on each other's row locks.
 * - Window sizes and starts are whole ms (`bigint`): windows of any length from 1 ms up.
 * - `count` is `numeric`: decimal values are held exactly and sums never overflow 64 bits.
 * - `seq` is the writer's batch number: an upsert only replaces a row with a newer one.
 * - Text columns use the "C" collation: byte order, cheap comparisons, a stable cursor.
 * - Pages are filled to {@link FILLFACTOR} percent, so that updates stay on their page (HOT);
 *   `ALTER TABLE ... SET` gives a table made before the same for its new pages.
 *
 * A table of version 0.1 (windows in seconds, columns `window_size` and `window_start`) is
 * converted in place first: the columns are renamed and their values multiplied by 1000.
 *
 * Then the blocks table (`<table>_blocks`, {@link blocksTable}): one row per blocked key of a
 * namespace, `until_ms` its end (epoch ms). Made with IF NOT EXISTS, so a database migrated by
 * an earlier version gains it beside its counters. The index on (namespace, until_ms) lets the
 * purge find ended blocks without reading the live ones; blocks are written rarely (when a key
 * is blocked or lifted), so its upkeep costs the hits nothing.
 */
export function ddl(names: TableNames): string {
  const schema = names.schema.replace(/'/g, "''")
  const table = names.table.replace(/'/g, "''")
  return `CREATE SCHEMA IF NOT EXISTS "${names.schema}";
DO $upgrade$ BEGIN
  IF EXISTS (SELECT 1 FROM information_schema.columns
             WHERE table_schema = '${schema}' AND table_name = '${table}' AND column_name = 'window_size') THEN
    ALTER TABLE ${names.qualified} RENAME COLUMN window_size TO window_size_ms;
    ALTER TABLE ${names.qualified} RENAME COLUMN window_start TO window_start_ms;
    ALTER TABLE ${names.qualified}
      ALTER COLUMN window_size_ms TYPE bigint USING window_size_ms::bigint * 1000,
      ALTER COLUMN window_start_ms TYPE bigint USING window_start_ms * 1000;
  END IF;
END $upgrade$;
CREATE TABLE IF NOT EXISTS ${names.qualified} (
  namespace       text COLLATE "C" NOT NULL,
  window_size_ms  bigint NOT NULL,
  window_start_ms bigint NOT NULL,
  key             text COLLATE "C" NOT NULL,
  node_id         text COLLATE "C" NOT NULL,
  count           numeric NOT NULL,
  seq             bigint NOT NULL,
  CONSTRAINT "${names.table}_pkey" PRIMARY KEY (namespace, window_size_ms, window_start_ms, key, node_id)
) WITH (fillfactor = ${FILLFACTOR});
ALTER TABLE ${names.qualified} SET (fillfactor = ${FILLFACTOR});
CREATE TABLE IF NOT EXISTS ${names.blocks} (
  namespace text COLLATE "C" NOT NULL,
  key       text COLLATE "C" NOT NULL,
  until_ms  bigint NOT NULL,
  CONSTRAINT "${relatedName(names.table, '_blocks_pkey')}" PRIMARY KEY (namespace, key)
);
CREATE INDEX IF NOT EXISTS "${relatedName(names.table, '_blocks_until')}" ON ${names.blocks} (namespace, until_ms);`
}

/**
 * One push: upserts this node's rows (only over an older `seq`), then answers the total and
 * this node's share of every written and refreshed key-window, all in one statement.
 *
 * The statements of a WITH run on one snapshot, so the final SELECT does not see the upsert's
 * writes: a written window's own count comes from the upsert's RETURNING, the other nodes'
 * sum from the snapshot. A window whose write was refused (an old or repeated seq) reports the
 * count it pushed as this node's: concurrent synchronous hits of one process commit in any
 * order, and each must be answered as of its own place in the node's sequence. The snapshot
 * holds either nothing of this node yet (a rate of 0: hits admitted past the limit) or a newer
 * push's count (hits denied under the limit); the pushed count is neither.
 *
 * $1 namespace, $2 node id, $3 seq, $4-$7 written (keys, sizes, starts, counts as text),
 * $8-$10 refreshed (keys, sizes, starts).
 *
 * `small` reads the arrays by subscript instead of `unnest`: the planner sizes `unnest` of a
 * known array exactly, so a prepared push was re-planned on every call (custom plans, about
 * 0.3 ms each), while `generate_subscripts` has a fixed estimate and the cached generic plan is
 * used. Subscripting a text array is linear per element, so large batches keep `unnest`.
 *
 * `extra` (the blocks, blocks.ts) adds CTEs before the push's own, columns and joins;
 * without it the text is the one pushes without blocks have always sent.
 */
export function pushSql(names: TableNames, small = false, extra?: PushExtension): string {
  const written = small
    ? 'SELECT ($4::text[])[i] AS key, ($5::bigint[])[i] AS window_size_ms, ($6::bigint[])[i] AS window_start_ms, ($7::numeric[])[i] AS count FROM generate_subscripts($4::text[], 1) AS i'
    : 'SELECT * FROM unnest($4::text[], $5::bigint[], $6::bigint[], $7::numeric[]) AS w(key, window_size_ms, window_start_ms, count)'
  const refreshed = small
    ? 'SELECT ($8::text[])[j], ($9::bigint[])[j], ($10::bigint[])[j], NULL::numeric FROM generate_subscripts($8::text[], 1) AS j'
    : 'SELECT f.key, f.window_size_ms, f.window_start_ms, NULL::numeric FROM unnest($8::text[], $9::bigint[], $10::bigint[]) AS f(key, window_size_ms, window_start_ms)'
  return `WITH ${extra === undefined || extra.ctes === '' ? '' : `${extra.ctes}, `}w AS (
  ${written}
), up AS (
  INSERT INTO ${names.qualified} AS t (namespace, window_size_ms, window_start_ms, key, node_id, count, seq)
  SELECT $1, w.window_size_ms, w.window_start_ms, w.key, $2, w.count, $3 FROM w
  ON CONFLICT (namespace, window_size_ms, window_start_ms, key, node_id)
  DO UPDATE SET count = EXCLUDED.count, seq = EXCLUDED.seq WHERE t.seq < EXCLUDED.seq
  RETURNING t.window_size_ms, t.window_start_ms, t.key, t.count
), r AS (
  SELECT w.key, w.window_size_ms, w.window_start_ms, w.count AS pushed FROM w
  UNION ALL
  ${refreshed}
)
SELECT r.key, r.window_size_ms, r.window_start_ms,
  (COALESCE(s.others, 0) + COALESCE(up.count, r.pushed, s.mine, 0))::text AS count,
  COALESCE(up.count, r.pushed, s.mine, 0)::text AS own${extra === undefined ? '' : `,\n  ${extra.columns}`}
FROM r
LEFT JOIN up ON up.key = r.key AND up.window_size_ms = r.window_size_ms AND up.window_start_ms = r.window_start_ms
LEFT JOIN LATERAL (
  SELECT sum(t.count) FILTER (WHERE t.node_id <> $2) AS others, sum(t.count) FILTER (WHERE t.node_id = $2) AS mine
  FROM ${names.qualified} t
  WHERE t.namespace = $1 AND t.window_size_ms = r.window_size_ms AND t.window_start_ms = r.window_start_ms AND t.key = r.key
) s ON true${extra?.joins ?? ''}`
}

/** The parameters of a push: $1-$10 of {@link pushSql}, then those of an extension. */
export type PushParams = [
  namespace: string,
  nodeId: string,
  seq: number,
  keys: string[],
  sizes: number[],
  starts: number[],
  counts: string[],
  readKeys: string[],
  readSizes: number[],
  readStarts: number[],
  ...extra: unknown[],
]

/**
 * A batch's windows as the parameters $1-$10 of {@link pushSql}, keys escaped (options.ts). A
 * window written twice is sent once, its last write: ON CONFLICT cannot touch a row twice in
 * one statement.
 */
export function pushParams(batch: DiffBatch): PushParams {
  const writes = new Map<string, WindowPush>()
  for (const w of batch.windows) writes.set(`${w.windowSizeMs}\u0000${w.windowStartMs}\u0000${w.key}`, w)
  const keys: string[] = []
  const sizes: number[] = []
  const starts: number[] = []
  const counts: string[] = []
  for (const w of writes.values()) {
    keys.push(encodeKey(w.key))
    sizes.push(w.windowSizeMs)
    starts.push(w.windowStartMs)
    counts.push(String(w.count))
  }
  const rkeys: string[] = []
  const rsizes: number[] = []
  const rstarts: number[] = []
  for (const r of batch.refresh) {
    rkeys.push(encodeKey(r.key))
    rsizes.push(r.windowSizeMs)
    rstarts.push(r.windowStartMs)
  }
  return [batch.namespace, batch.nodeId, batch.seq, keys, sizes, starts, counts, rkeys, rsizes, rstarts]
}

/** What a push statement gains with blocks (blocks.ts): see {@link pushSql}, {@link pushOneSql}. */
export interface PushExtension {
  /** CTEs run before the push's own (`name AS (...)`, comma-separated), or ''. */
  readonly ctes: string
  /** Columns added to the answer. */
  readonly columns: string
  /** Joins or FROM items added after the push's own, with their leading newline or comma, or ''. */
  readonly joins: string
}

/**
 * One synchronous hit: one key-window written, at most one read, with scalar parameters (no
 * arrays to build, send and unnest) and two index lookups. Answers as {@link pushSql} does: the
 * written window's total is the other rows' sum in the snapshot plus the count pushed (this
 * node's share, written or refused for its seq); the read window's total and this node's share.
 * A data-modifying WITH runs to completion whether or not the query reads it.
 *
 * $1 namespace, $2 node id, $3 seq, $4 key, $5 size, $6 start, $7 count (text) of the written
 * window; $8 key, $9 size, $10 start of the read one (NULL: none). `extra` as in {@link pushSql};
 * `commit` the option `synchronousCommit` ({@link commitItem}).
 *
 * With `read` false, the statement of a hit that reads no other window (most hits: a key's
 * previous window is read about once a second): $1-$7 only, and no read subquery, whose
 * aggregate costs a plan of its own even when its parameters are NULL (about a tenth of the
 * statement's time with commits that do not wait, docs/BENCHMARKS-postgres.md).
 */
export function pushOneSql(names: TableNames, extra?: PushExtension, commit?: SynchronousCommit, read = true): string {
  const readColumns = read ? ', r.count AS read_count, r.own AS read_own' : ''
  const readItem = read
    ? `, (
  SELECT COALESCE(sum(count), 0)::text AS count, COALESCE(sum(count) FILTER (WHERE node_id = $2), 0)::text AS own
  FROM ${names.qualified}
  WHERE namespace = $1 AND window_size_ms = $9 AND window_start_ms = $10 AND key = $8
) r`
    : ''
  return `WITH ${extra === undefined || extra.ctes === '' ? '' : `${extra.ctes}, `}up AS (
  INSERT INTO ${names.qualified} AS t (namespace, window_size_ms, window_start_ms, key, node_id, count, seq)
  VALUES ($1, $5, $6, $4, $2, $7::numeric, $3)
  ON CONFLICT (namespace, window_size_ms, window_start_ms, key, node_id)
  DO UPDATE SET count = EXCLUDED.count, seq = EXCLUDED.seq WHERE t.seq < EXCLUDED.seq
)
SELECT (COALESCE(o.others, 0) + $7::numeric)::text AS count${readColumns}${extra === undefined ? '' : `, ${extra.columns}`}
FROM (
  SELECT sum(count) AS others FROM ${names.qualified}
  WHERE namespace = $1 AND window_size_ms = $5 AND window_start_ms = $6 AND key = $4 AND node_id <> $2
) o${readItem}${extra?.joins ?? ''}${commitItem(commit)}`
}

/** The values of the option `synchronousCommit`: those of PostgreSQL's setting. */
export const SYNCHRONOUS_COMMIT = ['on', 'off', 'local', 'remote_write', 'remote_apply'] as const
export type SynchronousCommit = (typeof SYNCHRONOUS_COMMIT)[number]

/**
 * A FROM item that sets `synchronous_commit` for the statement's own transaction
 * (`set_config(..., true)`: the session and the server keep theirs), or '' for the server's. A
 * subquery in FROM runs once and, being volatile, is never planned away. A transaction's commit
 * reads the setting when it commits, after the statement: with 'off' it returns without waiting
 * for the WAL flush (docs/STORES-postgres.md says what that risks).
 */
export function commitItem(commit: SynchronousCommit | undefined): string {
  return commit === undefined ? '' : `, (SELECT set_config('synchronous_commit', '${commit}', true)) AS sc`
}

/** One key-window: $1 namespace, $2 size, $3 start, $4 key, $5 node id. */
export function windowSql(names: TableNames): string {
  return `SELECT COALESCE(sum(count), 0)::text AS count, COALESCE(sum(count) FILTER (WHERE node_id = $5), 0)::text AS own
FROM ${names.qualified}
WHERE namespace = $1 AND window_size_ms = $2 AND window_start_ms = $3 AND key = $4`
}

/**
 * One page of one (size, start) of a namespace, in key order. With `after`, the page starts
 * after that key (keyset pagination: each page is an index range scan, however deep).
 * $1 namespace, $2 size, $3 start, $4 node id, $5 page size, $6 the last key of the previous page.
 */
export function pageSql(names: TableNames, after: boolean): string {
  return `SELECT key, COALESCE(sum(count), 0)::text AS count, COALESCE(sum(count) FILTER (WHERE node_id = $4), 0)::text AS own
FROM ${names.qualified}
WHERE namespace = $1 AND window_size_ms = $2 AND window_start_ms = $3${after ? ' AND key > $6' : ''}
GROUP BY key ORDER BY key LIMIT $5`
}

/**
 * Resets key-windows: their offset row becomes minus the sum of the node rows, so the total
 * reads zero. Windows the table does not hold are left alone.
 * $1 namespace, $2 key, $3 sizes, $4 starts.
 */
export function resetSql(names: TableNames): string {
  return `INSERT INTO ${names.qualified} AS t (namespace, window_size_ms, window_start_ms, key, node_id, count, seq)
SELECT $1, w.window_size_ms, w.window_start_ms, $2, '${RESET_NODE}', -s.total, 0
FROM unnest($3::bigint[], $4::bigint[]) AS w(window_size_ms, window_start_ms)
CROSS JOIN LATERAL (
  SELECT sum(c.count) AS total FROM ${names.qualified} c
  WHERE c.namespace = $1 AND c.window_size_ms = w.window_size_ms AND c.window_start_ms = w.window_start_ms AND c.key = $2
    AND c.node_id <> '${RESET_NODE}'
) s
WHERE s.total IS NOT NULL
ON CONFLICT (namespace, window_size_ms, window_start_ms, key, node_id) DO UPDATE SET count = EXCLUDED.count`
}

/**
 * Deletes at most $4 expired rows of one namespace and size (window_start_ms <= $3, epoch ms), located by
 * ctid through the primary key: a short statement that holds few locks.
 */
export function purgeBatchSql(names: TableNames): string {
  return `DELETE FROM ${names.qualified}
WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM ${names.qualified}
  WHERE namespace = $1 AND window_size_ms = $2 AND window_start_ms <= $3
  LIMIT $4
))`
}
