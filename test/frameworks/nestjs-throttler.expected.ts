import { PREVIOUS_WEIGHS } from './lib/reasons.js'
import type { Reasons } from './lib/suite.js'

/**
 * Tests of @nestjs/throttler 6.5.0 that fail with RateLimitingThrottlerStorage because a sliding
 * window differs from the throttler's own storage, which forgets a key's hits when its ttl has
 * passed or its block has ended (docs/ADAPTERS.md, "NestJS (@nestjs/throttler)", explains them).
 * Each test sends its requests, waits out a block or a window on the real clock, and expects a
 * fresh count; here the hits before still weigh. Names are `describe > … > test`, as Jest gives them.
 */
export const expectedDifferences: Reasons = {
  // limit 2 per 10 s, a 5 s block: 5 s later the two hits still fill the window (the block has ended)
  'Express Throttler > controllers > LimitController > GET ': PREVIOUS_WEIGHS,
  'Fastify Throttler > controllers > LimitController > GET ': PREVIOUS_WEIGHS,
  // limit 5 per 10 s, a 15 s block: allowed after it, but the previous window still weighs, so
  // X-RateLimit-Remaining is below 4 (unless the hits fell in the second half of their window)
  'Express Throttler > controllers > LimitController > GET /higher': PREVIOUS_WEIGHS,
  'Fastify Throttler > controllers > LimitController > GET /higher': PREVIOUS_WEIGHS,
  // limit 5 per minute, a 20 s block: 20 s later the five hits still fill the minute
  'Express Throttler > controllers > DefaultController > GET /default': PREVIOUS_WEIGHS,
  'Fastify Throttler > controllers > DefaultController > GET /default': PREVIOUS_WEIGHS,
  // limit 1 per second: a second later the hit still weighs in the previous window
  'Express Throttler > controllers > ThrottlerTestController > GET /test/throttle': PREVIOUS_WEIGHS,
  'Fastify Throttler > controllers > ThrottlerTestController > GET /test/throttle': PREVIOUS_WEIGHS,
  // the 1-per-second throttler, one second after its hit, and then the 2-per-5-seconds one
  'Multi-Throttler Named Usage - express > Default Route: 1/s, 2/5s, 5/min > should get an error if we send two more requests within the first five seconds':
    PREVIOUS_WEIGHS,
  'Multi-Throttler Named Usage - express > Default Route: 1/s, 2/5s, 5/min > should get an error if we smartly send 4 more requests within the minute':
    PREVIOUS_WEIGHS,
  'Multi-Throttler Named Usage - fastify > Default Route: 1/s, 2/5s, 5/min > should get an error if we send two more requests within the first five seconds':
    PREVIOUS_WEIGHS,
  'Multi-Throttler Named Usage - fastify > Default Route: 1/s, 2/5s, 5/min > should get an error if we smartly send 4 more requests within the minute':
    PREVIOUS_WEIGHS,
  // limit 2 per 3 s: 3 s later X-RateLimit-Remaining is 0, not 1
  'Function-Overrides-Throttler Named Usage - express > Default Routes > should receive an exception when firing 3 requests within 3 seconds to the same endpoint':
    PREVIOUS_WEIGHS,
  'Function-Overrides-Throttler Named Usage - express > Custom Routes > should receive an exception when firing 3 requests within 3 seconds to any endpoint':
    PREVIOUS_WEIGHS,
  'Function-Overrides-Throttler Named Usage - fastify > Default Routes > should receive an exception when firing 3 requests within 3 seconds to the same endpoint':
    PREVIOUS_WEIGHS,
  'Function-Overrides-Throttler Named Usage - fastify > Custom Routes > should receive an exception when firing 3 requests within 3 seconds to any endpoint':
    PREVIOUS_WEIGHS,
}

/** Tests that cannot run here: they fail with the package's own storage too. */
export const notRunnable: Reasons = {
  // the file's describe is named "Function-Overrides-Throttler" upstream too
  'Function-Overrides-Throttler Named Usage - fastify > Custom-error-message Route - default > should receive a custom exception':
    'expects the client address ::1, but Nest’s Fastify app listens on localhost, which is 127.0.0.1 only on this machine',
  'Function-Overrides-Throttler Named Usage - fastify > Custom-error-message Route - other > should receive a custom exception':
    'expects the client address ::1, but Nest’s Fastify app listens on localhost, which is 127.0.0.1 only on this machine',
}

/**
 * Every listed test: each runs on the real clock, and where in its aligned window a hit lands
 * decides how much it still weighs after the test's wait. Some pass about half the runs (GET
 * /higher: when the hits fell in the second half of their 10 s window); the others only when a
 * request is late enough to find two windows gone (hits in the last few ms of their window).
 */
export const clockDependent: ReadonlySet<string> = new Set(Object.keys(expectedDifferences))
