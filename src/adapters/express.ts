/**
 * ratelimiting/express: a store for express-rate-limit backed by the engine (a sliding window,
 * fleet-wide with a strategy), and our own Express middleware. Only types are imported from
 * express and express-rate-limit: both stay optional peer dependencies.
 */
import type { NextFunction, Request, RequestHandler, Response } from 'express'
import type { ClientRateLimitInfo, Options as ExpressRateLimitOptions, IncrementResponse, Store } from 'express-rate-limit'
import { ConfigError } from '../core/errors.js'
import type { Namespace } from '../core/namespace.js'
import {
  chain,
  type EngineOptions,
  type HitCount,
  isPromiseLike,
  LIMITER_UNAVAILABLE,
  MiddlewareCore,
  type MiddlewareOptions,
  type Outcome,
  StoreEngine,
  TOO_MANY_REQUESTS,
  windowSeconds,
} from './common.js'

export type { EngineOptions, LimitOption, Outcome } from './common.js'

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
 * `windowMs` must be a whole number of seconds. Use one store per `rateLimit()` (express-rate-limit
 * checks that) and give each a different `namespace` when they share a strategy.
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
  private ns: Namespace | undefined
  private windowSec = 0
  private limit: number | undefined
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
      this.windowSec = windowSeconds(STORE, 'windowMs', options.windowMs)
      this.ns = this.engine.namespaceFor(this.windowSec)
      this.limit = typeof options.limit === 'number' ? options.limit : undefined
      this.initError = undefined
    } catch (err) {
      // express-rate-limit only logs init errors: keep it for every later call to throw
      this.initError = err as Error
      throw err
    }
  }

  /** Counts a hit; synchronous in local and periodic namespaces. */
  increment(key: string): IncrementResponse | Promise<IncrementResponse> {
    return chain(this.engine.hit(this.namespace(), this.windowSec, key, 1, this.limit), this.toInfo)
  }

  /** Takes a hit back (express-rate-limit's skipSuccessfulRequests / skipFailedRequests). */
  decrement(key: string): void | Promise<void> {
    return this.engine.takeBack(this.namespace(), this.windowSec, key)
  }

  /** Forgets `key` (fleet-wide with a strategy). */
  resetKey(key: string): Promise<void> {
    return this.engine.resetKey(key)
  }

  /** The hits and reset time of `key` without counting one; undefined when it has none. */
  get(key: string): ClientRateLimitInfo | undefined | Promise<ClientRateLimitInfo | undefined> {
    return chain(this.engine.peek(this.namespace(), this.windowSec, key, this.limit), (count) =>
      count.hits === 0 ? undefined : this.toInfo(count),
    )
  }

  /** Stops the store's own engine, pushing unsynced hits. */
  shutdown(): Promise<void> {
    return this.engine.close()
  }

  private readonly toInfo = (count: HitCount): ClientRateLimitInfo => {
    if (count.resetAtMs !== this.lastResetAtMs) {
      this.lastResetAtMs = count.resetAtMs
      this.lastResetTime = new Date(count.resetAtMs)
    }
    return { totalHits: count.hits, resetTime: this.lastResetTime }
  }

  private namespace(): Namespace {
    if (this.ns !== undefined) return this.ns
    throw this.initError ?? new ConfigError('INVALID_OPTION', `${STORE}: init() was not called; pass the store to rateLimit({ store })`)
  }
}

/** Options of {@link createExpressMiddleware}. */
export interface ExpressMiddlewareOptions extends MiddlewareOptions<Request> {
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
  /** Stops the middleware's own engine (not a `rateLimiting` you passed). */
  close(): Promise<void>
}

function defaultKey(req: Request): string {
  return req.ip ?? req.socket?.remoteAddress ?? ''
}

/**
 * Our own Express middleware: several limits, a cost per request, skip, the IETF headers, a
 * custom handler for denials and a fail policy, over the engine.
 *
 * @example
 * app.use(createExpressMiddleware({ limits: [{ limit: 10, windowMs: 1000 }, { limit: 100, windowMs: 60_000 }] }))
 */
export function createExpressMiddleware(options: ExpressMiddlewareOptions): ExpressRateLimitMiddleware {
  const core = new MiddlewareCore<Request>(options, 'createExpressMiddleware', defaultKey)
  const handler = options.handler
  if (handler !== undefined && typeof handler !== 'function')
    throw new ConfigError('INVALID_OPTION', 'createExpressMiddleware: handler must be a function (req, res, next, outcome)')

  function respond(req: Request, res: Response, next: NextFunction, outcome: Outcome | undefined): void {
    if (outcome === undefined) {
      next()
      return
    }
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
  })
}
