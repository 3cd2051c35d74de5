import { windowStartMs } from './window.js'

/**
 * The contract between the engine and a central store ("strategy"). Kong's shape
 * (`pushDiffs`, `getCounters`) extended with what our sync invariants need.
 *
 * How the invariants are kept (docs/ARCHITECTURE.md has the long form): each process has a
 * random `nodeId` and keeps, per key-window, the cumulative count of hits it made there. A push
 * writes that cumulative count into the node's own slot of the key-window, and a store keeps a
 * node's slot only if the batch's `seq` is newer than the one it holds. A retried or duplicated
 * push therefore rewrites the same value (never counted twice), and a failed push is simply
 * carried by the next one (never lost). The total of a key-window is the sum over nodes.
 */

/** A key-window to read back without writing. */
export interface WindowRef {
  /** The rate-limited key, such as an IP address or a user id. */
  readonly key: string
  /** Window start, epoch ms (a multiple of `windowSizeMs`). */
  readonly windowStartMs: number
  /** Window size, whole ms. */
  readonly windowSizeMs: number
}

/** One key-window of this node, written by a push. */
export interface WindowPush extends WindowRef {
  /** This node's cumulative count in the window: what the store must hold for `nodeId`. */
  readonly count: number
  /** Hits since the last acknowledged push; informational, apply `count` to stay idempotent. */
  readonly diff: number
}

/** What one sync (or one synchronous hit) sends to a store. */
export interface DiffBatch {
  readonly namespace: string
  /** Identifies the writing process; random per process start. */
  readonly nodeId: string
  /** Increases with every batch of this node: a store ignores a slot write older than what it holds. */
  readonly seq: number
  /** The engine's clock at the time of the batch, epoch ms; stores use it for expiry. */
  readonly nowMs: number
  /** Key-windows to write. */
  readonly windows: readonly WindowPush[]
  /** Key-windows to read back, besides those written. */
  readonly refresh: readonly WindowRef[]
  /**
   * Blocks to set or lift (`limiter.block()`, a limit's `blockMs`), applied before any row is
   * read; sent only to a store with `supportsBlocks`. docs/ARCHITECTURE.md, "Blocks".
   */
  readonly blocks?: readonly BlockWrite[]
  /** When true, every row answered carries its key's `blockedUntilMs` (a store with `supportsBlocks`). */
  readonly readBlocks?: boolean
}

/**
 * A block of one key of the batch's namespace: every hit of the key is denied until `untilMs`,
 * whatever its counts say. A store keeps the later of the end it holds and the one written (two
 * processes blocking at once never shorten each other's block), forgets a block once it has
 * ended, and lifts it on a write of `untilMs: 0`.
 */
export interface BlockWrite {
  readonly key: string
  /** When the block ends, epoch ms on the engine's clock (a whole number); 0 lifts the key's block. */
  readonly untilMs: number
}

/** What a batch's block writes do to one key, in the order they were made. */
export interface FoldedBlock {
  readonly key: string
  /** Drop the stored block first (the batch lifts the key). */
  readonly lift: boolean
  /** Then keep at least this end, epoch ms; 0 when the batch only lifts. */
  readonly untilMs: number
}

/**
 * A batch's block writes folded into one per key, as if applied one after the other (a lift,
 * then a block of the same key, leaves the block): for stores that write each key once per
 * batch (one SQL statement cannot upsert a row twice). In the order the keys first appear.
 */
export function foldBlockWrites(blocks: readonly BlockWrite[]): FoldedBlock[] {
  const byKey = new Map<string, { key: string; lift: boolean; untilMs: number }>()
  for (const b of blocks) {
    let folded = byKey.get(b.key)
    if (folded === undefined) byKey.set(b.key, (folded = { key: b.key, lift: false, untilMs: 0 }))
    if (b.untilMs === 0) {
      folded.lift = true
      folded.untilMs = 0
    } else if (b.untilMs > folded.untilMs) folded.untilMs = b.untilMs
  }
  return [...byKey.values()]
}

/** The stored state of one key-window. */
export interface CounterRow extends WindowRef {
  /** Total over all nodes (after any reset). */
  readonly count: number
  /** What the store holds for the asking node (0 when it holds nothing). */
  readonly own: number
  /**
   * With `readBlocks`: when the key's block ends, epoch ms, or 0 when it has none at the batch's
   * `nowMs` (a block that ended by then reads as 0).
   */
  readonly blockedUntilMs?: number
}

/**
 * A central store: what the engine calls, and nothing more. Implement it to bring your own, and
 * run `runStrategyContract` and `runFaultSuite` from `ratelimiting/testing` against a real
 * server in your tests (docs/STORES.md, "Writing a store").
 */
export interface Strategy {
  /** Short name used in errors and diagnostics, such as "redis". */
  readonly name: string
  /** False when the store cannot hold decimal counts; the engine then refuses decimal values. */
  readonly supportsDecimals: boolean
  /**
   * True when the store keeps blocks (`DiffBatch.blocks` and `readBlocks`), so that a block
   * reaches the fleet; without it, a synced namespace refuses blocking. @default false
   */
  readonly supportsBlocks?: boolean
  /**
   * Applies every write of `batch` (atomically per key-window, idempotently by `nodeId`/`seq`)
   * and resolves with one row for each key-window written or listed in `refresh`, zeros for
   * those the store does not hold. Rejects if nothing can be said about the outcome. Every sync
   * and every synchronous hit is one call.
   */
  pushDiffs(batch: DiffBatch): Promise<CounterRow[]>
  /**
   * Yields the stored current and previous window (at `nowMs`) of every key of the namespace
   * for the given sizes (whole ms); `own` is relative to `nodeId`. `rl.fetch()` (the warm-up of
   * a new process) calls it.
   */
  getCounters(namespace: string, windowSizesMs: readonly number[], nowMs: number, nodeId?: string): AsyncIterable<CounterRow>
  /**
   * Resets a key across the fleet: for each size (whole ms), its current and previous window at
   * `nowMs` count zero from now on (hits other nodes have not pushed yet still arrive later).
   * `limiter.reset()` calls it.
   */
  resetKey(namespace: string, key: string, windowSizesMs: readonly number[], nowMs: number): Promise<void>
  /** Releases connections the strategy opened itself (never a client the user passed in). */
  close(): Promise<void>
  /**
   * Optional: the calls of an escrow namespace (`escrow: true`), atomically per key-window:
   * the writes as {@link pushDiffs}, then each grant `own' = own + max(0, min(target - own,
   * limit - rate))` with `rate` the sliding rate at `nowMs` of every reservation (nothing when
   * `own'` would stay below `minimum`), applied only when `seq` is newer than the node's register. The store keeps an epoch per namespace (made
   * by the first call after it lost its data) and refuses grants for `learnMs` after it.
   * A namespace refuses `escrow` on a store without it.
   */
  escrow?(batch: EscrowBatch): Promise<EscrowReply>
  /**
   * Optional, for tools and tests (the engine never calls it): reads one key-window; `own` is
   * relative to `nodeId`.
   */
  getWindow?(key: string, namespace: string, windowStartMs: number, windowSizeMs: number, nodeId?: string): Promise<CounterRow>
  /**
   * Optional (the engine never calls it): drops stored windows that no rate can use any more at
   * `nowMs`, for stores that do not expire them by themselves or to free space at once.
   */
  purge?(namespace: string, windowSizesMs: readonly number[], nowMs: number): Promise<void>
}

/**
 * A grant request of an escrow namespace (docs/ARCHITECTURE.md, "Escrow"): raise this node's
 * reservation of one key-window to at least `minimum` (the hits that ask), plus a share of what
 * is left, at most `target`, as far as `limit` allows. The store sizes the share, since it alone
 * knows the room and the processes: `floor((room − max(0, reach − own)) / (4 · nodes))`, `reach` as
 * {@link GrantRequest.wanted} says.
 */
export interface GrantRequest extends WindowRef {
  /** The most reservation this node asks to hold (cumulative in the window); a grant never lowers one. */
  readonly target: number
  /** The limit the window's sliding rate, every reservation counted, must stay within. */
  readonly limit: number
  /** The least reservation of any use (the first hit that asks): a grant that cannot reach it raises nothing (but see `countRefused`). */
  readonly minimum: number
  /**
   * The reservation every hit that asks would use together (several hits of a key in one
   * event-loop turn), at least `minimum`, at most `target`: the store grants as many of them as
   * the room allows, `reach = max(minimum, min(wanted, own + floor(room)))`, then its share of the rest.
   * Absent: `minimum`.
   */
  readonly wanted?: number
  /**
   * When the grant cannot reach `minimum`, raise the reservation to `wanted` (else `minimum`) all the same (never
   * lower it): the hits that asked are denied and count, as the namespace's `countDenied` says,
   * and the fleet sees them at once, not at this node's next sync (a client pacing its tries
   * across the processes would get past a penalty that arrives late). The row then says `refused`.
   * A store that ignores it answers no `refused`, and the engine writes the penalty at its next sync.
   */
  readonly countRefused?: boolean
}

/** What an escrow namespace sends: writes and reads as in a {@link DiffBatch}, and grants. */
export interface EscrowBatch {
  readonly namespace: string
  readonly nodeId: string
  /** As {@link DiffBatch.seq}: a write or grant older than what the node's register holds changes nothing. */
  readonly seq: number
  /** The engine's clock, epoch ms: the time the grants' rates are taken at. */
  readonly nowMs: number
  /** How long after its epoch begins the store refuses every grant (the processes write their hits again meanwhile). */
  readonly learnMs: number
  /** Registers to write, as {@link DiffBatch.windows} (returns of budget, hits counted while denied, hits written again). */
  readonly windows: readonly WindowPush[]
  /** Key-windows to read back. */
  readonly refresh: readonly WindowRef[]
  /** Grants, applied after the writes; a key-window is never both written and granted in one batch. */
  readonly grants: readonly GrantRequest[]
}

/** The answer to one grant: the key-window as stored after it. */
export interface GrantRow extends CounterRow {
  /** The previous window's total (every reservation in it). */
  readonly previousCount: number
  /** What the store holds for the asking node in the previous window. */
  readonly previousOwn: number
  /** Nodes holding a reservation in the window (the asking one included, once it holds one). */
  readonly nodes: number
  /**
   * True when the grant could not reach `minimum` (the hits that asked are denied); required of
   * a store that honours `countRefused`, whose raised reservation is then hits, not budget.
   */
  readonly refused?: boolean
}

/** The answer to an {@link EscrowBatch}. */
export interface EscrowReply {
  /** When the store began holding this namespace's reservations, epoch ms: a new value means it lost them. */
  readonly epochMs: number
  /** True while the store refuses grants (`learnMs` after the epoch began): the grants' rows are answered unchanged. */
  readonly learning: boolean
  /** Processes that called the store for this namespace in the last `learnMs`, the asking one included. */
  readonly nodes: number
  /** One row per write and read, in the batch's order (writes, then reads). */
  readonly rows: CounterRow[]
  /** One row per grant, in order. */
  readonly grants: GrantRow[]
}

/** Makes a strategy from `strategyOpts`; how `strategy: "name"` becomes an object. */
export type StrategyFactory = (options: Record<string, unknown>) => Strategy | Promise<Strategy>

/** Narrows an unknown value to a {@link Strategy} by its methods. */
export function isStrategy(value: unknown): value is Strategy {
  if (typeof value !== 'object' || value === null) return false
  const s = value as Record<string, unknown>
  return (
    typeof s.name === 'string' &&
    typeof s.pushDiffs === 'function' &&
    typeof s.getCounters === 'function' &&
    typeof s.resetKey === 'function' &&
    typeof s.close === 'function'
  )
}

/** A window of one size, without a key. */
export interface WindowSpan {
  readonly windowSizeMs: number
  readonly windowStartMs: number
}

/**
 * The windows a rate reads at `nowMs`: for each size, the current window and the one before it,
 * in that order. What `getCounters` and `resetKey` cover.
 */
export function currentAndPrevious(nowMs: number, windowSizesMs: readonly number[]): WindowSpan[] {
  const spans: WindowSpan[] = []
  for (const windowSizeMs of windowSizesMs) {
    const start = windowStartMs(nowMs, windowSizeMs)
    spans.push({ windowSizeMs, windowStartMs: start }, { windowSizeMs, windowStartMs: start - windowSizeMs })
  }
  return spans
}

/** How long a stored window must live, epoch ms: its own span, the next window's, and a grace period. */
export function windowExpiresAtMs(windowStartMs: number, windowSizeMs: number, graceMs: number): number {
  return windowStartMs + 2 * windowSizeMs + graceMs
}

const SURROGATE = /[\ud800-\udfff]/
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/**
 * Whether `text` holds a lone UTF-16 surrogate (`JSON.parse('"\\ud800"')` gives one). UTF-8
 * encoders, as every store driver uses, write each as U+FFFD, so keys that differ only there
 * would share one stored counter: a store escapes such keys first.
 */
export function hasLoneSurrogate(text: string): boolean {
  return SURROGATE.test(text) && LONE_SURROGATE.test(text)
}
