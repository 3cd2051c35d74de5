/**
 * Refunds: our Express middleware with `skipFailedRequests`. Every request is counted when it
 * arrives; when its response fails (a status of 400 and up, or the client left before it
 * ended) the hit is given back, so only requests that succeeded use up the limit. The 429s of
 * the limiter are failures too: a client that keeps knocking is not locked out for longer.
 *
 * Run: node --import tsx examples/refunds.ts   (then curl -i http://127.0.0.1:3000/flaky)
 */
import express, { type Express } from 'express'
import { createExpressMiddleware } from '../src/adapters/express.js'
import type { Clock, Strategy } from '../src/index.js'

export interface RefundsExampleOptions {
  /** Successful requests per minute per client. @default 5 */
  readonly limit?: number
  /** Share counts with other processes through this store (refunds included). */
  readonly strategy?: Strategy
  /** The limiter's clock (tests pass a fake one). */
  readonly clock?: Clock
}

/** Builds the app; the example's test calls it and makes requests over HTTP. */
export function createRefundsApp(options: RefundsExampleOptions = {}): Express & { close(): Promise<void> } {
  const limiter = createExpressMiddleware({
    limit: options.limit ?? 5,
    windowMs: 60_000,
    // an upstream failure is ours, not the client's: give the hit back
    skipFailedRequests: true,
    // the default is `res.statusCode < 400`; here a 404 is a fine answer that still counts
    requestWasSuccessful: (_req, res) => res.statusCode < 500,
    ...(options.strategy === undefined ? {} : { strategy: options.strategy }),
    ...(options.clock === undefined ? {} : { clock: options.clock }),
  })
  const app = express()
  app.use(limiter)
  let calls = 0
  // fails every other call, as a flaky upstream would
  app.get('/flaky', (_req, res) => {
    calls++
    if (calls % 2 === 0) res.status(502).json({ error: 'upstream failed' })
    else res.json({ ok: true })
  })
  return Object.assign(app, { close: () => limiter.close() })
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const port = Number(process.env.PORT ?? 3000)
  createRefundsApp().listen(port, '127.0.0.1', () => console.log(`refunds example on http://127.0.0.1:${port}/flaky`))
}
