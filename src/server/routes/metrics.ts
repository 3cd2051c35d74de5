import type { Logger } from 'pino'
import { sendError } from '../http-responses.js'
import type { ServiceMetrics } from '../metrics.js'
import type { RouteHandler } from '../router.js'

/** `GET /metrics`: the Prometheus text format of the service's registry (docs/SERVICE.md lists the metrics). */
export function metricsRoute(metrics: ServiceMetrics, logger: Logger): RouteHandler {
  return function scrape({ res }) {
    metrics.render().then(
      ({ body, contentType }) => {
        res.writeHead(200, { 'content-type': contentType, 'content-length': String(Buffer.byteLength(body)) })
        res.end(body)
      },
      (err: unknown) => {
        logger.error({ err }, 'rendering metrics failed')
        sendError(res, 500, 'internal_error', 'rendering metrics failed')
      },
    )
  }
}
