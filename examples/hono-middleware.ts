/**
 * Our Hono middleware: a burst limit and a steady limit together, costlier requests, IETF
 * draft-8 headers, and a JSON answer for denials.
 *
 * Run: node --import tsx examples/hono-middleware.ts   (then curl -i http://127.0.0.1:3000/api/hello)
 */
import { serve } from '@hono/node-server'
import { getConnInfo } from '@hono/node-server/conninfo'
import { type Context, Hono } from 'hono'
import { createHonoMiddleware, ipKey } from '../src/adapters/hono.js'
import type { Clock } from '../src/index.js'

/** An API key when there is one, else the client address (on Node; an IPv6 one stands for its /56). */
function clientKey(c: Context): string {
  return c.req.header('x-api-key') ?? ipKey(getConnInfo(c).remote.address ?? 'unknown')
}

/** Builds the app; the example's tests call it and make requests with app.request(). */
export function createHonoApp(options: { clock?: Clock } = {}): Hono {
  const app = new Hono()
  app.use(
    '/api/*',
    createHonoMiddleware({
      limits: [
        { limit: 5, windowMs: 1000, name: 'burst' },
        { limit: 100, windowMs: 60_000, name: 'steady' },
      ],
      key: clientKey,
      cost: (c) => (c.req.method === 'POST' ? 2 : 1),
      skip: (c) => c.req.path === '/api/health',
      handler: (c, outcome) =>
        c.json({ error: 'rate limited', policy: outcome.decision.name, retryAfterMs: outcome.decision.retryAfterMs }, 429),
      ...(options.clock === undefined ? {} : { clock: options.clock }),
    }),
  )
  app.get('/api/hello', (c) => c.json({ hello: 'world' }))
  app.post('/api/things', (c) => c.json({ created: true }, 201))
  app.get('/api/health', (c) => c.text('ok'))
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const port = Number(process.env.PORT ?? 3000)
  serve({ fetch: createHonoApp().fetch, port, hostname: '127.0.0.1' }, () =>
    console.log(`Hono with our middleware on http://127.0.0.1:${port}`),
  )
}
