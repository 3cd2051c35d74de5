/**
 * Concurrent calls on Redis under a test suite's fake timers. The Redis strategy and the
 * service's Redis algorithms hold a client's socket writes while calls are in flight and send
 * them together at the end of the event-loop iteration. Fake-timer libraries replace the global
 * `setImmediate` (sinon's and Jest's defaults); had the release of the held writes gone through
 * it, nothing would reach Redis until the test advanced its fake clock, and every call would
 * hang. Against the shared Redis (127.0.0.1:6379).
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { RedisSlidingLog } from '../../src/algorithms/index.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { installFakeTimers, realTimers } from '../support/fake-timers.js'
import { sharedRedisUrl } from '../support/redis-server.js'

const prefix = `rltest-fake-${randomUUID().slice(0, 8)}`
const client = new Redis(await sharedRedisUrl())

after(async () => {
  const names = await client.keys(`${prefix}*`)
  if (names.length > 0) await client.unlink(...names)
  client.disconnect()
})

const real = realTimers

// Settles `calls` without ever advancing the fake clock, or fails after `ms` of real time.
async function settleWithin<T>(calls: Promise<T>[], ms: number): Promise<T[]> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = real.setTimeout(() => reject(new Error(`${calls.length} concurrent calls did not settle within ${ms} ms`)), ms)
  })
  try {
    return await Promise.race([Promise.all(calls), timeout])
  } finally {
    real.clearTimeout(timer)
  }
}

describe('Redis under fake timers', () => {
  it('answers concurrent synchronous hits of the strategy without the fake clock moving', async () => {
    const rl = RateLimiting.newInstance('fake-timers-strategy')
    rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0, strategy: new RedisStrategy({ client, prefix }) })
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 5, window: 60 }] })
    await limiter.hit('warm-up') // the scripts are loaded, the connection is up
    const fake = installFakeTimers()
    try {
      const decisions = await settleWithin(
        Array.from({ length: 20 }, async () => await limiter.hit('k')),
        5000,
      )
      assert.equal(decisions.filter((d) => d.allowed).length, 5, 'exactly the limit admitted')
    } finally {
      fake.uninstall()
      await rl.close()
    }
  })

  it('answers concurrent checks of a Redis algorithm without the fake clock moving', async () => {
    const log = new RedisSlidingLog({ client, prefix, limit: 5, windowMs: 60_000 })
    await log.check('warm-up')
    const fake = installFakeTimers()
    try {
      const results = await settleWithin(
        Array.from({ length: 20 }, async () => await log.check('k')),
        5000,
      )
      assert.equal(results.filter((r) => r.allowed).length, 5, 'exactly the limit admitted')
    } finally {
      fake.uninstall()
    }
  })
})
