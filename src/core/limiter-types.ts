import type { StoreError } from './errors.js'
import type { DecisionReason } from './key-lists.js'

// The limiter's options and answers: what `rl.limiter()` takes and what `hit` returns.

/** One limit: at most `limit` hits per sliding `window` seconds. */
export interface LimitSpec {
  /**
   * Hits allowed per window: a positive number, or a function of the key answering one (plans
   * and tiers: `(key) => (pro.has(key) ? 1000 : 100)`), called on every decision, so keep it
   * cheap and synchronous. Decisions and headers show the limit applied.
   */
  readonly limit: number | ((key: string) => number)
  /** Window size in seconds (fractions down to 0.001); must be one of the namespace's `windowSizes`. */
  readonly window: number
  /** Policy name in headers. @default `${limit}-in-${window}s` (`per-key-in-${window}s` for a function) */
  readonly name?: string
  /**
   * Once this limit denies a key, every hit of the key is denied until `blockMs` after that
   * denial, whatever the counts say (rate-limiter-flexible's `blockDuration`): brute-force
   * protection. In a synced namespace the block reaches the whole fleet through the store
   * (docs/ARCHITECTURE.md, "Blocks"). A blocked hit is not counted. @default no block
   */
  readonly blockMs?: number
}

/** Options of one `hit()` or `peek()`. */
export interface HitOptions {
  /**
   * This call's limit instead of the limiter's (one limit only; with several, give each a
   * function of the key): a positive number, for a limit known per request (a plan in a token).
   */
  readonly limit?: number
}

/** Options of `rl.limiter()`. */
export interface LimiterOptions {
  /** The namespace whose counters the limiter uses. @default "default" */
  readonly namespace?: string
  /** Checked together; the most restrictive decides. */
  readonly limits: readonly LimitSpec[]
  /** Whether a denied hit still counts (Kong's penalty). @default true */
  readonly countDenied?: boolean
  /** `acquire()`/`schedule()` calls that may wait on one key in this process (then `QUEUE_FULL`). @default 10000 */
  readonly maxQueue?: number
  /**
   * Keys always denied (`reason: 'denylist'`, nothing counted, no store call): exact keys, IP
   * addresses and CIDR ranges (`10.0.0.0/8`, `2001:db8::/32`). Wins over `allowList`. @default []
   */
  readonly denyList?: readonly string[]
  /** Keys never limited nor counted (`reason: 'allowlist'`, no store call), in the form of `denyList`. @default [] */
  readonly allowList?: readonly string[]
}

/** What one of a limiter's windows holds for a key (this process's view: its hits and the others' as last synced). */
export interface WindowCounts {
  /** The limit's name. */
  readonly name: string
  /** Window size, seconds. */
  readonly window: number
  /** Hits in the current window. */
  readonly current: number
  /** Hits in the previous window (it weighs on the rate as it slides out). */
  readonly previous: number
  /** Ms until the current window ends. */
  readonly resetMs: number
}

/** The state of one limit after a decision. */
export interface LimitState {
  readonly name: string
  readonly limit: number
  /** Window size, seconds. */
  readonly window: number
  /** Whole hits left: `floor(max(0, limit - rate))`. */
  readonly remaining: number
  /** Sliding rate after the hit (before it, when it was not counted). */
  readonly rate: number
  /** Ms until the current window of this limit ends. */
  readonly resetMs: number
  /** Ms until a hit of the same cost would be allowed by this limit; 0 when it is now. */
  readonly retryAfterMs: number
}

/**
 * The answer to one hit. Being denied is a normal answer, not an error. The fields describe the
 * limit that decided: the denying limit with the longest wait, or when allowed the limit with
 * the fewest hits left (the larger window on a tie).
 */
export interface Decision extends LimitState {
  readonly allowed: boolean
  /** Every limit's state, when the limiter has more than one. */
  readonly policies?: readonly LimitState[]
  /** Set when the store failed and `onStoreError` decided the outcome. */
  readonly storeError?: StoreError
  /**
   * True when the key is blocked: denied by a block (`reason: 'blocked'`), or denied by a limit
   * with `blockMs` that has just blocked it. `retryAfterMs` is then when the block ends (or
   * later, when the counts still deny then).
   */
  readonly blocked?: boolean
  /**
   * What decided: `'limit'` (the limits, allowed or not), `'denylist'` / `'allowlist'` (a list;
   * nothing was counted), `'store-error'` (the store failed and `onStoreError` decided),
   * `'blocked'` (the key is blocked: `limiter.block()` or a limit's `blockMs`; nothing counted).
   */
  readonly reason: DecisionReason
}
