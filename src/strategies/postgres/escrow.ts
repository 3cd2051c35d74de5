/**
 * Escrow in PostgreSQL (`Strategy.escrow`, docs/ARCHITECTURE.md "Escrow"): the DDL of the epoch
 * and callers tables and of the function that serves one batch, the statement that calls it,
 * its parameters, and how its answer becomes an EscrowReply. The semantics are MemoryStrategy's
 * (the reference), checked by src/testing/escrow-contract.ts.
 *
 * **One round trip per batch: one function call.** A grant must read the key-window's
 * reservations and raise this node's atomically, while other processes grant the same
 * key-window. One plain statement cannot do that: each node owns its own row, so there is no
 * single row whose lock would serialize the grants (FOR UPDATE on the existing rows leaves a new
 * node's INSERT free), and in READ COMMITTED every part of one statement reads the snapshot taken
 * when it began, so a statement that waits for a lock still decides on the sums it read before
 * the wait: two grants would each see the room the other is about to take. A PL/pgSQL function
 * (VOLATILE) takes a fresh snapshot for each statement inside it, so it can lock first and read
 * after:
 *
 * 1. every key-window the batch grants is locked with `pg_advisory_xact_lock` on a 64-bit hash
 *    of (namespace, size, start, key), in hash order (two batches never wait on each other in a
 *    cycle), before any row is touched; grants of one key-window take turns, grants of different
 *    ones never wait (a hash collision only makes two of them take turns);
 * 2. the writes upsert this node's rows, as a push does (a newer `seq` only), in key order;
 * 3. the grants read the sums (a fresh snapshot: every grant committed before the lock was had
 *    is counted) and upsert this node's rows in one statement; the locks are released at commit,
 *    after the writes are visible.
 *
 * Writes and returns take no lock: they only write this node's rows, and a write that lands
 * beside a grant either lowers a reservation (the grant decided on more than is held: safe) or
 * raises one for hits counted while denied, which may pass the limit in any case.
 */
import type { EscrowBatch, EscrowReply, GrantRequest, GrantRow, WindowRef } from '../../core/strategy.js'
import { encodeKey, num } from './options.js'
import { FILLFACTOR, RESET_NODE, relatedName, type TableNames } from './sql.js'

/** The escrow objects beside a counters table: `<table>_epochs`, `<table>_callers`, `<table>_escrow()`. */
export interface EscrowNames {
  /** `"schema"."<table>_epochs"`: one row per namespace, when the table began holding its reservations. */
  readonly epochs: string
  /** `"schema"."<table>_callers"`: one row per namespace and process, its last call. */
  readonly callers: string
  /** `"schema"."<table>_escrow"`: the function one batch calls. */
  readonly fn: string
  readonly epochsTable: string
  readonly callersTable: string
}

export function escrowNames(names: TableNames): EscrowNames {
  const epochsTable = relatedName(names.table, '_epochs')
  const callersTable = relatedName(names.table, '_callers')
  return {
    epochs: `"${names.schema}"."${epochsTable}"`,
    callers: `"${names.schema}"."${callersTable}"`,
    fn: `"${names.schema}"."${relatedName(names.table, '_escrow')}"`,
    epochsTable,
    callersTable,
  }
}

/**
 * The DDL of escrow, run by `migrate()` after the counters table's: two small tables and the
 * function. `CREATE TABLE IF NOT EXISTS` and `CREATE OR REPLACE FUNCTION`, so a database
 * migrated by an earlier version gains them beside its counters, and running it again changes
 * nothing.
 *
 * - **The epoch** of a namespace is the `nowMs` of the first escrow call that found no row for
 *   it. PostgreSQL keeps committed rows across restarts and crashes, so it changes only when the
 *   epochs table loses the row (emptied, dropped, or a database restored from a backup with it):
 *   empty the epochs table whenever you empty the counters table.
 * - **Callers**: each call upserts its node's last call (the later of the stored and its
 *   `nowMs`); the processes of a namespace are the rows newer than `learnMs`. Older rows of
 *   other nodes are deleted by the calls that see them, skipping rows another call holds.
 * - **Durability**: a grant acknowledged and then lost in a crash would let the others be
 *   granted the budget its process still spends. The function therefore commits with at least
 *   `synchronous_commit = local` when the server's (or session's) setting is `off`.
 */
export function escrowDdl(names: TableNames): string {
  const e = escrowNames(names)
  const C = names.qualified
  return `CREATE TABLE IF NOT EXISTS ${e.epochs} (
  namespace text COLLATE "C" NOT NULL,
  epoch_ms  bigint NOT NULL,
  CONSTRAINT "${relatedName(names.table, '_epochs_pkey')}" PRIMARY KEY (namespace)
);
CREATE TABLE IF NOT EXISTS ${e.callers} (
  namespace text COLLATE "C" NOT NULL,
  node_id   text COLLATE "C" NOT NULL,
  last_ms   bigint NOT NULL,
  CONSTRAINT "${relatedName(names.table, '_callers_pkey')}" PRIMARY KEY (namespace, node_id)
) WITH (fillfactor = ${FILLFACTOR});
CREATE OR REPLACE FUNCTION ${e.fn}(
  p_ns text, p_node text, p_seq bigint, p_now float8, p_learn float8,
  w_keys text[], w_sizes bigint[], w_starts bigint[], w_counts numeric[],
  r_keys text[], r_sizes bigint[], r_starts bigint[],
  g_keys text[], g_sizes bigint[], g_starts bigint[], g_targets numeric[], g_limits numeric[], g_minimums numeric[],
  g_wanteds numeric[], g_count_refused boolean[]
) RETURNS TABLE (r_kind text, r_ord bigint, r_count text, r_own text, r_prev_count text, r_prev_own text, r_nodes bigint, r_refused boolean)
LANGUAGE plpgsql VOLATILE AS $escrow$
DECLARE
  v_epoch bigint;
  v_learning boolean;
  v_nodes bigint;
  v_stale bigint;
  v_refused bigint[] := '{}';
BEGIN
  IF current_setting('synchronous_commit') = 'off' THEN
    PERFORM set_config('synchronous_commit', 'local', true);
  END IF;
  SELECT e.epoch_ms INTO v_epoch FROM ${e.epochs} e WHERE e.namespace = p_ns;
  IF v_epoch IS NULL THEN
    INSERT INTO ${e.epochs} (namespace, epoch_ms) VALUES (p_ns, floor(p_now)::bigint) ON CONFLICT (namespace) DO NOTHING;
    SELECT e.epoch_ms INTO v_epoch FROM ${e.epochs} e WHERE e.namespace = p_ns;
  END IF;
  v_learning := p_now < v_epoch + p_learn;
  SELECT count(*) FILTER (WHERE c.last_ms > p_now - p_learn), count(*) FILTER (WHERE c.last_ms <= p_now - p_learn)
    INTO v_nodes, v_stale
    FROM ${e.callers} c WHERE c.namespace = p_ns AND c.node_id <> p_node;
  v_nodes := v_nodes + 1;
  r_kind := 'e'; r_ord := 0; r_count := v_epoch::text; r_own := v_learning::text; r_nodes := v_nodes; r_refused := NULL;
  RETURN NEXT;

  -- 1. the grants' key-windows, locked in one order before any row is
  IF NOT v_learning AND cardinality(g_keys) > 0 THEN
    PERFORM pg_advisory_xact_lock(h) FROM unnest(ARRAY(
      SELECT DISTINCT hashtextextended(u.k, hashtextextended(p_ns, u.s # u.st))
      FROM unnest(g_keys, g_sizes, g_starts) AS u(k, s, st) ORDER BY 1
    )) AS h;
  END IF;

  -- 2. the writes (a window written twice: its first write, as one after the other would), then one row per write and read
  IF cardinality(w_keys) > 0 THEN
    INSERT INTO ${C} AS t (namespace, window_size_ms, window_start_ms, key, node_id, count, seq)
    SELECT p_ns, w.s, w.st, w.k, p_node, w.c, p_seq
    FROM (SELECT DISTINCT ON (u.s, u.st, u.k) u.s, u.st, u.k, u.c
          FROM unnest(w_keys, w_sizes, w_starts, w_counts) WITH ORDINALITY AS u(k, s, st, c, i) ORDER BY u.s, u.st, u.k, u.i) w
    ORDER BY w.s, w.st, w.k
    ON CONFLICT (namespace, window_size_ms, window_start_ms, key, node_id)
    DO UPDATE SET count = EXCLUDED.count, seq = EXCLUDED.seq WHERE t.seq < EXCLUDED.seq;
  END IF;
  IF cardinality(w_keys) + cardinality(r_keys) > 0 THEN
    -- a write is answered in its place in the node's sequence: the others' sum, and the count it carried
    RETURN QUERY
    SELECT 'r'::text, q.i, (COALESCE(a.others, 0) + COALESCE(q.c, a.mine, 0))::text, COALESCE(q.c, a.mine, 0)::text,
      NULL::text, NULL::text, NULL::bigint, NULL::boolean
    FROM (
      SELECT u.k, u.s, u.st, u.c, u.i FROM unnest(w_keys, w_sizes, w_starts, w_counts) WITH ORDINALITY AS u(k, s, st, c, i)
      UNION ALL
      SELECT v.k, v.s, v.st, NULL::numeric, cardinality(w_keys) + v.i FROM unnest(r_keys, r_sizes, r_starts) WITH ORDINALITY AS v(k, s, st, i)
    ) q
    LEFT JOIN LATERAL (
      SELECT sum(t.count) FILTER (WHERE t.node_id <> p_node) AS others, sum(t.count) FILTER (WHERE t.node_id = p_node) AS mine
      FROM ${C} t WHERE t.namespace = p_ns AND t.window_size_ms = q.s AND t.window_start_ms = q.st AND t.key = q.k
    ) a ON true;
  END IF;

  -- 3. the grants, in doubles as the engine computes them: rate = current + previous × weight,
  -- room = limit − rate, need = minimum − own. When need <= room: as many of the asking hits as
  -- fit, reach = max(minimum, min(wanted, own + floor(room))), then the reservation becomes
  -- min(target, max(own, reach + floor((room − max(0, reach − own)) / (4 · nodes)))). Else the
  -- grant is refused, and with count_refused the reservation becomes max(own, wanted) (the denied
  -- hits count). Applied only over an older seq (a refused grant still takes its seq, as
  -- MemoryStrategy's does); never lowers the row (GREATEST: a write of this node that landed
  -- since the read stays). The refused grants' places are kept for the answer.
  IF NOT v_learning AND cardinality(g_keys) > 0 THEN
    WITH decided AS (
      SELECT y.*, least(y.target::float8, greatest(y.own_f, y.reach::float8 + y.share)) AS raised
      FROM (
        SELECT z.*, floor((z.room - greatest(0, z.reach::float8 - z.own_f)) / (4 * v_nodes)::float8) AS share
        FROM (
          SELECT w.*, greatest(w.minimum, least(w.wanted, COALESCE(w.own, 0) + floor(greatest(w.room, 0))::numeric)) AS reach
          FROM (
            SELECT g.k, g.s, g.st, g.i, g.target, g.minimum, COALESCE(g.wanted, g.minimum) AS wanted, COALESCE(g.count_refused, false) AS count_refused,
              c.own, c.own_seq, COALESCE(c.own, 0)::float8 AS own_f,
              g.minimum::float8 - COALESCE(c.own, 0)::float8 AS need,
              g.lim::float8 - (COALESCE(c.total, 0)::float8
                + COALESCE(p.total, 0)::float8 * ((g.s::float8 - (p_now - floor(p_now / g.s::float8) * g.s::float8)) / g.s::float8)) AS room
            FROM (SELECT DISTINCT ON (u.s, u.st, u.k) u.*
                  FROM unnest(g_keys, g_sizes, g_starts, g_targets, g_limits, g_minimums, g_wanteds, g_count_refused)
                    WITH ORDINALITY AS u(k, s, st, target, lim, minimum, wanted, count_refused, i)
                  ORDER BY u.s, u.st, u.k, u.i) g
            LEFT JOIN LATERAL (
              SELECT sum(t.count) AS total, sum(t.count) FILTER (WHERE t.node_id = p_node) AS own,
                max(t.seq) FILTER (WHERE t.node_id = p_node) AS own_seq
              FROM ${C} t WHERE t.namespace = p_ns AND t.window_size_ms = g.s AND t.window_start_ms = g.st AND t.key = g.k
            ) c ON true
            LEFT JOIN LATERAL (
              SELECT sum(t.count) AS total
              FROM ${C} t WHERE t.namespace = p_ns AND t.window_size_ms = g.s AND t.window_start_ms = g.st - g.s AND t.key = g.k
            ) p ON true
          ) w
        ) z
      ) y
      WHERE y.own_seq IS NULL OR y.own_seq < p_seq
    ), stored AS (
      INSERT INTO ${C} AS t (namespace, window_size_ms, window_start_ms, key, node_id, count, seq)
      SELECT p_ns, x.s, x.st, x.k, p_node,
        CASE WHEN x.need <= x.room AND x.raised > x.own_f
          THEN CASE WHEN x.raised = x.target::float8 THEN x.target ELSE x.reach + x.share::numeric END
          WHEN x.need > x.room AND x.count_refused AND x.wanted > COALESCE(x.own, 0) THEN x.wanted
          ELSE COALESCE(x.own, 0) END,
        p_seq
      FROM decided x
      ORDER BY x.s, x.st, x.k
      ON CONFLICT (namespace, window_size_ms, window_start_ms, key, node_id)
      DO UPDATE SET count = GREATEST(t.count, EXCLUDED.count), seq = EXCLUDED.seq WHERE t.seq < EXCLUDED.seq
      RETURNING 1
    )
    SELECT COALESCE(array_agg(d.i) FILTER (WHERE d.need > d.room), '{}') INTO v_refused
    FROM decided d, (SELECT count(*) FROM stored) AS written;
  END IF;
  IF cardinality(g_keys) > 0 THEN
    -- each grant's key-window as stored now (unchanged while learning), and its previous window
    RETURN QUERY
    SELECT 'g'::text, g.i, COALESCE(c.total, 0)::text, COALESCE(c.own, 0)::text, COALESCE(p.total, 0)::text,
      COALESCE(p.own, 0)::text, COALESCE(c.nodes, 0), g.i = ANY(v_refused)
    FROM unnest(g_keys, g_sizes, g_starts) WITH ORDINALITY AS g(k, s, st, i)
    LEFT JOIN LATERAL (
      SELECT sum(t.count) AS total, sum(t.count) FILTER (WHERE t.node_id = p_node) AS own,
        count(*) FILTER (WHERE t.node_id <> '${RESET_NODE}') AS nodes
      FROM ${C} t WHERE t.namespace = p_ns AND t.window_size_ms = g.s AND t.window_start_ms = g.st AND t.key = g.k
    ) c ON true
    LEFT JOIN LATERAL (
      SELECT sum(t.count) AS total, sum(t.count) FILTER (WHERE t.node_id = p_node) AS own
      FROM ${C} t WHERE t.namespace = p_ns AND t.window_size_ms = g.s AND t.window_start_ms = g.st - g.s AND t.key = g.k
    ) p ON true;
  END IF;

  -- the callers last, so that the row lock of this node's row is held only until the commit
  IF v_stale > 0 THEN
    DELETE FROM ${e.callers} c WHERE c.ctid = ANY(ARRAY(
      SELECT o.ctid FROM ${e.callers} o
      WHERE o.namespace = p_ns AND o.node_id <> p_node AND o.last_ms <= p_now - p_learn
      FOR UPDATE SKIP LOCKED
    ));
  END IF;
  INSERT INTO ${e.callers} AS c (namespace, node_id, last_ms) VALUES (p_ns, p_node, floor(p_now)::bigint)
  ON CONFLICT (namespace, node_id) DO UPDATE SET last_ms = GREATEST(c.last_ms, EXCLUDED.last_ms);
END
$escrow$;`
}

/** The statement of one batch: $1-$20 as {@link escrowParams}. */
export function escrowSql(names: TableNames): string {
  return `SELECT r_kind, r_ord, r_count, r_own, r_prev_count, r_prev_own, r_nodes, r_refused FROM ${escrowNames(names).fn}(
  $1::text, $2::text, $3::bigint, $4::float8, $5::float8,
  $6::text[], $7::bigint[], $8::bigint[], $9::numeric[],
  $10::text[], $11::bigint[], $12::bigint[],
  $13::text[], $14::bigint[], $15::bigint[], $16::numeric[], $17::numeric[], $18::numeric[],
  $19::numeric[], $20::boolean[])`
}

/** A batch as the function's parameters: keys escaped (options.ts), numbers as decimal text (exact as numeric). */
export function escrowParams(batch: EscrowBatch): unknown[] {
  const keys = (refs: readonly WindowRef[]) => refs.map((r) => encodeKey(r.key))
  const sizes = (refs: readonly WindowRef[]) => refs.map((r) => r.windowSizeMs)
  const starts = (refs: readonly WindowRef[]) => refs.map((r) => r.windowStartMs)
  const g = batch.grants
  return [
    batch.namespace,
    batch.nodeId,
    batch.seq,
    batch.nowMs,
    batch.learnMs,
    keys(batch.windows),
    sizes(batch.windows),
    starts(batch.windows),
    batch.windows.map((w) => String(w.count)),
    keys(batch.refresh),
    sizes(batch.refresh),
    starts(batch.refresh),
    keys(g),
    sizes(g),
    starts(g),
    g.map((r: GrantRequest) => String(r.target)),
    g.map((r) => String(r.limit)),
    g.map((r) => String(r.minimum)),
    g.map((r) => String(r.wanted ?? r.minimum)),
    g.map((r) => r.countRefused === true),
  ]
}

/** The function's rows as an EscrowReply: rows and grants in the batch's order, keys as the batch gave them. */
export function escrowReply(batch: EscrowBatch, result: ReadonlyArray<Record<string, unknown>>): EscrowReply {
  let head: Record<string, unknown> | undefined
  const refs = [...batch.windows, ...batch.refresh]
  const rows: EscrowReply['rows'] = new Array(refs.length)
  const grants: GrantRow[] = new Array(batch.grants.length)
  let answered = 0
  for (const r of result) {
    const i = Number(r.r_ord) - 1
    if (r.r_kind === 'e') head = r
    else if (r.r_kind === 'r') {
      if (rows[i] === undefined) answered++
      const ref = refs[i] as WindowRef
      rows[i] = { key: ref.key, windowStartMs: ref.windowStartMs, windowSizeMs: ref.windowSizeMs, count: num(r.r_count), own: num(r.r_own) }
    } else {
      const g = batch.grants[i] as GrantRequest
      if (grants[i] === undefined) answered++
      grants[i] = {
        key: g.key,
        windowStartMs: g.windowStartMs,
        windowSizeMs: g.windowSizeMs,
        count: num(r.r_count),
        own: num(r.r_own),
        previousCount: num(r.r_prev_count),
        previousOwn: num(r.r_prev_own),
        nodes: Number(r.r_nodes),
        ...(r.r_refused === true ? { refused: true } : {}),
      }
    }
  }
  if (head === undefined || answered !== refs.length + batch.grants.length)
    throw new Error(`escrow: the function answered ${result.length} rows for ${refs.length} rows and ${batch.grants.length} grants`)
  return { epochMs: Number(head.r_count), learning: head.r_own === 'true', nodes: Number(head.r_nodes), rows, grants }
}
