/**
 * express-rate-limit 8.6.2's own test suite (vendored in express-rate-limit/, see its README.md)
 * run with our store as the default store, and with the package's own MemoryStore to prove the
 * harness. Expected differences: express-rate-limit.expected.ts, explained in docs/ADAPTERS.md.
 */
import path from 'node:path'
import { describe, it } from 'node:test'
import { clockDependent, expectedDifferences, notRunnable } from './express-rate-limit.expected.js'
import { checkBaseline, checkOurs, frameworksDir, runJest } from './lib/suite.js'

const config = path.join(frameworksDir, 'express-rate-limit/jest.config.json')

describe('express-rate-limit 8.6.2 own test suite', () => {
  it('passes with the package’s own MemoryStore: the harness runs it as its authors do', async (t) => {
    checkBaseline(t, await runJest(config, { RATELIMITING_SUITE_BASELINE: '1' }), notRunnable)
  })

  it('fails with RateLimitingStore as the default store only where a sliding window differs, test by test', async (t) => {
    checkOurs(t, await runJest(config), expectedDifferences, notRunnable, clockDependent)
  })

  it('fails the same way with RateLimitingStore on a MemoryStrategy in synchronous mode (a Promise per call)', async (t) => {
    checkOurs(t, await runJest(config, { RATELIMITING_SUITE_STRATEGY: 'memory' }), expectedDifferences, notRunnable, clockDependent)
  })
})
