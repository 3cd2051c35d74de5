/**
 * ratelimiting/express: a store for express-rate-limit backed by the engine (a sliding window,
 * fleet-wide with a strategy), and our own Express middleware. Only types are imported from
 * express and express-rate-limit: both stay optional peer dependencies.
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express'
import type { ClientRateLimitInfo, Options as ExpressRateLimitOptions, IncrementResponse, Store } from 'express-rate-limit'
import { cachedClock } from '../core/clock.js'
import { ConfigError } from '../core/errors.js'
import { chain, isPromiseLike, LIMITER_UNAVAILABLE, TOO_MANY_REQUESTS, windowSizeOf } from './common.js'
import { type EngineOptions, type HitCount, StoreEngine, type WindowCounter } from './engine.js'
import { MiddlewareCore, type MiddlewareOptions, type Outcome } from './middleware.js'
import { settleOnEnd } from './refunds.js'

export type { EngineOptions } from './engine.js'
export { ipKey } from './ip-key.js'
export type { LimitOption, Outcome, RequestRefund } from './middleware.js'

const STORE = 'RateLimitingStore'

/** Options of {@link RateLimitingStore}; `namespace` prefixes its namespace names. @default namespace "express-rate-limit" */
export type RateLimitingStoreOptions = EngineOptions

/**
 * A store for express-rate-limit: an existing setup gets a sliding window (no burst of twice the
 * limit at a window boundary) and, with a `strategy`, one limit for the whole fleet, by changing
 * the `store` option. Every hit counts, blocked ones included (express-rate-limit's rule);
 * `totalHits` is the sliding count rounded up, so a request is blocked exactly when the sliding
 * count exceeds `limit`, and `resetTime` is the end of the window (or, over the limit, the
 * instant a request would be allowed again, which may be sooner or later).
 *
 * `windowMs` is any whole number of ms the engine can hold (1 ms and up); a window it refuses is
 * a ConfigError from `init`, which express-rate-limit logs once when the limiter is built. A store
 * failure (synchronous mode) goes to express-rate-limit as the driver's error when `onStoreError`
 * is unset, and its `passOnStoreError` decides (false by default: a 500); with `onStoreError`
 * ("local", "allow", "deny") the store decides instead. Use one store per `rateLimit()`
 * (express-rate-limit checks that) and give each a different `namespace` when they share a strategy.
 *
 * @example
 * app.use(rateLimit({ windowMs: 60_000, limit: 100, standardHeaders: 'draft-8', store: new RateLimitingStore() }))
 */
export class RateLimitingStore implements Store {
  /** express-rate-limit's double-count check reads it: the namespace prefix. */
  readonly prefix: string
  /** True when the counts stay in this process (no strategy). */
  readonly localKeys: boolean
  private readonly engine: StoreEngine
  private counter: WindowCounter | undefined
  private windowMs = 0
  private initError: Error | undefined
  // every allowed hit of a window resets at the window's end: one Date per window, not per hit
  private lastResetAtMs = Number.NaN
  private lastResetTime = new Date(0)

  constructor(options: RateLimitingStoreOptions = {}) {
    this.engine = new StoreEngine(options, STORE, 'express-rate-limit')
    this.prefix = this.engine.name
    this.localKeys = this.engine.isLocal
  }

  /** Called by express-rate-limit with its options: takes `windowMs` and a numeric `limit`. */
  init(options: ExpressRateLimitOptions): void {
    try {
      const windowSec = windowSizeOf(STORE, 'windowMs', options.windowMs)
      const limit = typeof options.limit === 'number' ? options.limit : undefined
      this.counter = this.engine.counter(windowSec, options.windowMs, limit, 'windowMs')
      this.windowMs = options.windowMs
      this.initError = undefined
    } catch (err) {
      // express-rate-limit logs init errors once; every later call throws the same error
      this.counter = undefined
      this.initError = err as Error
      throw err
    }
  }

  /** Counts a hit; synchronous in local and periodic namespaces. */
  increment(key: string): IncrementResponse | Promise<IncrementResponse> {
    return chain(this.windowCounter().hit(key), this.toInfo)
  }

  /**
   * Takes a hit back (express-rate-limit's skipSuccessfulRequests / skipFailedRequests) with
   * `limiter.refund`: from this process's own hits of the current window, never below zero,
   * fleet-wide with a strategy. express-rate-limit gives no hit time, so a hit counted in the
   * window before is taken from the current one (it does not decrement past the reset time).
   */
  decrement(key: string): Promise<void> {
    return this.windowCounter().takeBack(key)
  }

  /** Forgets `key` (fleet-wide with a strategy). */
  resetKey(key: string): Promise<void> {
    return this.engine.resetKey(key)
  }

  /**
   * Forgets every key: without a strategy the store starts over with no counts; with one, each
   * key the store holds for this store's namespaces is reset, fleet-wide (a store call per key).
   * With your own `rateLimiting` namespace it rejects: reset your keys with `resetKey`.
   */
  resetAll(): Promise<void> {
    return this.engine.resetAll()
  }

  /**
   * The hits and reset time of `key` without counting one. Always an answer, as rate-limit-redis
   * gives: `totalHits: 0` for a key with no hits in the sliding window (taken back, reset, never seen).
   */
  get(key: string): ClientRateLimitInfo | Promise<ClientRateLimitInfo> {
    return chain(this.windowCounter().peek(key), this.toInfo)
  }

  /** Stops the store's own engine, pushing unsynced hits. */
  shutdown(): Promise<void> {
    return this.engine.close()
  }

  private readonly toInfo = (count: HitCount): ClientRateLimitInfo => {
    // an instant of the wall clock: express-rate-limit reads resetTime against Date.now()
    const onWallClock = this.engine.onWallClock
    let resetAtMs = (onWallClock ? cachedClock() : Date.now()) + count.resetMs
    // on the wall clock a window ends at a multiple of its size, the same for every hit: round
    // off the millisecond the clock may have moved since the decision's reading
    if (count.atWindowEnd && onWallClock && this.windowMs >= 10) resetAtMs = Math.round(resetAtMs / this.windowMs) * this.windowMs
    if (resetAtMs !== this.lastResetAtMs) {
      this.lastResetAtMs = resetAtMs
      this.lastResetTime = new Date(resetAtMs)
    }
    return { totalHits: count.hits, resetTime: this.lastResetTime }
  }

  private windowCounter(): WindowCounter {
    if (this.counter !== undefined) return this.counter
    throw this.initError ?? new ConfigError('INVALID_OPTION', `${STORE}: init() was not called; pass the store to rateLimit({ store })`)
  }
}

/**
 * Options of {@link createExpressMiddleware}; `requestWasSuccessful(req, res)` defaults to
 * `res.statusCode < 400`.
 */
export interface ExpressMiddlewareOptions extends MiddlewareOptions<Request, [Request, Response]> {
  /**
   * Answers a denied request instead of the default (429, or 503 when the store failed and
   * `onStoreError` is "deny", with the headers already set). Call `next()` to let it through.
   */
  readonly handler?: (req: Request, res: Response, next: NextFunction, outcome: Outcome) => void | Promise<void>
}

/** Our Express middleware, with `resetKey` and `close`. */
export type ExpressRateLimitMiddleware = RequestHandler & {
  /** Forgets `key` in every limit (fleet-wide with a strategy). */
  resetKey(key: string): Promise<void>
  /** Stops the middleware's own engine (not a `rateLimiting` you passed), after the refunds in flight. */
  close(): Promise<void>
  /** Resolves once the refunds started so far are done (in synchronous mode, in the store). */
  settled(): Promise<void>
}

function clientAddress(req: Request): string {
  return req.ip ?? req.socket?.remoteAddress ?? ''
}

function succeeded(_req: Request, res: Response): boolean {
  return res.statusCode < 400
}

/**
 * Our own Express middleware: several limits, a cost per request, skip, the IETF headers, a
 * custom handler for denials and a fail policy, over the engine.
 *
 * @example
 * app.use(createExpressMiddleware({ limits: [{ limit: 10, windowMs: 1000 }, { limit: 100, windowMs: 60_000 }] }))
 */
export function createExpressMiddleware(options: ExpressMiddlewareOptions): ExpressRateLimitMiddleware {
  const core = new MiddlewareCore<Request, [Request, Response]>(options, 'createExpressMiddleware', clientAddress, succeeded)
  const handler = options.handler
  if (handler !== undefined && typeof handler !== 'function')
    throw new ConfigError('INVALID_OPTION', 'createExpressMiddleware: handler must be a function (req, res, next, outcome)')

  function respond(req: Request, res: Response, next: NextFunction, outcome: Outcome | undefined): void {
    if (outcome === undefined) {
      next()
      return
    }
    if (outcome.refund !== undefined && core.refunds !== undefined) settleOnEnd(core.refunds, outcome.refund, res, req, res)
    if (!res.headersSent) for (const name in outcome.headers) res.setHeader(name, outcome.headers[name] as string)
    if (outcome.decision.allowed) {
      next()
      return
    }
    if (handler !== undefined) {
      const done = handler(req, res, next, outcome)
      if (isPromiseLike(done)) Promise.resolve(done).catch(next)
      return
    }
    res.status(outcome.status).send(outcome.status === 429 ? TOO_MANY_REQUESTS : LIMITER_UNAVAILABLE)
  }

  const middleware = function rateLimitMiddleware(req: Request, res: Response, next: NextFunction): void {
    let result: Outcome | undefined | Promise<Outcome | undefined>
    try {
      result = core.run(req)
    } catch (err) {
      next(err)
      return
    }
    if (isPromiseLike(result)) result.then((outcome) => respond(req, res, next, outcome), next)
    else respond(req, res, next, result)
  }
  return Object.assign(middleware, {
    resetKey: (key: string) => core.limiter.reset(key),
    close: () => core.close(),
    settled: () => core.settled(),
  })
}
