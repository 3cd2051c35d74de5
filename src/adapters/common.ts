/**
 * What the framework adapters share: how an adapter reaches the engine (a namespace it defines
 * itself, or one the user defined), how a store adapter turns one hit into an integer count and
 * a reset time, and the framework-free part of our own middleware (skip, key, cost, decision,
 * headers). Nothing here imports a framework.
 */
import { type Clock, cachedClock } from '../core/clock.js'
import { ConfigError, StoreError } from '../core/errors.js'
import { type HeaderMode, rateLimitHeaders } from '../core/headers.js'
import type { Decision, Limiter } from '../core/limiter.js'
import type { Namespace } from '../core/namespace.js'
import type { OnStoreError } from '../core/options.js'
import { RateLimiting } from '../core/rate-limiting.js'
import { isStrategy, type Strategy } from '../core/strategy.js'
import { retryAfterMs } from '../core/window.js'

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
   * share the counts of equal names.
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
  /** Synchronous mode: what a hit decides when the store fails or times out. @default "local" */
  readonly onStoreError?: OnStoreError
  /** Longest wait for one store call, ms. @default 1000 */
  readonly storeTimeoutMs?: number
  /** Most key-windows held in local memory. @default 1_000_000 */
  readonly maxKeys?: number
  /** Called with every store failure (the library never prints). */
  readonly onError?: (error: Error) => void
}

const OWN_NAMESPACE_OPTIONS = ['strategy', 'syncRate', 'clock', 'onStoreError', 'storeTimeoutMs', 'maxKeys', 'onError'] as const

function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value)
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'object' && value !== null) return 'an object'
  return String(value)
}

/** A ConfigError naming the option of `who` that was refused. */
export function optionError(who: string, option: string, expected: string, value: unknown): ConfigError {
  return new ConfigError('INVALID_OPTION', `${who}: ${option} must be ${expected}, got ${show(value)}`)
}

function isRateLimiting(value: unknown): value is RateLimiting {
  if (value instanceof RateLimiting) return true
  const v = value as Record<string, unknown> | null
  return typeof v === 'object' && v !== null && typeof v.namespace === 'function' && typeof v.limiter === 'function'
}

/** Checks {@link EngineOptions} once; returns the user's instance or undefined (the adapter owns one). */
function checkEngineOptions(options: EngineOptions, who: string): RateLimiting | undefined {
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

function defineOwn(rl: RateLimiting, name: string, windowSizes: readonly number[], options: EngineOptions): void {
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

/** Whole seconds of a window given in ms, or a ConfigError naming the option. */
export function windowSeconds(who: string, option: string, windowMs: unknown): number {
  if (typeof windowMs !== 'number' || !Number.isFinite(windowMs) || windowMs < 1000 || windowMs % 1000 !== 0)
    throw optionError(who, option, 'a whole number of seconds in ms (1000, 60_000, ...)', windowMs)
  return windowMs / 1000
}

/** A hit as a store adapter reports it: an integer count and the ms until the reset. */
export interface HitCount {
  /** `ceil(sliding rate)`, at least 1 after a hit: over the limit iff `hits > limit`. */
  readonly hits: number
  /**
   * Ms until the end of the current window, or when `hits > limit` until a new hit would be
   * allowed: the value of `t` in the IETF headers and of Retry-After.
   */
  readonly resetMs: number
  /**
   * The reset as epoch ms of the wall clock: the engine's time plus `resetMs` when the engine
   * runs on the default clock (the wall clock, cached per turn), else `Date.now() + resetMs`
   * (a fake clock's instants mean nothing to a client).
   */
  readonly resetAtMs: number
}

/**
 * The engine behind a store adapter (express-rate-limit, @fastify/rate-limit): one namespace
 * per window size, defined on first use, or the user's namespace.
 */
export class StoreEngine {
  /** The base name of the namespaces. */
  readonly name: string
  private readonly who: string
  private readonly options: EngineOptions
  private readonly user: RateLimiting | undefined
  private readonly rl: RateLimiting
  private readonly bySize = new Map<number, Namespace>()

  constructor(options: EngineOptions, who: string, defaultName: string) {
    if (typeof options !== 'object' || options === null) throw optionError(who, 'options', 'an object', options)
    this.who = who
    this.options = options
    this.user = checkEngineOptions(options, who)
    this.name = options.namespace ?? defaultName
    this.rl = this.user ?? RateLimiting.newInstance(who)
  }

  /** Whether the counts stay in this process (no strategy). */
  get isLocal(): boolean {
    if (this.user !== undefined) return this.rl.namespace(this.name).mode === 'local'
    return this.options.strategy === undefined || (this.options.syncRate ?? 0) < 0
  }

  /** The namespace that counts windows of `windowSec` seconds; a ConfigError if there can be none. */
  namespaceFor(windowSec: number): Namespace {
    const known = this.bySize.get(windowSec)
    if (known !== undefined) return known
    let ns: Namespace
    if (this.user !== undefined) {
      ns = this.user.namespace(this.name)
      if (!ns.windowSizes.includes(windowSec))
        throw new ConfigError(
          'INVALID_OPTION',
          `${this.who}: a window of ${windowSec} s is not one of namespace "${this.name}"'s windowSizes [${ns.windowSizes.join(', ')}]`,
        )
    } else {
      const name = `${this.name}-${windowSec}s`
      defineOwn(this.rl, name, [windowSec], this.options)
      ns = this.rl.namespace(name)
    }
    this.bySize.set(windowSec, ns)
    return ns
  }

  /**
   * Counts one hit (or `value` hits, negative to take hits back) for `key`. `limit`, when known,
   * makes `resetMs` the exact wait of a hit over the limit.
   */
  hit(ns: Namespace, windowSec: number, key: string, value: number, limit: number | undefined): HitCount | Promise<HitCount> {
    const rate = ns.increment(key, windowSec, value)
    if (typeof rate === 'number') return count(ns, windowSec, key, rate, limit)
    return rate.then((r) => count(ns, windowSec, key, r, limit))
  }

  /** The count of `key` without a hit (a store round trip in synchronous mode). */
  peek(ns: Namespace, windowSec: number, key: string, limit: number | undefined): HitCount | Promise<HitCount> {
    const rate = ns.slidingWindow(key, windowSec)
    if (typeof rate === 'number') return count(ns, windowSec, key, rate, limit, 0)
    return rate.then((r) => count(ns, windowSec, key, r, limit, 0))
  }

  /** Takes one hit back, never below zero in the current window. */
  takeBack(ns: Namespace, windowSec: number, key: string): void | Promise<void> {
    const nowMs = ns.clock()
    if (ns.table(windowSec).counts(key, nowMs).current < 1) return
    const rate = ns.increment(key, windowSec, -1)
    if (typeof rate !== 'number') return rate.then(() => undefined)
  }

  /** Resets `key` in every window the adapter used (fleet-wide with a strategy). */
  async resetKey(key: string): Promise<void> {
    const seen = new Set<Namespace>()
    for (const ns of this.bySize.values()) {
      if (seen.has(ns)) continue
      seen.add(ns)
      await ns.resetKey(key)
    }
  }

  /** Stops the adapter's own engine (flushing unsynced hits); never closes a user's instance. */
  async close(): Promise<void> {
    if (this.user === undefined) await this.rl.close()
    this.bySize.clear()
  }
}

function count(ns: Namespace, windowSec: number, key: string, rate: number, limit: number | undefined, min = 1): HitCount {
  const nowMs = ns.clock()
  const sizeMs = windowSec * 1000
  // ceil: with an integer limit, hits > limit exactly when rate > limit, the engine's own rule
  const hits = Math.max(min, Math.ceil(rate))
  let resetMs = sizeMs - (nowMs % sizeMs)
  if (limit !== undefined && hits > limit) {
    const { current, previous } = ns.table(windowSec).counts(key, nowMs)
    const wait = retryAfterMs(current, previous, nowMs, sizeMs, limit, 1)
    // over the limit the exact wait is what a client needs (Retry-After, and t with it)
    if (Number.isFinite(wait) && wait > 0) resetMs = wait
  }
  return { hits, resetMs, resetAtMs: ns.clock === cachedClock ? nowMs + resetMs : Date.now() + resetMs }
}

// ---------------------------------------------------------------------------------------------
// Our own middleware, framework-free part

/** One limit of a middleware: at most `limit` hits per sliding `windowMs`. */
export interface LimitOption {
  /** Hits allowed per window. */
  readonly limit: number
  /** Window size in ms, a whole number of seconds. */
  readonly windowMs: number
  /** Policy name in the draft-8 headers. @default express-rate-limit's, such as "100-in-1min" */
  readonly name?: string
}

/** Options of our middleware, whatever the framework; `Req` is what the callbacks receive. */
export interface MiddlewareOptions<Req> extends EngineOptions {
  /** Limits checked together; the most restrictive decides. Or use `limit` and `windowMs`. */
  readonly limits?: readonly LimitOption[]
  /** Shorthand for one limit: hits per `windowMs`. */
  readonly limit?: number
  /** Shorthand for one limit: the window in ms. @default 60_000 */
  readonly windowMs?: number
  /** Who is limited: an IP address, a user id, an API key. @default the client IP (Express, Fastify); required for Hono */
  readonly key?: (req: Req) => string | Promise<string>
  /** How much one request costs, a number or a function of the request. @default 1 */
  readonly cost?: number | ((req: Req) => number | Promise<number>)
  /** Requests for which this returns true are not limited and get no headers. */
  readonly skip?: (req: Req) => boolean | Promise<boolean>
  /** The header family, or false for none. @default "draft-8" */
  readonly headers?: HeaderMode | false
  /** Also send express-rate-limit's legacy `X-RateLimit-Limit/-Remaining/-Reset` (reset in epoch s). @default false */
  readonly legacyHeaders?: boolean
  /** Add the draft-8 `pk` parameter (a hash of the key), as express-rate-limit does. @default false */
  readonly partitionKey?: boolean
  /** Whether a denied request still counts (Kong's and express-rate-limit's behaviour). @default true */
  readonly countDenied?: boolean
}

/** The outcome of one request that was not skipped. */
export interface Outcome {
  readonly key: string
  readonly decision: Decision
  /** Response headers to set, allowed or not. */
  readonly headers: Readonly<Record<string, string>>
  /** 429 when over the limit, 503 when the store failed and `onStoreError` is "deny". */
  readonly status: number
}

const HEADER_MODES: readonly unknown[] = ['draft-6', 'draft-7', 'draft-8', 'draft-9', 'draft-10', 'kong']

/** The default body of a denied request (express-rate-limit's message). */
export const TOO_MANY_REQUESTS = 'Too many requests, please try again later.'
/** The default body when the store failed and `onStoreError` is "deny". */
export const LIMITER_UNAVAILABLE = 'Rate limiting is unavailable, please try again later.'

/** express-rate-limit's default policy name: `100-in-1min`, `5-in-30sec`, `1000-in-1day`. */
export function policyName(limit: number, windowMs: number): string {
  const seconds = windowMs / 1000
  const minutes = seconds / 60
  const hours = minutes / 60
  const days = hours / 24
  let duration: string
  if (seconds < 60) duration = `${seconds}sec`
  else if (minutes < 60) duration = `${minutes}min`
  else if (hours < 24) duration = `${hours}hr${hours > 1 ? 's' : ''}`
  else duration = `${days}day${days > 1 ? 's' : ''}`
  return `${limit}-in-${duration}`
}

/** Whether a callback answered a promise (or any thenable). */
export function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}

/** `next(value)`, after `value` settles when it is a promise: synchronous values stay synchronous. */
export function chain<T, U>(value: T | PromiseLike<T>, next: (v: T) => U | Promise<U>): U | Promise<U> {
  return isPromiseLike(value) ? Promise.resolve(value).then(next) : next(value)
}

/**
 * The framework-free part of our middleware: built once from the options (checked here, with
 * errors that name the option), then `run(req)` per request. Each step stays synchronous
 * unless a callback or the store answers a Promise, so a local limiter never waits a tick.
 */
export class MiddlewareCore<Req> {
  readonly limiter: Limiter
  private readonly ns: Namespace
  private readonly owned: RateLimiting | undefined
  private readonly key: (req: Req) => string | Promise<string>
  private readonly cost: number | ((req: Req) => number | Promise<number>)
  private readonly skip: ((req: Req) => boolean | Promise<boolean>) | undefined
  private readonly headerMode: HeaderMode | false
  private readonly legacyHeaders: boolean
  private readonly partitionKey: boolean

  constructor(options: MiddlewareOptions<Req>, who: string, defaultKey: ((req: Req) => string) | undefined) {
    if (typeof options !== 'object' || options === null) throw optionError(who, 'options', 'an object', options)
    const user = checkEngineOptions(options, who)
    const limits = resolveLimits(options, who)
    const {
      key = defaultKey,
      cost = 1,
      skip,
      headers = 'draft-8',
      legacyHeaders = false,
      partitionKey = false,
      countDenied = true,
    } = options
    if (typeof key !== 'function') throw optionError(who, 'key', 'a function of the request returning a string', key)
    if (typeof cost === 'number' ? !Number.isFinite(cost) || cost < 0 : typeof cost !== 'function')
      throw optionError(who, 'cost', 'a number >= 0 or a function of the request', cost)
    if (skip !== undefined && typeof skip !== 'function') throw optionError(who, 'skip', 'a function of the request', skip)
    if (headers !== false && !HEADER_MODES.includes(headers))
      throw optionError(who, 'headers', 'false or one of draft-6, draft-7, draft-8, draft-9, draft-10, kong', headers)
    if (typeof legacyHeaders !== 'boolean') throw optionError(who, 'legacyHeaders', 'a boolean', legacyHeaders)
    if (typeof partitionKey !== 'boolean') throw optionError(who, 'partitionKey', 'a boolean', partitionKey)
    if (typeof countDenied !== 'boolean') throw optionError(who, 'countDenied', 'a boolean', countDenied)
    const windowSizes = [...new Set(limits.map((l) => l.window))]
    let rl: RateLimiting
    let name: string
    if (user !== undefined) {
      rl = user
      name = options.namespace as string
    } else {
      rl = RateLimiting.newInstance(who)
      name = options.namespace ?? `${who}-${limits.map((l) => l.name).join('+')}`.replace(/\|/g, '_')
      defineOwn(rl, name, windowSizes, options)
      this.owned = rl
    }
    this.limiter = rl.limiter({ namespace: name, limits, countDenied })
    this.ns = rl.namespace(name)
    this.key = key
    this.cost = cost
    this.skip = skip
    this.headerMode = headers
    this.legacyHeaders = legacyHeaders
    this.partitionKey = partitionKey
  }

  /** Decides one request; `undefined` when `skip` said so. */
  run(req: Req): Outcome | undefined | Promise<Outcome | undefined> {
    const skip = this.skip
    if (skip === undefined) return this.withoutSkip(req)
    return chain(skip(req), (skipped) => (skipped === true ? undefined : this.withoutSkip(req)))
  }

  /** Stops the middleware's own engine; a no-op when it uses your `rateLimiting`. */
  async close(): Promise<void> {
    await this.owned?.close()
  }

  private withoutSkip(req: Req): Outcome | Promise<Outcome> {
    return chain(this.key(req), (key) => {
      if (typeof key !== 'string' || key.length === 0)
        throw new TypeError(`the rate-limit key must be a non-empty string, got ${show(key)}; pass a key function`)
      const cost = this.cost
      return chain(typeof cost === 'number' ? cost : cost(req), (c) => chain(this.limiter.hit(key, c), (d) => this.outcome(key, d)))
    })
  }

  private outcome(key: string, decision: Decision): Outcome {
    const headers =
      this.headerMode === false ? {} : rateLimitHeaders(decision, this.headerMode, this.partitionKey ? { partitionKey: key } : {})
    if (this.legacyHeaders) {
      headers['X-RateLimit-Limit'] = String(Math.floor(decision.limit))
      headers['X-RateLimit-Remaining'] = String(decision.remaining)
      headers['X-RateLimit-Reset'] = String(Math.ceil((this.ns.clock() + decision.resetMs) / 1000))
    }
    const status = decision.allowed ? 200 : decision.storeError instanceof StoreError ? 503 : 429
    return { key, decision, headers, status }
  }
}

function resolveLimits<Req>(options: MiddlewareOptions<Req>, who: string): { limit: number; window: number; name: string }[] {
  const { limits, limit, windowMs } = options
  let list: readonly LimitOption[]
  if (limits !== undefined) {
    if (limit !== undefined || windowMs !== undefined)
      throw new ConfigError('INVALID_OPTION', `${who}: give either limits or limit/windowMs, not both`)
    if (!Array.isArray(limits) || limits.length === 0) throw optionError(who, 'limits', 'a non-empty array of { limit, windowMs }', limits)
    list = limits
  } else {
    if (limit === undefined) throw new ConfigError('INVALID_OPTION', `${who}: limit (or limits) is required`)
    list = [{ limit, windowMs: windowMs ?? 60_000 }]
  }
  return list.map((l, i) => {
    const at = limits === undefined ? '' : `limits[${i}].`
    if (typeof l !== 'object' || l === null) throw optionError(who, `limits[${i}]`, 'an object { limit, windowMs }', l)
    if (typeof l.limit !== 'number' || !Number.isFinite(l.limit) || l.limit <= 0)
      throw optionError(who, `${at}limit`, 'a positive number', l.limit)
    const window = windowSeconds(who, `${at}windowMs`, l.windowMs)
    const name = l.name ?? policyName(l.limit, l.windowMs)
    if (typeof name !== 'string' || name.length === 0) throw optionError(who, `${at}name`, 'a non-empty string', name)
    return { limit: l.limit, window, name }
  })
}
