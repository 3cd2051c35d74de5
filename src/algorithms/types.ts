import type { ScriptClient, SupportedRedisClient } from '../strategies/redis/scripts.js'
import type { Clock } from '../core/clock.js'
import type { KeyOptions } from './keys.js'

/**
 * The answer of an algorithm to one request. Being denied is a normal answer, not an error.
 *
 * @example
 * const r = await algorithm.check('u1')
 * if (!r.allowed) console.log(`retry in ${r.retryAfterMs} ms`)
 */
export interface AlgorithmResult {
  /** Whether the request is admitted. */
  readonly allowed: boolean
  /**
   * Requests counted in the window after this decision. Fixed window: the bucket's counter
   * (denied requests count, as in the seed). Sliding log: admitted requests in the last
   * window. Sliding-window counter: the weighted estimate, which may be fractional.
   */
  readonly count: number
  /** The most requests the window admits. */
  readonly limit: number
  /** Whole requests still admitted in this window: `max(0, floor(limit - count))`. */
  readonly remaining: number
  /** Ms until the whole limit is available again (end of the bucket, or the newest logged hit leaving the log). */
  readonly resetMs: number
  /** Ms until a request of the same cost would be admitted; 0 when allowed, `Infinity` when it never can be (cost > limit). */
  readonly retryAfterMs: number
}

/** A value, or a promise of it: memory algorithms answer synchronously, Redis ones asynchronously. */
export type MaybePromise<T> = T | Promise<T>

/**
 * What every algorithm offers: decide and count (`check`), read without counting (`peek`),
 * forget a user (`reset`).
 *
 * @example
 * const algorithm: RateLimitAlgorithm = new MemorySlidingLog({ limit: 100, windowMs: 60_000 })
 * const result = await algorithm.check('u1', 1)
 */
export interface RateLimitAlgorithm {
  /** Short name, such as "fixed-window" or "sliding-log". */
  readonly name: string
  /** Where the counters live, such as "memory" or "redis". */
  readonly store: string
  /** The most requests per window. */
  readonly limit: number
  /** Window length in ms. */
  readonly windowMs: number
  /**
   * Decides a request of `cost` (a positive integer, default 1) for `userId` and counts it. A
   * cost above the limit is denied and not counted (`retryAfterMs` Infinity). `userId` must be
   * well-formed Unicode: a lone UTF-16 surrogate is a TypeError (`INVALID_KEY`) on every store.
   */
  check(userId: string, cost?: number): MaybePromise<AlgorithmResult>
  /** The answer a request of cost 1 would get now, without counting anything. */
  peek(userId: string): MaybePromise<AlgorithmResult>
  /** Forgets every count of `userId`. */
  reset(userId: string): MaybePromise<void>
  /** The same algorithm and counters with another limit (used when a config reload changes only the limit). */
  withLimit(limit: number): RateLimitAlgorithm
}

/** Options shared by every algorithm. */
export interface AlgorithmOptions {
  /** Requests admitted per window: a positive integer. */
  readonly limit: number
  /** Window length in ms: a positive integer (the seed's `window-size` is seconds: multiply by 1000). */
  readonly windowMs: number
  /** Returns epoch ms. @default Date.now */
  readonly clock?: Clock
}

/**
 * An ioredis-shaped client: scripts by SHA, with `eval` as the fallback when the server answers
 * NOSCRIPT (the Redis strategy's scripts run the same way). An ioredis or iovalkey `Redis` or
 * `Cluster` fits; the algorithms also take the other clients of {@link SupportedRedisClient}.
 */
export type RedisScriptClient = ScriptClient

/**
 * Options of the Redis algorithms. Keys are the seed's (`<prefix>:<userId>` for the sliding log,
 * `<prefix>:<userId>:<window>` for the fixed window), or `<prefix>@<scope>:log:<userId>` and
 * `<prefix>@<scope>:fixed:<userId>:<window>` with a `scope` (see {@link KeyOptions}).
 */
export interface RedisAlgorithmOptions extends AlgorithmOptions, KeyOptions {
  /**
   * An ioredis or iovalkey `Redis` or `Cluster` (or anything with `evalsha` and `eval`), a
   * node-redis client or cluster (redis 5 or 6, connected by you), or a `RedisAdapter`
   * (docs/STORES-redis.md, "Clients"). Never closed by the algorithm. On a single server's
   * client, the checks of one event-loop turn share a script call (src/algorithms/script-batch.ts).
   */
  readonly client: SupportedRedisClient
  /** Longest wait for one Redis call, ms; a slower call rejects with a STORE_TIMEOUT StoreError. @default 1000 */
  readonly timeoutMs?: number
  /**
   * Answers a request locally, without a Redis call, while a denial Redis made for the same user
   * still holds: on the fixed window until the window ends, every cost when denied requests
   * count (`countDenied`, the count is then above the limit) and otherwise a cost at least the
   * denied one; on the sliding log a request of cost 1 to a full log until its first entry leaves
   * (src/algorithms/denials.ts). A user who keeps trying while denied then costs this
   * process no round trip. Only a reset ends a denial sooner: one made through this algorithm (or
   * its `withLimit()` variants) forgets it at once, one made by another process is seen when the
   * remembered denial ends. Up to 100,000 denials are remembered. @default true
   */
  readonly rememberDenials?: boolean
}

/** Options of the memory algorithms. */
export interface MemoryAlgorithmOptions extends AlgorithmOptions {
  /** Most users held at once; when full, the user stored longest ago is forgotten first. @default 1_000_000 */
  readonly maxKeys?: number
}
