import { ALIGNED_WINDOW, EXACT_WAIT, PREVIOUS_WEIGHS } from './lib/reasons.js'
import type { Reasons } from './lib/suite.js'

/**
 * Tests of express-rate-limit 8.6.2 that fail with RateLimitingStore because a sliding window
 * differs from express-rate-limit's fixed window (docs/ADAPTERS.md explains each reason). Jest's
 * fake clock starts at the real time, so where the window is aligned varies from run to run.
 */
export const expectedDifferences: Reasons = {
  'headers test > should send correct `x-ratelimit-limit`, `x-ratelimit-remaining`, and `x-ratelimit-reset` headers': ALIGNED_WINDOW,
  'headers test > should send correct `ratelimit-*` headers for the standard headers draft 6': ALIGNED_WINDOW,
  'headers test > should send policy and combined ratelimit headers for the standard draft 7': ALIGNED_WINDOW,
  'headers test > should send correct headers for the standard draft 8': ALIGNED_WINDOW,
  'headers test > should send multiple headers correctly for the standard draft 8': ALIGNED_WINDOW,
  'headers test > should override the quota name if specified for the standard draft 8': ALIGNED_WINDOW,
  'headers test > should return the `retry-after` header once IP has reached the max': EXACT_WAIT,
  'middleware test > should (eventually) accept new connections from a blocked IP': PREVIOUS_WEIGHS,
  'middleware test > should work repeatedly': PREVIOUS_WEIGHS,
}

/** Tests that cannot run against the package: they fail with its own MemoryStore too. */
export const notRunnable: Reasons = {
  'headers test > should not attempt to set headers if request.headersSent is true':
    'calls setLegacyHeaders and the other header setters, which the package does not export',
}

/** Every listed test: Jest's fake clock starts at the real time, so the window's phase varies. */
export const clockDependent: ReadonlySet<string> = new Set(Object.keys(expectedDifferences))
