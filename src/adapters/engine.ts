/**
 * How an adapter reaches the engine (a namespace it defines itself, or one the user defined),
 * and the engine behind the store adapters: one hit in, an integer count and a reset time out,
 * through the engine's public API (`rl.new`, `rl.limiter`, `limiter.refund`, `rl.sync`).
 */
import { ConfigError } from '../core/errors.js'
import type { Decision, Limiter } from '../core/limiter.js'
import type { OnStoreError } from '../core/options.js'
import { RateLimiting } from '../core/rate-limiting.js'
import { isStrategy, type Strategy } from '../core/strategy.js'
import type { Clock } from '../core/clock.js'
import { chain, optionError, withWindowOption } from './common.js'

/**
 * How an adapter reaches the engine. Either give `rateLimiting` and `namespace` (a namespace you
 * defined with `rl.new()`, in any sync mode, with any strategy), or leave `rateLimiting` unset
 * and the adapter defines its own namespaces from the other options.
 */
export interface EngineOptions {
  /** An instance whose namespace `namespace` the adapter uses as it is. */
  readonly rateLimiting?: RateLimiting
  /**
   * With `rateLimiting`: the name of your namespace. Without: the name (or, for the stores, the
   * prefix of the names) of the namespaces the adapter defines; processes that share a store
   * share the counts of equal names. Our middleware's default is named after its limits, so two
   * middlewares with equal limits on one strategy share their counts: give each its own (a
   * process warning says so when two of one process do).
   */
  readonly namespace?: string
  /** A central store shared by the fleet (any engine strategy). @default undefined (this process only) */
  readonly strategy?: Strategy
  /**
   * Seconds between syncs with `strategy`: 0 applies every hit to the store in one round trip
   * (exact fleet-wide limits), > 0 decides locally and syncs periodically (no I/O per hit).
   * @default 0 with a strategy, -1 (local) without
   */
  readonly syncRate?: number
  /** Returns the time in epoch ms; tests pass a fake clock. @default cachedClock */
  readonly clock?: Clock
  /**
   * Synchronous mode: what a hit decides when the store fails or times out: "local" on this
   * process's counts, "allow" lets it through, "deny" refuses it. Unset, our middleware decides
   * on local counts ("local"), and the stores for express-rate-limit and @fastify/rate-limit hand
   * the driver's error to the framework, whose `passOnStoreError` / `skipOnError` decide (by
   * default a 500). @default "local" (middleware), the framework's option (stores)
   */
  readonly onStoreError?: OnStoreError
  /** Longest wait for one store call, ms. @default 1000 */
  readonly storeTimeoutMs?: number
  /** Most key-windows held in local memory. @default 1_000_000 */
  readonly maxKeys?: number
  /** Called with every store failure (the library never prints). */
  readonly onError?: (error: Error) => void
}

const OWN_NAMESPACE_OPTIONS = ['strategy', 'syncRate', 'clock', 'onStoreError', 'storeTimeoutMs', 'maxKeys', 'onError'] as const

function isRateLimiting(value: unknown): value is RateLimiting {
  if (value instanceof RateLimiting) return true
  const v = value as Record<string, unknown> | null
  return typeof v === 'object' && v !== null && typeof v.limiter === 'function' && typeof v.stats === 'function'
}

/** Checks {@link EngineOptions} once; returns the user's instance or undefined (the adapter owns one). */
export function checkEngineOptions(options: EngineOptions, who: string): RateLimiting | undefined {
  const { rateLimiting, namespace, strategy } = options
  if (namespace !== undefined && (typeof namespace !== 'string' || namespace.length === 0 || namespace.includes('|')))
    throw optionError(who, 'namespace', 'a non-empty string without "|"', namespace)
  if (rateLimiting !== undefined) {
    if (!isRateLimiting(rateLimiting)) throw optionError(who, 'rateLimiting', 'a RateLimiting instance', rateLimiting)
    if (namespace === undefined)
      throw new ConfigError('INVALID_OPTION', `${who}: rateLimiting needs namespace, the name of a namespace defined with rl.new()`)
    for (const name of OWN_NAMESPACE_OPTIONS) {
      if (options[name] !== undefined)
        throw new ConfigError(
          'INVALID_OPTION',
          `${who}: ${name} cannot be combined with rateLimiting; set it on namespace "${namespace}" when you define it`,
        )
    }
    return rateLimiting
  }
  if (strategy !== undefined && !isStrategy(strategy))
    throw optionError(who, 'strategy', 'an engine strategy (such as new MemoryStrategy())', strategy)
  return undefined
}

/** Defines a namespace of the adapter's own from {@link EngineOptions}. */
export function defineOwn(rl: RateLimiting, name: string, windowSizes: readonly number[], options: EngineOptions): void {
  const { strategy } = options
  const syncRate = options.syncRate ?? (strategy === undefined ? -1 : 0)
  rl.new({
    namespace: name,
    windowSizes,
    syncRate,
    ...(strategy === undefined ? {} : { strategy }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(options.onStoreError === undefined ? {} : { onStoreError: options.onStoreError }),
    ...(options.storeTimeoutMs === undefined ? {} : { storeTimeoutMs: options.storeTimeoutMs }),
    ...(options.maxKeys === undefined ? {} : { maxKeys: options.maxKeys }),
    ...(options.onError === undefined ? {} : { onError: options.onError }),
  })
}

/** A hit as a store adapter reports it: an integer count and the ms until the reset. */
export interface HitCount {
  /**
   * `ceil(sliding rate)` (at least 1 after a hit): over the limit iff `hits > limit`. When the
   * store failed and `onStoreError` decided: for "allow" 1 after a hit (0 for a read), for
   * "deny" `limit + 1`.
   */
  readonly hits: number
  /**
   * Ms until the end of the current window, or when `hits > limit` until a new hit would be
   * allowed: the value of `t` in the IETF headers and of Retry-After.
   */
  readonly resetMs: number
  /** Whether `resetMs` is the time to the end of the current window (not an exact wait). */
  readonly atWindowEnd: boolean
}

// A limit no count reaches: the framework compares with its own limit (a function of the request)
const UNKNOWN_LIMIT = Number.MAX_SAFE_INTEGER - 1

/**
 * The limit the engine decides with. A limit of 0 (express-rate-limit and @fastify/rate-limit
 * then refuse every request) or a function of the request is the framework's to apply: the
 * engine only counts, under a limit no count reaches.
 */
function engineLimit(limit: number | undefined): number {
  return limit !== undefined && limit > 0 && Number.isFinite(limit) ? limit : UNKNOWN_LIMIT
}

/** The hits and reset of one decision, as the frameworks' store contracts want them. */
function toCount(d: Decision, limit: number | undefined, min: number, forwardErrors: boolean): HitCount {
  if (d.storeError !== undefined) {
    // the framework's own option decides (passOnStoreError, skipOnError), on the driver's error
    // as with its own stores; onError has had the StoreError
    if (forwardErrors) throw d.storeError.cause instanceof Error ? d.storeError.cause : d.storeError
    // onStoreError "allow" or "deny" decided: say so in the only words a store has, a count; an
    // allowed hit is the least a hit can be, 1 (express-rate-limit refuses a totalHits below 1)
    return { hits: d.allowed ? min : (limit ?? UNKNOWN_LIMIT) + 1, resetMs: d.resetMs, atWindowEnd: true }
  }
  // ceil: with an integer limit, hits > limit exactly when rate > limit, the engine's own rule
  const hits = Math.max(min, Math.ceil(d.rate))
  // a read of a key with nothing in its sliding window: no reset pending, as both of
  // @fastify/rate-limit's stores answer a key they do not hold
  if (hits === 0) return { hits, resetMs: 0, atWindowEnd: false }
  // over the limit the exact wait is what a client needs (Retry-After, and t with it)
  const over = limit !== undefined && hits > limit && d.retryAfterMs > 0 && Number.isFinite(d.retryAfterMs)
  return over ? { hits, resetMs: d.retryAfterMs, atWindowEnd: false } : { hits, resetMs: d.resetMs, atWindowEnd: true }
}

/** One window size and limit of a store adapter: counts hits, reads them, takes them back. */
export class WindowCounter {
  readonly windowSec: number
  readonly limit: number | undefined
  private limiter: Limiter
  private readonly forwardErrors: boolean

  constructor(rl: RateLimiting, namespace: string, windowSec: number, limit: number | undefined, forwardErrors: boolean) {
    this.windowSec = windowSec
    this.limit = limit
    this.forwardErrors = forwardErrors
    this.limiter = rl.limiter({ namespace, limits: [{ limit: engineLimit(limit), window: windowSec }] })
  }

  /** Moves the counter to another engine (after resetAll), keeping its identity for the adapters that hold it. */
  rebind(rl: RateLimiting, namespace: string): void {
    this.limiter = rl.limiter({ namespace, limits: [{ limit: engineLimit(this.limit), window: this.windowSec }] })
  }

  /** Counts one hit for `key` (blocked or not, as the frameworks' own stores do). */
  hit(key: string): HitCount | Promise<HitCount> {
    return chain(this.limiter.hit(key, 1), (d) => toCount(d, this.limit, 1, this.forwardErrors))
  }

  /** The count of `key` without a hit (a store round trip in synchronous mode). */
  peek(key: string): HitCount | Promise<HitCount> {
    return chain(this.limiter.peek(key), (d) => toCount(d, this.limit, 0, this.forwardErrors))
  }

  /** Resets `key` in every window of the counter's namespace (fleet-wide with a strategy). */
  reset(key: string): Promise<void> {
    return this.limiter.reset(key)
  }

  /**
   * Takes one hit back with `limiter.refund`: from this process's hits of the current window,
   * never below zero, pushed to the store like a hit (resolved once stored in synchronous mode).
   */
  takeBack(key: string): Promise<void> {
    return this.limiter.refund(key, 1)
  }
}

/**
 * The engine behind a store adapter (express-rate-limit, @fastify/rate-limit): one namespace
 * per window size, defined on first use, or the user's namespace; one limiter per window and limit.
 */
export class StoreEngine {
  /** The base name of the namespaces. */
  readonly name: string
  private readonly who: string
  private readonly options: EngineOptions
  private readonly user: RateLimiting | undefined
  private rl: RateLimiting
  /** Namespace name of each window size (seconds) used so far. */
  private readonly namespaces = new Map<number, string>()
  private readonly counters = new Map<string, WindowCounter>()

  constructor(options: EngineOptions, who: string, defaultName: string) {
    if (typeof options !== 'object' || options === null) throw optionError(who, 'options', 'an object', options)
    this.who = who
    this.options = options
    this.user = checkEngineOptions(options, who)
    this.name = options.namespace ?? defaultName
    this.rl = this.user ?? RateLimiting.newInstance(who)
  }

  /**
   * Whether the engine's clock is the wall clock (the default clock of the adapter's own
   * namespaces): its window ends are then instants a client can be told.
   */
  get onWallClock(): boolean {
    return this.user === undefined && this.options.clock === undefined
  }

  /**
   * Whether a store failure goes to the framework (its passOnStoreError / skipOnError decide):
   * when `onStoreError` is not set on the adapter's own namespaces.
   */
  private get forwardErrors(): boolean {
    return this.user === undefined && this.options.onStoreError === undefined
  }

  /** Whether the counts stay in this process (no strategy). */
  get isLocal(): boolean {
    if (this.user !== undefined) return this.user.stats(this.name).mode === 'local'
    return this.options.strategy === undefined || (this.options.syncRate ?? 0) < 0
  }

  /**
   * The counter of windows of `windowSec` seconds (from the framework's `option`, `windowMs` ms)
   * for `limit` hits (undefined: the framework's limit is a function of the request). Defines
   * the namespace on first use; a window the engine refuses is a ConfigError naming `option`.
   */
  counter(windowSec: number, windowMs: number, limit: number | undefined, option: string): WindowCounter {
    const id = `${windowSec}|${limit ?? ''}`
    const known = this.counters.get(id)
    if (known !== undefined) return known
    const made = withWindowOption(
      this.who,
      option,
      windowMs,
      () => new WindowCounter(this.rl, this.namespaceFor(windowSec), windowSec, limit, this.forwardErrors),
    )
    this.counters.set(id, made)
    return made
  }

  private namespaceFor(windowSec: number): string {
    const known = this.namespaces.get(windowSec)
    if (known !== undefined) return known
    let name = this.name
    if (this.user === undefined) {
      name = `${this.name}-${windowSec}s`
      // unset onStoreError: the engine flags the failed hit ("deny") and the counter hands the
      // error to the framework
      defineOwn(this.rl, name, [windowSec], { ...this.options, onStoreError: this.options.onStoreError ?? 'deny' })
    }
    this.namespaces.set(windowSec, name)
    return name
  }

  /** Resets `key` in every window the adapter used (fleet-wide with a strategy). */
  async resetKey(key: string): Promise<void> {
    const done = new Set<string>()
    for (const counter of this.counters.values()) {
      const namespace = this.namespaces.get(counter.windowSec) as string
      if (done.has(namespace)) continue
      done.add(namespace)
      await counter.reset(key)
    }
  }

  /**
   * Resets every key. In this process only (no strategy) the adapter starts a new engine; with
   * a strategy every key the store holds for the adapter's namespaces is reset, one by one,
   * fleet-wide. A namespace of your own (`rateLimiting`) is yours to reset: a ConfigError.
   */
  async resetAll(): Promise<void> {
    if (this.user !== undefined)
      throw new ConfigError(
        'INVALID_OPTION',
        `${this.who}: resetAll works on the store's own engine; with rateLimiting, reset keys of namespace "${this.name}" with resetKey`,
      )
    const strategy = this.options.strategy
    if (strategy === undefined || (this.options.syncRate ?? 0) < 0) {
      // counts only here: a new engine has none, and the counters move to it
      const old = this.rl
      this.rl = RateLimiting.newInstance(this.who)
      this.namespaces.clear()
      for (const counter of this.counters.values()) counter.rebind(this.rl, this.namespaceFor(counter.windowSec))
      await old.close()
      return
    }
    const nowMs = (this.options.clock ?? Date.now)()
    const done = new Set<string>()
    for (const counter of this.counters.values()) {
      const namespace = this.namespaces.get(counter.windowSec) as string
      if (done.has(namespace)) continue
      done.add(namespace)
      // periodic mode: push what only this process knows, so the store lists every key
      await this.rl.sync(namespace)
      const keys = new Set<string>()
      for await (const row of strategy.getCounters(namespace, [Math.round(counter.windowSec * 1000)], nowMs)) keys.add(row.key)
      for (const key of keys) await counter.reset(key)
    }
  }

  /** Stops the adapter's own engine (flushing unsynced hits); never closes a user's instance. */
  async close(): Promise<void> {
    if (this.user === undefined) await this.rl.close()
    this.namespaces.clear()
    this.counters.clear()
  }
}
