/**
 * An existing express-rate-limit setup with one changed option, `store`: a sliding window
 * instead of a fixed one, and with a shared `strategy` one limit for every process.
 *
 * Run: node --import tsx examples/express-rate-limit-store.ts   (then curl -i http://127.0.0.1:3000/)
 */
import express, { type Express } from 'express'
import { rateLimit } from 'express-rate-limit'
import { RateLimitingStore } from '../src/adapters/express.js'
import type { Strategy } from '../src/index.js'

export interface ExampleOptions {
  /** Requests per minute per client. */
  readonly limit?: number
  /** Share counts with other processes through this store (Redis, PostgreSQL, memcached, memory). */
  readonly strategy?: Strategy
}

/** Builds the app; the example's tests call it and make requests. */
export function createExpressApp(options: ExampleOptions = {}): Express {
  const app = express()
  app.use(
    rateLimit({
      windowMs: 60_000,
      limit: options.limit ?? 100,
      standardHeaders: 'draft-8',
      legacyHeaders: false,
      // the one changed option: without a strategy the counts stay in this process
      store: new RateLimitingStore(options.strategy === undefined ? {} : { strategy: options.strategy }),
    }),
  )
  app.get('/', (_req, res) => {
    res.json({ hello: 'world' })
  })
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const port = Number(process.env.PORT ?? 3000)
  createExpressApp().listen(port, '127.0.0.1', () => console.log(`express-rate-limit with RateLimitingStore on http://127.0.0.1:${port}`))
}
