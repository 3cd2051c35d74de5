/**
 * The contract between the engine and a central store ("strategy"). Kong's shape
 * (`pushDiffs`, `getCounters`, `getWindow`) extended with what our sync invariants need.
 *
 * How the invariants are kept (docs/ARCHITECTURE.md has the long form): each process has a
 * random `nodeId` and keeps, per key-window, the cumulative count of hits it made there. A push
 * writes that cumulative count into the node's own slot of the key-window, and a store keeps a
 * node's slot only if the batch's `seq` is newer than the one it holds. A retried or duplicated
 * push therefore rewrites the same value (never counted twice), and a failed push is simply
 * carried by the next one (never lost). The total of a key-window is the sum over nodes.
 */

/** One key-window of this node, written by a push. */
export interface WindowPush {
  /** The rate-limited key, such as an IP address or a user id. */
  readonly key: string
  /** Window start, epoch seconds (a multiple of `windowSize`). */
  readonly windowStart: number
  /** Window size in seconds. */
  readonly windowSize: number
  /** This node's cumulative count in the window: what the store must hold for `nodeId`. */
  readonly count: number
  /** Hits since the last acknowledged push; informational, apply `count` to stay idempotent. */
  readonly diff: number
}

/** A key-window to read back without writing. */
export interface WindowRef {
  readonly key: string
  readonly windowStart: number
  readonly windowSize: number
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
}

/** The stored state of one key-window. */
export interface CounterRow {
  readonly key: string
  readonly windowStart: number
  readonly windowSize: number
  /** Total over all nodes (after any reset). */
  readonly count: number
  /** What the store holds for the asking node (0 when it holds nothing). */
  readonly own: number
}

/**
 * A central store. Implement it to bring your own; run `runStrategyContract` from the tests
 * against it to check it keeps the contract.
 */
export interface Strategy {
  /** Short name used in errors and diagnostics, such as "redis". */
  readonly name: string
  /** False when the store cannot hold decimal counts; the engine then refuses decimal values. */
  readonly supportsDecimals: boolean
  /**
   * Applies every write of `batch` (atomically per key-window, idempotently by `nodeId`/`seq`)
   * and resolves with one row for each key-window written or listed in `refresh`, zeros for
   * those the store does not hold. Rejects if nothing can be said about the outcome.
   */
  pushDiffs(batch: DiffBatch): Promise<CounterRow[]>
  /**
   * Yields the stored current and previous window (at `timeSec`) of every key of the namespace
   * for the given sizes; `own` is relative to `nodeId`.
   */
  getCounters(namespace: string, windowSizes: readonly number[], timeSec: number, nodeId?: string): AsyncIterable<CounterRow>
  /** Reads one key-window; `own` is relative to `nodeId`. */
  getWindow(key: string, namespace: string, windowStart: number, windowSize: number, nodeId?: string): Promise<CounterRow>
  /**
   * Resets a key across the fleet: for each size, its current and previous window at `nowMs`
   * count zero from now on (hits other nodes have not pushed yet still arrive later).
   */
  resetKey(namespace: string, key: string, windowSizes: readonly number[], nowMs: number): Promise<void>
  /** Drops stored windows that no rate can use any more at `nowMs`. */
  purge(namespace: string, windowSizes: readonly number[], nowMs: number): Promise<void>
  /** Releases connections the strategy opened itself (never a client the user passed in). */
  close(): Promise<void>
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
    typeof s.getWindow === 'function' &&
    typeof s.resetKey === 'function' &&
    typeof s.purge === 'function' &&
    typeof s.close === 'function'
  )
}

/** How long a stored window must live: its own span, the next window's, and a grace period. */
export function windowExpiresAtMs(windowStart: number, windowSize: number, graceMs: number): number {
  return (windowStart + 2 * windowSize) * 1000 + graceMs
}
