/**
 * @nestjs/throttler 6.5.0's own test suite (vendored in nestjs-throttler/, see its README.md) run
 * with our storage as the default storage, and with the package's own ThrottlerStorageService to
 * prove the harness. Expected differences: nestjs-throttler.expected.ts, explained in
 * docs/ADAPTERS.md.
 */
import path from 'node:path'
import { before, describe, it } from 'node:test'
import { clockDependent, expectedDifferences, notRunnable } from './nestjs-throttler.expected.js'
import { checkBaseline, checkOurs, frameworksDir, runJest, type TestResult } from './lib/suite.js'

const config = path.join(frameworksDir, 'nestjs-throttler/jest.config.json')
// each run waits out the suite's blocks and windows on the real clock, two minutes or more
const TIMEOUT_MS = 420_000

describe('@nestjs/throttler 6.5.0 own test suite', () => {
  // The suite mostly sleeps (setTimeout of up to 20 s between requests), so the three runs go
  // side by side, each in its own Jest process: the file takes one run's time, not three.
  let runs: Record<'baseline' | 'ours' | 'memory', Promise<TestResult[]>>
  before(() => {
    runs = {
      baseline: runJest(config, { RATELIMITING_SUITE_BASELINE: '1' }, TIMEOUT_MS),
      ours: runJest(config, {}, TIMEOUT_MS),
      memory: runJest(config, { RATELIMITING_SUITE_STRATEGY: 'memory' }, TIMEOUT_MS),
    }
    // each is awaited by its test below; a run that fails before then is not an unhandled rejection
    for (const run of Object.values(runs)) run.catch(() => undefined)
  })

  it('passes with the package’s own ThrottlerStorageService: the harness runs it as its authors do', async (t) => {
    checkBaseline(t, await runs.baseline, notRunnable)
  })

  it('fails with RateLimitingThrottlerStorage as the default storage only where a sliding window differs, test by test', async (t) => {
    checkOurs(t, await runs.ours, expectedDifferences, notRunnable, clockDependent)
  })

  it('fails the same way with RateLimitingThrottlerStorage on a MemoryStrategy in synchronous mode (a Promise per call)', async (t) => {
    checkOurs(t, await runs.memory, expectedDifferences, notRunnable, clockDependent)
  })
})
