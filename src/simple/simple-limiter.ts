import { type Clock, cachedClock } from '../core/clock.js'
import { ConfigError } from '../core/errors.js'
import type { Decision, Limiter, WindowCounts } from '../core/limiter.js'
import type { OnStoreError } from '../core/options.js'
import { RateLimiting } from '../core/rate-limiting.js'
import { isStrategy, type Strategy } from '../core/strategy.js'
import { previousWeight } from '../core/window.js'
import { formatWindowTime, WindowStats } from './window-stats.js'

/** Options shared by `perSecond`, `perNSecond`, `perMinute` and `perNMinute`. */
export interface SimpleLimiterOptions {
  /**
   * A central store that shares the counts between processes (any engine strategy, such as
   * `new MemoryStrategy()`, a Redis or a memcached strategy). The same as setting
   * `limiter.store` afterwards.
   * @default undefined (local memory of this process)
   */
  readonly store?: Strategy
  /**
   * The namespace of the counts in the store: limiters with the same store and name share
   * their counts, so give every limiter of a fleet the same name and different limiters
   * different names.
   * @default `simple-<limit>-per-<window seconds>s`, such as "simple-100-per-60s"
   */
  readonly name?: string
  /**
   * Whether a denied call still counts. The Go limiter does not count them, and neither do we
   * by default, so a client over the limit gets through again as its rate falls.
   * @default false
   */
  readonly countDenied?: boolean
  /** Returns the time in epoch ms; tests pass a fake clock. @default cachedClock */
  readonly clock?: Clock
  /**
   * With a store: what a call decides when the store fails or times out. "local" decides on
   * this process's counts, "allow" lets the call through, "deny" refuses it.
   * @default "local"
   */
  readonly onStoreError?: OnStoreError
  /** With a store: the longest wait for one store call, ms. @default 1000 */
  readonly storeTimeoutMs?: number
  /** Most keys held in local memory before some are evicted (CLOCK, an approximation of least recently used). @default 1_000_000 */
  readonly maxKeys?: number
  /** Called with every store failure and with errors closing a replaced store (the library never prints). */
  readonly onError?: (error: Error) => void
}

interface Engine {
  readonly rl: RateLimiting
  readonly limiter: Limiter
  readonly store: Strategy | undefined
}

function invalid(message: string): ConfigError {
  return new ConfigError('INVALID_OPTION', message)
}

function show(value: unknown): string {
  return typeof value === 'string' ? JSON.stringify(value) : typeof value === 'object' && value !== null ? 'an object' : String(value)
}

/**
 * A sliding-window limiter of `limit` calls per window, the API of the Go limiter
 * (`monmohan/rate-limiting`) over this library's engine. Made by {@link perSecond},
 * {@link perNSecond}, {@link perMinute} and {@link perNMinute}.
 *
 * - Local memory by default: `allow()` answers a boolean synchronously.
 * - With a store (`limiter.store = strategy`): every call is one atomic round trip that counts
 *   the call and reads the fleet's totals back, and `allow()` answers a Promise. Concurrent
 *   callers are ordered by the store, so they cannot all take the last slot.
 *   `await limiter.allow(key)` works in both modes.
 *
 * Exactly `limit` calls are allowed per window (a call is allowed iff the sliding count before
 * it, plus one, is at most `limit`); windows are keyed by their absolute start; counts live for
 * two windows whatever the window size.
 *
 * @example
 * const limiter = perMinute(100)
 * if (!limiter.allow('user-1')) console.log('slow down')
 */
export class SimpleLimiter {
  /** Calls allowed per window. */
  readonly limit: number
  /** Window size, ms (a whole number of seconds). */
  readonly windowMs: number
  /** The namespace of the counts in a store. */
  readonly name: string
  /** Whether denied calls count. */
  readonly countDenied: boolean
  private readonly windowSec: number
  private readonly options: SimpleLimiterOptions
  private readonly clock: Clock
  private nowMs = 0
  private engine: Engine
  private generation = 0

  /** Prefer the factories ({@link perMinute}, ...); `windowSec` is the window size in seconds. */
  constructor(limit: number, windowSec: number, options: SimpleLimiterOptions = {}) {
    if (typeof options !== 'object' || options === null) throw invalid(`options must be an object, got ${show(options)}`)
    if (typeof limit !== 'number' || !Number.isSafeInteger(limit) || limit < 1)
      throw invalid(`limit must be a positive whole number of calls per window, got ${show(limit)}`)
    if (typeof windowSec !== 'number' || !Number.isSafeInteger(windowSec) || windowSec < 1)
      throw invalid(`window must be a positive whole number of seconds, got ${show(windowSec)}`)
    const { name = `simple-${limit}-per-${windowSec}s`, countDenied = false } = options
    if (typeof name !== 'string' || name.length === 0 || name.includes('|'))
      throw invalid(`name must be a non-empty string without "|", got ${show(name)}`)
    if (typeof countDenied !== 'boolean') throw invalid(`countDenied must be a boolean, got ${show(countDenied)}`)
    const userClock = options.clock ?? cachedClock
    if (typeof userClock !== 'function') throw invalid(`clock must be a function returning epoch ms, got ${show(userClock)}`)
    this.limit = limit
    this.windowSec = windowSec
    this.windowMs = windowSec * 1000
    this.name = name
    this.countDenied = countDenied
    this.options = options
    // The engine reads its clock once, synchronously, when a hit starts: keeping that reading
    // lets the stats describe exactly the instant the decision used.
    this.clock = () => {
      this.nowMs = userClock()
      return this.nowMs
    }
    this.engine = this.build(options.store)
  }

  /**
   * The central store, or `undefined` for local memory. Setting it starts counting afresh in
   * the new store (the counts of the old one are not carried over) and closes the old engine
   * in the background; errors of that close go to `onError`.
   */
  get store(): Strategy | undefined {
    return this.engine.store
  }

  set store(store: Strategy | undefined | null) {
    const old = this.engine
    this.engine = this.build(store ?? undefined)
    old.rl.close().catch((err: unknown) => this.options.onError?.(err instanceof Error ? err : new Error(String(err))))
  }

  /**
   * Decides one call for `key` and counts it when allowed (or always, with `countDenied`).
   * A boolean in local memory; a Promise of one with a store.
   */
  allow(key: string): boolean | Promise<boolean> {
    const engine = this.engine
    if (engine.store === undefined) {
      // one lookup and a little arithmetic: the local hot path allocates nothing
      return engine.limiter.allow(key) as boolean
    }
    return (engine.limiter.hit(key) as Promise<Decision>).then(isAllowed)
  }

  /**
   * Like {@link allow}, and returns what the decision was based on (see {@link WindowStats});
   * `JSON.stringify` of it prints the Go limiter's stats.
   */
  allowWithStats(key: string): WindowStats | Promise<WindowStats> {
    const engine = this.engine
    const decision = engine.limiter.hit(key)
    const nowMs = this.nowMs
    if (decision instanceof Promise) return decision.then((d) => this.stats(engine, key, d, nowMs))
    return this.stats(engine, key, decision, nowMs)
  }

  /** Forgets `key`'s counts: here, and in the store for the whole fleet when there is one. */
  reset(key: string): Promise<void> {
    return this.engine.limiter.reset(key)
  }

  /** Releases the engine (with a store: pushes what is not pushed yet). */
  close(): Promise<void> {
    return this.engine.rl.close()
  }

  private build(store: Strategy | undefined): Engine {
    if (store !== undefined && !isStrategy(store))
      throw invalid(`store must be an engine strategy (such as new MemoryStrategy()) or undefined for local memory, got ${show(store)}`)
    const o = this.options
    const rl = RateLimiting.newInstance(`simple:${this.name}#${++this.generation}`)
    rl.new({
      namespace: this.name,
      windowSizes: [this.windowSec],
      clock: this.clock,
      ...(store === undefined ? { syncRate: -1 } : { syncRate: 0, strategy: store }),
      ...(o.onStoreError === undefined ? {} : { onStoreError: o.onStoreError }),
      ...(o.storeTimeoutMs === undefined ? {} : { storeTimeoutMs: o.storeTimeoutMs }),
      ...(o.maxKeys === undefined ? {} : { maxKeys: o.maxKeys }),
      ...(o.onError === undefined ? {} : { onError: o.onError }),
    })
    const limiter = rl.limiter({
      namespace: this.name,
      limits: [{ limit: this.limit, window: this.windowSec }],
      countDenied: this.countDenied,
    })
    return {
      rl,
      limiter,
      store,
    }
  }

  private stats(engine: Engine, key: string, d: Decision, nowMs: number): WindowStats {
    const windowMs = this.windowMs
    const weight = previousWeight(nowMs, windowMs)
    const previous = (engine.limiter.counts(key, nowMs)[0] as WindowCounts).previous
    const previousUse = previous * weight
    // the decision's rate includes this call when it was counted; the stats describe the state before it
    const counted = d.allowed || this.countDenied
    const rolling = counted ? d.rate - 1 : d.rate
    const index = Math.floor(nowMs / windowMs)
    return new WindowStats({
      formattedWindowTime: formatWindowTime(nowMs),
      currentWindowIndex: index,
      currentCounter: Math.max(0, Math.round(rolling - previousUse)),
      previousWindowIndex: index - 1,
      previousWindowUsedPercent: weight,
      previousWindowUseCount: previousUse,
      rollingCounter: rolling,
      allow: d.allowed,
      retryAfterMs: d.retryAfterMs,
    })
  }
}

function isAllowed(d: Decision): boolean {
  return d.allowed
}

function checkRange(fn: string, what: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1 || value > 30)
    throw invalid(`${fn}: ${what} must be a whole number from 1 to 30, got ${show(value)}`)
  return value
}

/**
 * A limiter of `limit` calls per second (a sliding window of 1 s).
 *
 * @example
 * const limiter = perSecond(10)
 * limiter.allow('client-1') // true
 */
export function perSecond(limit: number, options?: SimpleLimiterOptions): SimpleLimiter {
  return new SimpleLimiter(limit, 1, options)
}

/**
 * A limiter of `limit` calls per `seconds` seconds, with 1 <= seconds <= 30 (a
 * {@link ConfigError} names a value outside).
 *
 * @example
 * const limiter = perNSecond(50, 15) // 50 calls per 15 s
 */
export function perNSecond(limit: number, seconds: number, options?: SimpleLimiterOptions): SimpleLimiter {
  return new SimpleLimiter(limit, checkRange('perNSecond', 'seconds', seconds), options)
}

/**
 * A limiter of `limit` calls per minute.
 *
 * @example
 * const limiter = perMinute(10_000)
 * limiter.store = new MemoryStrategy() // or a memcached or Redis strategy shared by the fleet
 * const allowed = await limiter.allow('client-1')
 */
export function perMinute(limit: number, options?: SimpleLimiterOptions): SimpleLimiter {
  return new SimpleLimiter(limit, 60, options)
}

/**
 * A limiter of `limit` calls per `minutes` minutes, with 1 <= minutes <= 30 (a
 * {@link ConfigError} names a value outside).
 *
 * @example
 * const limiter = perNMinute(1000, 15) // 1000 calls per 15 minutes
 */
export function perNMinute(limit: number, minutes: number, options?: SimpleLimiterOptions): SimpleLimiter {
  return new SimpleLimiter(limit, checkRange('perNMinute', 'minutes', minutes) * 60, options)
}
