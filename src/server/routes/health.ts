import { send } from '../http-responses.js'
import type { ServiceMetrics } from '../metrics.js'
import type { RouteHandler } from '../router.js'

/** `GET /healthz`: 200 while the process serves requests (a liveness probe). */
export function healthRoute(): RouteHandler {
  return function health({ res }) {
    send(res, 200, '{"status":"ok"}', {})
  }
}

/**
 * `GET /readyz`: 200 when the store answers a probe within `store.timeout-ms`, 503 while it
 * does not and once shutdown began (a readiness probe). A failed probe counts as a store error
 * of operation `readiness`.
 */
export function readyRoute(ctx: { closing(): boolean; readonly metrics: ServiceMetrics }): RouteHandler {
  return function ready({ res, runtime }) {
    if (ctx.closing()) {
      send(res, 503, JSON.stringify({ status: 'shutting_down' }), {})
      return
    }
    const store = runtime.store.type
    runtime.store.ready(runtime.config.store.timeoutMs).then(
      () => send(res, 200, JSON.stringify({ status: 'ready', store }), {}),
      (err: unknown) => {
        ctx.metrics.storeError(store, 'readiness')
        send(res, 503, JSON.stringify({ status: 'unavailable', store, error: err instanceof Error ? err.message : String(err) }), {})
      },
    )
  }
}
