/**
 * ratelimiting/fastify: a store for @fastify/rate-limit backed by the engine (a sliding window,
 * fleet-wide with a strategy), and our own Fastify hook and plugin. Only types are imported
 * from fastify and @fastify/rate-limit: both stay optional peer dependencies.
 */
import type { FastifyRateLimitOptions, FastifyRateLimitStore, FastifyRateLimitStoreCtor } from '@fastify/rate-limit'
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import { ConfigError } from '../core/errors.js'
import { isPromiseLike, LIMITER_UNAVAILABLE, TOO_MANY_REQUESTS, windowSizeOf } from './common.js'
import { type EngineOptions, type HitCount, StoreEngine, type WindowCounter } from './engine.js'
import { MiddlewareCore, type MiddlewareOptions, type Outcome } from './middleware.js'
import { settleOnEnd } from './refunds.js'

export type { EngineOptions } from './engine.js'
export { ipKey } from './ip-key.js'
export type { LimitOption, Outcome, RequestRefund } from './middleware.js'

const STORE = 'createFastifyStore'

/** Options of {@link createFastifyStore}; `namespace` prefixes its namespace names. @default namespace "fastify-rate-limit" */
export type FastifyStoreOptions = EngineOptions

type Callback = (error: Error | null, result?: { current: number; ttl: number }) => void

/** The store class {@link createFastifyStore} returns, with a way to stop its engines. */
export type RateLimitingFastifyStoreCtor = FastifyRateLimitStoreCtor & {
  /** Stops every engine made by this class (pushing unsynced hits); call it from an onClose hook. */
  close(): Promise<void>
}

// @fastify/rate-limit passes its merged options (global ones to the constructor, a route's or
// app.rateLimit()'s to child()); only these are read here
interface Params {
  readonly timeWindow?: unknown
  readonly max?: unknown
  readonly continueExceeding?: unknown
  readonly exponentialBackoff?: unknown
  readonly routeInfo?: { readonly method?: string | readonly string[]; readonly url?: string }
}

// Options of @fastify/rate-limit that only a fixed window has: refused, never ignored
const FIXED_WINDOW_OPTIONS = {
  continueExceeding: 'it restarts a fixed window on every request over the limit',
  exponentialBackoff: 'it doubles a fixed window on every request over the limit',
} as const

function answer(cb: Callback, count: HitCount | Promise<HitCount>): void {
  if (isPromiseLike(count)) {
    count.then(
      (c) => cb(null, { current: c.hits, ttl: c.resetMs }),
      (err: unknown) => cb(err instanceof Error ? err : new Error(String(err))),
    )
    return
  }
  cb(null, { current: count.hits, ttl: count.resetMs })
}

/** The store's own options, checked once per class, per registration and per route. */
function checkParams(params: Params | undefined, where: string): void {
  if (params === undefined) return
  for (const option of Object.keys(FIXED_WINDOW_OPTIONS) as (keyof typeof FIXED_WINDOW_OPTIONS)[]) {
    if (params[option] === true)
      throw new ConfigError(
        'INVALID_OPTION',
        `${STORE}: ${option} (${where}) is not supported: ${FIXED_WINDOW_OPTIONS[option]}, and a sliding window has no window to ` +
          'restart; requests over the limit already count, so a client that keeps sending stays limited. Remove the option, or keep ' +
          "@fastify/rate-limit's own store for it",
      )
  }
}

/**
 * Makes a store class for @fastify/rate-limit (its `store` option takes a class): an existing
 * setup gets a sliding window and, with a `strategy`, one limit for the whole fleet, by adding
 * one option. `current` is the sliding count rounded up (a request is over the limit exactly
 * when the sliding count exceeds `max`) and `ttl` the ms to the end of the window, or over the
 * limit until a request would be allowed again. Every hit counts, as in @fastify/rate-limit.
 *
 * Each registration of the plugin makes its own engine. Route-level limits count apart per
 * method and URL; each `app.rateLimit(opts)` / `app.createRateLimit(opts)` counts apart, as
 * with @fastify/rate-limit's LocalStore. `timeWindow` is any whole number of ms the engine can
 * hold. `continueExceeding` and `exponentialBackoff` restart a fixed window, which a sliding
 * window does not have: they are refused when the plugin or the route is registered. A store
 * failure (synchronous mode) goes to @fastify/rate-limit as the driver's error when `onStoreError`
 * is unset, and its `skipOnError` decides (false by default: a 500); with `onStoreError` ("local",
 * "allow", "deny") the store decides instead.
 * @fastify/rate-limit has no way to give a hit back (no `skipFailedRequests`): for refunds use
 * {@link createFastifyHook} with `skipFailedRequests` / `skipSuccessfulRequests`.
 *
 * @example
 * await app.register(rateLimit, { max: 100, timeWindow: 60_000, store: createFastifyStore() })
 */
export function createFastifyStore(options: FastifyStoreOptions = {}): RateLimitingFastifyStoreCtor {
  // checked once, here, so a bad option fails where it was written
  new StoreEngine(options, STORE, 'fastify-rate-limit')
  const engines = new Set<StoreEngine>()

  class RateLimitingFastifyStore implements FastifyRateLimitStore {
    private readonly engine: StoreEngine
    private readonly prefix: string
    // app.rateLimit() children are numbered in creation order: apart here, and the n-th of one
    // process shares counts with the n-th of another running the same code
    private readonly root: { anonymousChildren: number }
    private lastTimeWindow = Number.NaN
    private lastMax = Number.NaN
    private lastCounter: WindowCounter | undefined

    constructor(params?: FastifyRateLimitOptions, parent?: RateLimitingFastifyStore, prefix = '') {
      if (parent === undefined) {
        checkParams(params as Params | undefined, 'plugin options')
        this.engine = new StoreEngine(options, STORE, 'fastify-rate-limit')
        engines.add(this.engine)
        this.root = { anonymousChildren: 0 }
      } else {
        this.engine = parent.engine
        this.root = parent.root
      }
      this.prefix = prefix
      // a fixed timeWindow is checked now, at registration, not on the first request
      const p = params as Params | undefined
      if (typeof p?.timeWindow === 'number') this.counter(p.timeWindow, typeof p.max === 'number' ? p.max : undefined)
    }

    static close(): Promise<void> {
      const all = [...engines]
      engines.clear()
      return Promise.all(all.map((e) => e.close())).then(() => undefined)
    }

    incr(key: string, cb: Callback, timeWindow: number, max: number): void {
      let count: HitCount | Promise<HitCount>
      try {
        count = this.counter(timeWindow, max).hit(this.prefix + key)
      } catch (err) {
        cb(err as Error)
        return
      }
      answer(cb, count)
    }

    /** The state of `key` without counting (@fastify/rate-limit's `{ increment: false }`). */
    read(key: string, cb: Callback, timeWindow: number, max: number): void {
      let count: HitCount | Promise<HitCount>
      try {
        count = this.counter(timeWindow, max).peek(this.prefix + key)
      } catch (err) {
        cb(err as Error)
        return
      }
      answer(cb, count)
    }

    child(routeOptions: Parameters<FastifyRateLimitStore['child']>[0]): FastifyRateLimitStore {
      const params = routeOptions as Params
      const route = params.routeInfo
      const anonymous = route?.method === undefined && route?.url === undefined
      checkParams(params, anonymous ? 'app.rateLimit() options' : `route ${String(route?.url)}`)
      const method = Array.isArray(route?.method) ? route.method.join(',') : String(route?.method ?? '')
      const prefix = anonymous ? `${this.prefix}#${++this.root.anonymousChildren}-` : `${this.prefix}${method}${route?.url ?? ''}-`
      return new RateLimitingFastifyStore(routeOptions as FastifyRateLimitOptions, this, prefix)
    }

    private counter(timeWindow: number, max: number | undefined): WindowCounter {
      if (timeWindow === this.lastTimeWindow && max === this.lastMax && this.lastCounter !== undefined) return this.lastCounter
      const counter = this.engine.counter(windowSizeOf(STORE, 'timeWindow', timeWindow), timeWindow, max, 'timeWindow')
      this.lastTimeWindow = timeWindow
      this.lastMax = max ?? Number.NaN
      this.lastCounter = counter
      return counter
    }
  }
  return RateLimitingFastifyStore as unknown as RateLimitingFastifyStoreCtor
}

/**
 * Options of {@link createFastifyHook} and the {@link fastifyRateLimiting} plugin;
 * `requestWasSuccessful(request, reply)` defaults to `reply.statusCode < 400`.
 */
export interface FastifyMiddlewareOptions extends MiddlewareOptions<FastifyRequest, [FastifyRequest, FastifyReply]> {
  /**
   * Answers a denied request instead of the default (429, or 503 when the store failed and
   * `onStoreError` is "deny", with the headers already set). If it does not send a reply, the
   * request goes on.
   */
  readonly handler?: (request: FastifyRequest, reply: FastifyReply, outcome: Outcome) => void | Promise<void>
}

/** Our onRequest hook, with `resetKey` and `close`. */
export type FastifyRateLimitHook = ((request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) => void) & {
  /** Forgets `key` in every limit (fleet-wide with a strategy). */
  resetKey(key: string): Promise<void>
  /** Stops the hook's own engine (not a `rateLimiting` you passed), after the refunds in flight. */
  close(): Promise<void>
  /** Resolves once the refunds started so far are done (in synchronous mode, in the store). */
  settled(): Promise<void>
}

type FastifyCore = MiddlewareCore<FastifyRequest, [FastifyRequest, FastifyReply]>

function succeeded(_request: FastifyRequest, reply: FastifyReply): boolean {
  return reply.statusCode < 400
}

/**
 * Our own Fastify `onRequest` hook: several limits, a cost per request, skip, the IETF
 * headers, a custom handler for denials and a fail policy. Add it to an app, a scope or a route.
 *
 * @example
 * app.addHook('onRequest', createFastifyHook({ limit: 100, windowMs: 60_000 }))
 */
export function createFastifyHook(options: FastifyMiddlewareOptions): FastifyRateLimitHook {
  const core: FastifyCore = new MiddlewareCore(options, 'createFastifyHook', (request: FastifyRequest) => request.ip, succeeded)
  const handler = options.handler
  if (handler !== undefined && typeof handler !== 'function')
    throw new ConfigError('INVALID_OPTION', 'createFastifyHook: handler must be a function (request, reply, outcome)')

  function respond(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction, outcome: Outcome | undefined): void {
    if (outcome === undefined) {
      done()
      return
    }
    // the raw response: an onRequest hook has no later hook of its own, wherever it is added
    if (outcome.refund !== undefined && core.refunds !== undefined) settleOnEnd(core.refunds, outcome.refund, reply.raw, request, reply)
    reply.headers(outcome.headers)
    if (outcome.decision.allowed) {
      done()
      return
    }
    if (handler !== undefined) {
      let result: void | Promise<void>
      try {
        result = handler(request, reply, outcome)
      } catch (err) {
        done(err as Error)
        return
      }
      if (isPromiseLike(result)) {
        Promise.resolve(result).then(
          () => {
            if (!reply.sent) done()
          },
          (err: unknown) => done(err as Error),
        )
      } else if (!reply.sent) done()
      return
    }
    reply.code(outcome.status).send(outcome.status === 429 ? TOO_MANY_REQUESTS : LIMITER_UNAVAILABLE)
  }

  const hook = function rateLimitHook(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
    let result: Outcome | undefined | Promise<Outcome | undefined>
    try {
      result = core.run(request)
    } catch (err) {
      done(err as Error)
      return
    }
    if (isPromiseLike(result))
      result.then(
        (outcome) => respond(request, reply, done, outcome),
        (err: unknown) => done(err as Error),
      )
    else respond(request, reply, done, result)
  }
  return Object.assign(hook, {
    resetKey: (key: string) => core.limiter.reset(key),
    close: () => core.close(),
    settled: () => core.settled(),
  })
}

/**
 * A Fastify plugin that adds {@link createFastifyHook}'s hook to every route of the app (it is
 * not encapsulated) and stops its engine when the app closes.
 *
 * @example
 * await app.register(fastifyRateLimiting, { limit: 100, windowMs: 60_000, headers: 'draft-8' })
 */
export function fastifyRateLimiting(instance: FastifyInstance, options: FastifyMiddlewareOptions, done: (err?: Error) => void): void {
  let hook: FastifyRateLimitHook
  try {
    hook = createFastifyHook(options)
  } catch (err) {
    done(err as Error)
    return
  }
  instance.addHook('onRequest', hook)
  instance.addHook('onClose', (_instance, closed) => {
    hook.close().then(() => closed(), closed)
  })
  done()
}

// What fastify-plugin would set, without depending on it: apply to the parent scope, and a name.
Object.assign(fastifyRateLimiting, {
  [Symbol.for('skip-override')]: true,
  [Symbol.for('fastify.display-name')]: 'ratelimiting',
})
