/**
 * ratelimiting/hono: our Hono middleware over the engine. Only types are imported from hono,
 * which stays an optional peer dependency.
 */
import type { Context, MiddlewareHandler } from 'hono'
import { ConfigError } from '../core/errors.js'
import { isPromiseLike, LIMITER_UNAVAILABLE, TOO_MANY_REQUESTS } from './common.js'
import { MiddlewareCore, type MiddlewareOptions, type Outcome } from './middleware.js'

export type { EngineOptions } from './engine.js'
export type { LimitOption, Outcome } from './middleware.js'

/** Options of {@link createHonoMiddleware}; `key` is required (Hono has no portable client address). */
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
  /** Stops the middleware's own engine (not a `rateLimiting` you passed). */
  close(): Promise<void>
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
  const core = new MiddlewareCore<Context>(options, 'createHonoMiddleware', undefined)
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
    if (outcome.decision.allowed) {
      await next()
      // after the handler, so they reach any response, also a Response it built itself
      setHeaders(c, outcome)
      return undefined
    }
    if (handler !== undefined) {
      const response = await handler(c, outcome)
      if (response === undefined) await next()
      else c.res = response
      setHeaders(c, outcome)
      return response === undefined ? undefined : c.res
    }
    setHeaders(c, outcome)
    return c.text(outcome.status === 429 ? TOO_MANY_REQUESTS : LIMITER_UNAVAILABLE, outcome.status as 429 | 503)
  }
  return Object.assign(middleware, {
    resetKey: (key: string) => core.limiter.reset(key),
    close: () => core.close(),
  })
}
