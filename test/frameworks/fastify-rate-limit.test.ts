/**
 * @fastify/rate-limit 11.2.0's own test suite (vendored in fastify-rate-limit/, see its
 * README.md) run with our store as the default store, and with the package's own stores to prove
 * the harness. Expected differences: fastify-rate-limit/expected.ts, explained in docs/ADAPTERS.md.
 */
import { after, before, describe, it } from 'node:test'
import path from 'node:path'
import { type RedisServerHandle, startRedisServer } from '../support/redis-server.js'
import { clockDependent, expectedDifferences, notRunnable } from './fastify-rate-limit.expected.js'
import { checkBaseline, checkOurs, frameworksDir, runNodeTest } from './lib/suite.js'

const suiteDir = path.join(frameworksDir, 'fastify-rate-limit')
const files = [
  'test/create-rate-limit.test.js',
  'test/exponential-backoff.test.js',
  'test/github-issues/issue-207.test.js',
  'test/github-issues/issue-215.test.js',
  'test/github-issues/issue-284.test.js',
  'test/global-rate-limit.test.js',
  'test/group-rate-limit.test.js',
  'test/ip-normalization.test.js',
  'test/local-store-close.test.js',
  'test/not-found-handler-rate-limited.test.js',
  'test/redis-rate-limit.test.js',
  'test/route-rate-limit.test.js',
]
const nodeArgs = ['--import', 'tsx', '--require', './setup.js']

describe('@fastify/rate-limit 11.2.0 own test suite', () => {
  // the Redis tests end with FLUSHALL: they get a server of their own, never the shared one
  let redis: RedisServerHandle
  before(async () => {
    redis = await startRedisServer()
  })
  after(async () => {
    await redis?.stop()
  })

  it('passes with the package’s own stores (LocalStore, RedisStore): the harness runs it as its authors do', async (t) => {
    const results = await runNodeTest(suiteDir, files, nodeArgs, {
      RATELIMITING_SUITE_BASELINE: '1',
      RATELIMITING_SUITE_REDIS_PORT: String(redis.port),
    })
    checkBaseline(t, results, notRunnable)
  })

  it('fails with createFastifyStore() as the default store only where a sliding window differs, test by test', async (t) => {
    const results = await runNodeTest(suiteDir, files, nodeArgs, { RATELIMITING_SUITE_REDIS_PORT: String(redis.port) })
    checkOurs(t, results, expectedDifferences, notRunnable, clockDependent)
  })
})
