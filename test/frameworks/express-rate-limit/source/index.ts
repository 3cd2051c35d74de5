// Stands in for express-rate-limit's source/index.ts, which the vendored tests import as
// '../../source/index.js': the pinned package itself (express-rate-limit-8.6.2, an npm alias of
// express-rate-limit@8.6.2), with our store as the default store. A rateLimit() call that names
// no `store` gets `store: new RateLimitingStore()` (with RATELIMITING_SUITE_STRATEGY=memory, on a
// new MemoryStrategy in synchronous mode); a test that passes its own store keeps it.
// Nothing else changes: what a test asserts is the package's behaviour over our store.
// RATELIMITING_SUITE_BASELINE=1 leaves the package's own MemoryStore in place (the run that
// checks the harness).
import * as upstream from 'express-rate-limit-8.6.2'
import { RateLimitingStore } from '../../../../src/adapters/express.js'
import { MemoryStrategy } from '../../../../src/index.js'

export * from 'express-rate-limit-8.6.2'

type Options = Parameters<typeof upstream.rateLimit>[0]

export function rateLimit(options?: Options): ReturnType<typeof upstream.rateLimit> {
  if (process.env.RATELIMITING_SUITE_BASELINE === '1' || options?.store !== undefined) return upstream.rateLimit(options)
  // RATELIMITING_SUITE_STRATEGY=memory: the store in synchronous mode on a strategy (a Promise per call)
  const strategy = process.env.RATELIMITING_SUITE_STRATEGY === 'memory' ? new MemoryStrategy() : undefined
  return upstream.rateLimit({ ...options, store: new RateLimitingStore(strategy === undefined ? {} : { strategy }) })
}

export default rateLimit
