/**
 * ratelimiting/hono: our Hono middleware over the engine. Only types are imported from hono,
 * which stays an optional peer dependency.
 */
import type { Context, MiddlewareHandler } from 'hono'
import { ConfigError } from '../core/errors.js'
import { isPromiseLike, LIMITER_UNAVAILABLE, TOO_MANY_REQUESTS } from './common.js'
import { MiddlewareCore, type MiddlewareOptions, type Outcome } from './middleware.js'
import type { RequestRefund } from './refunds.js'

export type { EngineOptions } from './engine.js'
export { ipKey } from './ip-key.js'
export type { LimitOption, Outcome, RequestRefund } from './middleware.js'

/**
 * Options of {@link createHonoMiddleware}; `key` is required (Hono has no portable client
 * address). `requestWasSuccessful(c)` is asked after the handler, and defaults to
 * `c.res.status < 400`; a handler that throws, or a request whose `c.req.raw.signal` was aborted
 * (the client went away, on runtimes that say so), is a failure.
 */
export interface HonoMiddlewareOptions extends MiddlewareOptions<Context> {
  /** Who is limited; for the client address on Node see `getConnInfo` from `@hono/node-server/conninfo`. */
  readonly key: (c: Context) => string | Promise<string>
  /**
   * Answers a denied request instead of the default (429, or 503 when the store failed and
   * `onStoreError` is "deny", with the headers already set). Return a Response, or nothing to
   * let the request go on.
   */
  readonly handler?: (c: Context, outcome: Outcome) => Response | undefined | Promise<Response | undefined>
}

function setHeaders(c: Context, outcome: Outcome): void {
  for (const name in outcome.headers) c.header(name, outcome.headers[name])
}

/** Our Hono middleware, with `resetKey` and `close`. */
export type HonoRateLimitMiddleware = MiddlewareHandler & {
  /** Forgets `key` in every limit (fleet-wide with a strategy). */
  resetKey(key: string): Promise<void>
  /** Stops the middleware's own engine (not a `rateLimiting` you passed), after the refunds in flight. */
  close(): Promise<void>
  /** Resolves once the refunds started so far are done (in synchronous mode, in the store). */
  settled(): Promise<void>
}

function succeeded(c: Context): boolean {
  return c.res.status < 400
}

/** Runs the rest of the chain, then settles `refund`: a throw or an aborted request is a failure. */
async function nextThenSettle(core: MiddlewareCore<Context>, refund: RequestRefund, c: Context, next: () => Promise<void>): Promise<void> {
  try {
    await next()
  } catch (err) {
    refund.failed()
    throw err
  }
  if (c.req.raw.signal?.aborted === true) refund.failed()
  else core.refunds?.settle(refund, c)
}

/**
 * Our own Hono middleware: several limits, a cost per request, skip, the IETF headers, a custom
 * handler for denials and a fail policy, over the engine.
 *
 * @example
 * app.use('/api/*', createHonoMiddleware({ limit: 100, windowMs: 60_000, key: (c) => c.req.header('x-api-key') ?? 'anonymous' }))
 */
export function createHonoMiddleware(options: HonoMiddlewareOptions): HonoRateLimitMiddleware {
  if (typeof options === 'object' && options !== null && options.key === undefined)
    throw new ConfigError('INVALID_OPTION', 'createHonoMiddleware: key is required, a function of the context returning a string')
  const core = new MiddlewareCore<Context>(options, 'createHonoMiddleware', undefined, succeeded)
  const handler = options.handler
  if (handler !== undefined && typeof handler !== 'function')
    throw new ConfigError('INVALID_OPTION', 'createHonoMiddleware: handler must be a function (c, outcome)')

  const middleware = async function rateLimitMiddleware(c: Context, next: () => Promise<void>): Promise<Response | undefined> {
    const run = core.run(c)
    const outcome = isPromiseLike(run) ? await run : run
    if (outcome === undefined) {
      await next()
      return undefined
    }
    const refund = outcome.refund
    if (outcome.decision.allowed) {
      if (refund === undefined) await next()
      else await nextThenSettle(core, refund, c, next)
      // after the handler, so they reach any response, also a Response it built itself
      setHeaders(c, outcome)
      return undefined
    }
    if (handler !== undefined) {
      let response: Response | undefined
      try {
        response = await handler(c, outcome)
      } catch (err) {
        refund?.failed()
        throw err
      }
      if (response === undefined) {
        if (refund === undefined) await next()
        else await nextThenSettle(core, refund, c, next)
      } else {
        c.res = response
        if (refund !== undefined) core.refunds?.settle(refund, c)
      }
      setHeaders(c, outcome)
      return response === undefined ? undefined : c.res
    }
    setHeaders(c, outcome)
    const denied = c.text(outcome.status === 429 ? TOO_MANY_REQUESTS : LIMITER_UNAVAILABLE, outcome.status as 429 | 503)
    if (refund !== undefined) {
      // requestWasSuccessful reads c.res: the denial is the response
      c.res = denied
      core.refunds?.settle(refund, c)
    }
    return denied
  }
  return Object.assign(middleware, {
    resetKey: (key: string) => core.limiter.reset(key),
    close: () => core.close(),
    settled: () => core.settled(),
  })
}
