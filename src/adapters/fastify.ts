/**
 * ratelimiting/fastify: a store for @fastify/rate-limit backed by the engine (a sliding window,
 * fleet-wide with a strategy), and our own Fastify hook and plugin. Only types are imported
 * from fastify and @fastify/rate-limit: both stay optional peer dependencies.
 */
import type { FastifyRateLimitOptions, FastifyRateLimitStore, FastifyRateLimitStoreCtor } from '@fastify/rate-limit'
import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify'
import { ConfigError } from '../core/errors.js'
import {
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

const STORE = 'createFastifyStore'

/** Options of {@link createFastifyStore}; `namespace` prefixes its namespace names. @default namespace "fastify-rate-limit" */
export type FastifyStoreOptions = EngineOptions

type Callback = (error: Error | null, result?: { current: number; ttl: number }) => void

/** The store class {@link createFastifyStore} returns, with a way to stop its engines. */
export type RateLimitingFastifyStoreCtor = FastifyRateLimitStoreCtor & {
  /** Stops every engine made by this class (pushing unsynced hits); call it from an onClose hook. */
  close(): Promise<void>
}

// @fastify/rate-limit passes the merged route options; only routeInfo is read here
type ChildOptions = Parameters<FastifyRateLimitStore['child']>[0]

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

/**
 * Makes a store class for @fastify/rate-limit (its `store` option takes a class): an existing
 * setup gets a sliding window and, with a `strategy`, one limit for the whole fleet, by adding
 * one option. `current` is the sliding count rounded up (a request is over the limit exactly
 * when the sliding count exceeds `max`) and `ttl` the ms to the end of the window, or over the
 * limit until a request would be allowed again. Every hit counts, as in @fastify/rate-limit.
 * Each registration of the plugin makes its own engine; route-level limits (`child`) count
 * apart, per method and URL. `timeWindow` must be a whole number of seconds.
 * `continueExceeding` and `exponentialBackoff` do not apply to a sliding window and are ignored.
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

    constructor(_params?: FastifyRateLimitOptions, parent?: { engine: StoreEngine; prefix: string }) {
      if (parent === undefined) {
        this.engine = new StoreEngine(options, STORE, 'fastify-rate-limit')
        engines.add(this.engine)
        this.prefix = ''
      } else {
        this.engine = parent.engine
        this.prefix = parent.prefix
      }
    }

    static close(): Promise<void> {
      const all = [...engines]
      engines.clear()
      return Promise.all(all.map((e) => e.close())).then(() => undefined)
    }

    incr(key: string, cb: Callback, timeWindow: number, max: number): void {
      let count: HitCount | Promise<HitCount>
      try {
        const windowSec = windowSeconds(STORE, 'timeWindow', timeWindow)
        count = this.engine.hit(this.engine.namespaceFor(windowSec), windowSec, this.prefix + key, 1, max)
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
        const windowSec = windowSeconds(STORE, 'timeWindow', timeWindow)
        count = this.engine.peek(this.engine.namespaceFor(windowSec), windowSec, this.prefix + key, max)
      } catch (err) {
        cb(err as Error)
        return
      }
      answer(cb, count)
    }

    child(routeOptions: ChildOptions): FastifyRateLimitStore {
      const route = (
        routeOptions as {
          routeInfo?: { method?: string | string[]; url?: string }
        }
      ).routeInfo
      const method = Array.isArray(route?.method) ? route.method.join(',') : (route?.method ?? '')
      return new RateLimitingFastifyStore(undefined, {
        engine: this.engine,
        prefix: `${this.prefix}${method}${route?.url ?? ''}-`,
      })
    }
  }
  return RateLimitingFastifyStore as unknown as RateLimitingFastifyStoreCtor
}

/** Options of {@link createFastifyHook} and the {@link fastifyRateLimiting} plugin. */
export interface FastifyMiddlewareOptions extends MiddlewareOptions<FastifyRequest> {
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
  /** Stops the hook's own engine (not a `rateLimiting` you passed). */
  close(): Promise<void>
}

/**
 * Our own Fastify `onRequest` hook: several limits, a cost per request, skip, the IETF
 * headers, a custom handler for denials and a fail policy. Add it to an app, a scope or a route.
 *
 * @example
 * app.addHook('onRequest', createFastifyHook({ limit: 100, windowMs: 60_000 }))
 */
export function createFastifyHook(options: FastifyMiddlewareOptions): FastifyRateLimitHook {
  const core = new MiddlewareCore<FastifyRequest>(options, 'createFastifyHook', (request) => request.ip)
  const handler = options.handler
  if (handler !== undefined && typeof handler !== 'function')
    throw new ConfigError('INVALID_OPTION', 'createFastifyHook: handler must be a function (request, reply, outcome)')

  function respond(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction, outcome: Outcome | undefined): void {
    if (outcome === undefined) {
      done()
      return
    }
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
