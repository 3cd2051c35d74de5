import { ALIGNED_WINDOW, EXACT_WAIT, FIXED_WINDOW_OPTION, PREVIOUS_WEIGHS } from './lib/reasons.js'
import type { Reasons } from './lib/suite.js'

/**
 * Tests of @fastify/rate-limit 11.2.0 that fail with createFastifyStore() because a sliding
 * window differs from the package's fixed window (docs/ADAPTERS.md explains each reason). Names
 * are `file > test` (`file > describe > test` inside a describe).
 */
export const expectedDifferences: Reasons = {
  'test/create-rate-limit.test.js > With global rate limit options': EXACT_WAIT,
  'test/create-rate-limit.test.js > With custom rate limit options': EXACT_WAIT,
  'test/create-rate-limit.test.js > With { increment: false } it reads the state without consuming it': PREVIOUS_WEIGHS,
  'test/create-rate-limit.test.js > With { increment: false } and continueExceeding the peek mirrors the active window':
    FIXED_WINDOW_OPTION,
  'test/create-rate-limit.test.js > With { increment: false } and exponentialBackoff the peek reports the base window without escalating it':
    FIXED_WINDOW_OPTION,
  'test/exponential-backoff.test.js > Exponential Backoff': FIXED_WINDOW_OPTION,
  'test/exponential-backoff.test.js > Global Exponential Backoff': FIXED_WINDOW_OPTION,
  'test/exponential-backoff.test.js > MAx safe Exponential Backoff': FIXED_WINDOW_OPTION,
  'test/github-issues/issue-207.test.js > issue #207 - when continueExceeding is true and the store is local then it should reset the rate-limit':
    FIXED_WINDOW_OPTION,
  'test/github-issues/issue-215.test.js > issue #215 - when using local store, 2nd user should not be rate limited when the time window is passed for the 1st user':
    PREVIOUS_WEIGHS,
  "test/github-issues/issue-284.test.js > issue #284 - don't set the reply code automatically": FIXED_WINDOW_OPTION,
  'test/global-rate-limit.test.js > Basic': EXACT_WAIT,
  'test/global-rate-limit.test.js > With text timeWindow': EXACT_WAIT,
  'test/global-rate-limit.test.js > With function timeWindow': EXACT_WAIT,
  'test/global-rate-limit.test.js > When passing NaN to the timeWindow property then the timeWindow should be the default value - 60 seconds':
    PREVIOUS_WEIGHS,
  'test/global-rate-limit.test.js > With keyGenerator': EXACT_WAIT,
  'test/global-rate-limit.test.js > With async/await keyGenerator': EXACT_WAIT,
  // 1001 requests on the real clock: when a window boundary falls among them, the earlier hits weigh less
  'test/global-rate-limit.test.js > when passing NaN to max variable then it should use the default max - 1000': PREVIOUS_WEIGHS,
  'test/global-rate-limit.test.js > hide rate limit headers': PREVIOUS_WEIGHS,
  'test/global-rate-limit.test.js > hide rate limit headers on exceeding': EXACT_WAIT,
  'test/global-rate-limit.test.js > hide rate limit headers at all times': PREVIOUS_WEIGHS,
  'test/global-rate-limit.test.js > With enabled IETF Draft Spec': EXACT_WAIT,
  'test/global-rate-limit.test.js > hide IETF draft spec headers': PREVIOUS_WEIGHS,
  'test/global-rate-limit.test.js > afterReset and Rate Limit remain the same when enableDraftSpec is enabled': EXACT_WAIT,
  'test/global-rate-limit.test.js > When continue exceeding is on (Local)': FIXED_WINDOW_OPTION,
  'test/global-rate-limit.test.js > ban directly': EXACT_WAIT,
  'test/global-rate-limit.test.js > wrong timewindow': EXACT_WAIT,
  'test/group-rate-limit.test.js > With multiple routes and custom groupId': EXACT_WAIT,
  'test/not-found-handler-rate-limited.test.js > Set not found handler can be rate limited': EXACT_WAIT,
  'test/not-found-handler-rate-limited.test.js > Set not found handler can be rate limited with specific options': ALIGNED_WINDOW,
  'test/redis-rate-limit.test.js > Global rate limit > With redis store': PREVIOUS_WEIGHS,
  'test/redis-rate-limit.test.js > Global rate limit > With redis store (ban)': EXACT_WAIT,
  'test/redis-rate-limit.test.js > Global rate limit > When continue exceeding is on (Redis)': FIXED_WINDOW_OPTION,
  'test/redis-rate-limit.test.js > Global rate limit > Redis with continueExceeding should not always return the timeWindow as ttl':
    FIXED_WINDOW_OPTION,
  'test/redis-rate-limit.test.js > Global rate limit > When use a custom nameSpace': EXACT_WAIT,
  'test/redis-rate-limit.test.js > Global rate limit > With redis store and exponential backoff': FIXED_WINDOW_OPTION,
  'test/redis-rate-limit.test.js > Route rate limit > With redis store': EXACT_WAIT,
  'test/redis-rate-limit.test.js > Route rate limit > When continue exceeding is on (Redis)': FIXED_WINDOW_OPTION,
  'test/redis-rate-limit.test.js > Route rate limit > When continue exceeding is off under route (Redis)': FIXED_WINDOW_OPTION,
  'test/redis-rate-limit.test.js > Route rate limit > Route-specific exponential backoff with redis store': FIXED_WINDOW_OPTION,
  'test/route-rate-limit.test.js > Basic': EXACT_WAIT,
  'test/route-rate-limit.test.js > With text timeWindow': EXACT_WAIT,
  'test/route-rate-limit.test.js > With function timeWindow': EXACT_WAIT,
  'test/route-rate-limit.test.js > With keyGenerator': EXACT_WAIT,
  'test/route-rate-limit.test.js > custom error response': EXACT_WAIT,
  'test/route-rate-limit.test.js > hide rate limit headers': PREVIOUS_WEIGHS,
  'test/route-rate-limit.test.js > hide rate limit headers on exceeding': EXACT_WAIT,
  'test/route-rate-limit.test.js > hide rate limit headers at all times': PREVIOUS_WEIGHS,
  'test/route-rate-limit.test.js > global timeWindow when not set in routes': ALIGNED_WINDOW,
  'test/route-rate-limit.test.js > Allow multiple different rate limiter registrations': EXACT_WAIT,
  'test/route-rate-limit.test.js > Allow custom timeWindow in preHandler': EXACT_WAIT,
  'test/route-rate-limit.test.js > When continue exceeding is on (Local)': FIXED_WINDOW_OPTION,
  'test/route-rate-limit.test.js > With NaN in subroute config': PREVIOUS_WEIGHS,
}

/** Tests that cannot run against the package: they fail with its own stores too. None. */
export const notRunnable: Reasons = {}

/**
 * Listed tests on the real clock (no fake clock starting at 0): whether they fail depends on where
 * the epoch-aligned window falls during the run, so they pass now and then.
 */
export const clockDependent: ReadonlySet<string> = new Set([
  'test/global-rate-limit.test.js > With async/await keyGenerator',
  'test/global-rate-limit.test.js > when passing NaN to max variable then it should use the default max - 1000',
  'test/group-rate-limit.test.js > With multiple routes and custom groupId',
  'test/not-found-handler-rate-limited.test.js > Set not found handler can be rate limited',
  'test/not-found-handler-rate-limited.test.js > Set not found handler can be rate limited with specific options',
  'test/redis-rate-limit.test.js > Global rate limit > With redis store',
  'test/redis-rate-limit.test.js > Global rate limit > With redis store (ban)',
  'test/redis-rate-limit.test.js > Global rate limit > When use a custom nameSpace',
  'test/redis-rate-limit.test.js > Route rate limit > With redis store',
  'test/route-rate-limit.test.js > custom error response',
  'test/route-rate-limit.test.js > global timeWindow when not set in routes',
  'test/route-rate-limit.test.js > Allow multiple different rate limiter registrations',
  'test/route-rate-limit.test.js > Allow custom timeWindow in preHandler',
])
