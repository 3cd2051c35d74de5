import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { FORWARD_AUTH_PATH, forwardAuthRoute } from './forward-auth.js'
import { isAnswerable, noteArrival, sendError } from './http-responses.js'
import type { ServiceMetrics } from './metrics.js'
import { answerOverrides, OVERRIDES_PATH } from './overrides-http.js'
import { RouteTable } from './router.js'
import { checkRoute } from './routes/check.js'
import { type ConfigRouteContext, configRoute } from './routes/config.js'
import { createDecide, StoreErrorLog } from './routes/decide.js'
import { healthRoute, readyRoute } from './routes/health.js'
import { metricsRoute } from './routes/metrics.js'
import { statusPageRoute, statusRoute } from './routes/status.js'
import { topRoute } from './routes/top.js'
import { userRoute } from './routes/users.js'
import type { Runtime } from './runtime.js'
import type { ShadowLog } from './shadow-log.js'
import { attachTopKeys, TopKeys, topKeysOf } from './top-keys.js'
import type { EnvoyRequest, EnvoyResponse } from './gateway/envoy-decide.js'
import { answerEnvoyJson } from './gateway/json-api.js'

export { MAX_COST } from './routes/check.js'

/** What the request handler needs from the service. */
export interface HandlerContext extends ConfigRouteContext {
  /** The runtime new requests use (a reload swaps it). */
  runtime(): Runtime
  /** True once shutdown began: responses then close their connection. */
  closing(): boolean
  readonly metrics: ServiceMetrics
  readonly logger: Logger
  /** Logs shadow denials, throttled. */
  readonly shadowLog: ShadowLog
  /** Envoy's ShouldRateLimit with the runtime in use (POST /json). */
  readonly decideEnvoy: (request: EnvoyRequest) => Promise<EnvoyResponse>
}

/**
 * The service's request handler: the routes of docs/SERVICE.md on plain `node:http`, as a table
 * of method, path, access and handler (each handler in src/server/routes/ or beside the feature
 * it serves). The dispatcher finds the route, answers 404 and 405 (with `Allow`), checks the
 * bearer token, and calls the handler. Nothing a client sends reaches an algorithm unchecked,
 * and every failure is a JSON error. A request that can no longer be answered (its connection is
 * closing, as after a 413, or gone) is never decided, so it is never counted.
 */
export function createRequestHandler(ctx: HandlerContext): (req: IncomingMessage, res: ServerResponse) => void {
  const { metrics, logger } = ctx
  const storeErrors = new StoreErrorLog(metrics, logger)
  // the service attaches its own (on its clock); a handler made without one counts on Date.now
  let top = topKeysOf(metrics)
  if (top === undefined) attachTopKeys((top = new TopKeys()), metrics, metrics.gateway)
  const decide = createDecide(ctx, storeErrors)
  const user = userRoute(logger, storeErrors)
  const forwardAuth = forwardAuthRoute(decide)

  const table = new RouteTable([
    { method: 'POST', path: '/v1/check', access: 'client', handler: checkRoute(decide) },
    { method: 'GET', path: '/v1/users/*', access: 'client', handler: user },
    { method: 'DELETE', path: '/v1/users/*', access: 'admin', forbidden: 'resetting a user needs an admin token', handler: user },
    // one route for the four of /v1/overrides: the handler answers 404 and 405 by the path's shape
    {
      method: '*',
      path: `${OVERRIDES_PATH}*`,
      access: 'admin',
      forbidden: 'overrides need an admin token',
      handler: function overrides(c) {
        answerOverrides(c.req, c.res, c.runtime, c.rest, ctx)
      },
    },
    // whatever the method: nginx, Traefik and Caddy send GET, other gateways the client's
    { method: '*', path: FORWARD_AUTH_PATH, access: 'client', handler: forwardAuth },
    { method: '*', path: `${FORWARD_AUTH_PATH}/*`, access: 'client', handler: forwardAuth },
    { method: 'GET', path: '/v1/config', access: 'admin', forbidden: 'reading the config needs an admin token', handler: configRoute(ctx) },
    { method: 'GET', path: '/v1/top', access: 'admin', forbidden: 'the top keys need an admin token', handler: topRoute(top) },
    { method: 'GET', path: '/v1/status', access: 'admin', forbidden: 'the status needs an admin token', handler: statusRoute(ctx) },
    // the status page holds no data and no token: its script asks for the token when auth is on
    { method: 'GET', path: '/', access: 'open', head: true, handler: statusPageRoute() },
    {
      method: 'POST',
      path: '/json',
      access: 'client',
      handler: function envoyJson(c) {
        answerEnvoyJson(c.req, c.res, c.runtime, ctx)
      },
    },
    // probes and the scrape stay open
    { method: 'GET', path: '/healthz', access: 'open', head: true, handler: healthRoute() },
    { method: 'GET', path: '/readyz', access: 'open', head: true, handler: readyRoute(ctx) },
    { method: 'GET', path: '/metrics', access: 'open', head: true, handler: metricsRoute(metrics, logger) },
  ])

  return function handleRequest(req: IncomingMessage, res: ServerResponse): void {
    noteArrival(req)
    // pipelined behind an answer that closed the connection (a 413), or on a refused connection:
    // no answer can be sent, so nothing is decided
    if (!isAnswerable(req)) {
      req.resume()
      return
    }
    if (ctx.closing()) res.setHeader('connection', 'close')
    const url = req.url ?? '/'
    const q = url.indexOf('?')
    const path = q < 0 ? url : url.slice(0, q)
    try {
      const routes = table.find(path)
      if (routes === undefined) {
        sendError(res, 404, 'not_found', `no route ${req.method} ${path}`)
        return
      }
      const method = req.method ?? ''
      const route = routes.byMethod.get(method) ?? routes.byMethod.get('*')
      if (route === undefined) {
        sendError(res, 405, 'method_not_allowed', `${method} is not allowed here; use ${routes.use}`, { allow: routes.allow })
        return
      }
      const runtime = ctx.runtime()
      if (route.access !== 'open' && runtime.auth.enabled) {
        const grant = runtime.auth.grant(req.headers.authorization)
        if (grant === 'none') {
          sendError(res, 401, 'unauthorized', 'a valid bearer token is required (Authorization: Bearer <token>)', {
            'www-authenticate': 'Bearer realm="ratelimiting"',
          })
          return
        }
        if (route.access === 'admin' && grant !== 'admin') {
          sendError(res, 403, 'forbidden', route.forbidden ?? 'this route needs an admin token')
          return
        }
      }
      route.handler({ req, res, runtime, path, rest: path.slice(routes.restAt), query: q < 0 ? '' : url.slice(q + 1) })
    } catch (err) {
      logger.error({ err, url }, 'request failed')
      if (!res.headersSent) sendError(res, 500, 'internal_error', 'the request failed; see the service log')
      else res.destroy()
    }
  }
}
