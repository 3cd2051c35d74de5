/**
 * Costs on Redis and over HTTP (docs/SERVICE.md, "Sliding log layout" and "Operating limits"):
 * a cost above the limit is denied and written nowhere; the sliding log stores one member per
 * request whatever its cost (the seed's data for cost 1), prunes costly members correctly, and a
 * request of cost 1,000,000 costs Redis no more than one of cost 1.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { RedisFixedWindow, RedisSlidingLog } from '../../src/algorithms/index.js'
import { createFakeClock } from '../../src/core/clock.js'
import { call, check, deleteKeys, keysUnder, SHARED_REDIS_URL, startTestService, type TestService, uniquePrefix } from './server-helpers.js'

const MINUTE = 1_699_999_980_000

describe('costs on Redis', { timeout: 60_000 }, () => {
  let redis: Redis
  const prefix = uniquePrefix()
  before(() => {
    redis = new Redis(SHARED_REDIS_URL)
  })
  after(async () => {
    await deleteKeys(redis, prefix)
    redis.disconnect()
  })

  it('denies a cost above the limit without writing anything', async () => {
    const clock = createFakeClock(MINUTE)
    const fw = new RedisFixedWindow({ client: redis, limit: 3, windowMs: 60_000, prefix, clock: clock.now })
    const log = new RedisSlidingLog({ client: redis, limit: 3, windowMs: 60_000, prefix, clock: clock.now })
    for (const algorithm of [fw, log]) {
      const r = await algorithm.check('too-costly', 4)
      assert.equal(r.allowed, false)
      assert.equal(r.retryAfterMs, Number.POSITIVE_INFINITY)
      assert.equal(r.count, 0)
    }
    assert.deepEqual(await keysUnder(redis, `${prefix}:too-costly`), [], 'no key was written')
  })

  it('stores one member for a request of cost 1,000,000, in the time of one of cost 1', async () => {
    const clock = createFakeClock(MINUTE)
    const log = new RedisSlidingLog({ client: redis, limit: 2_000_000, windowMs: 60_000, prefix, clock: clock.now })
    const started = performance.now()
    const r = await log.check('million', 1_000_000)
    const ms = performance.now() - started
    assert.deepEqual([r.allowed, r.count, r.remaining], [true, 1_000_000, 1_000_000])
    const key = `${prefix}:million`
    // the request's member and the running total of extra costs
    assert.equal(await redis.zcard(key), 2)
    const members = await redis.zrange(key, '0', '-1', 'WITHSCORES')
    assert.deepEqual([members[0], members[1]], ['#cost', String(-(999_999 + 1))])
    assert.match(members[2] as string, /^\d+-[0-9a-f]+-\d+:1000000$/)
    assert.equal(members[3], String(MINUTE))
    assert.ok(ms < 500, `${ms.toFixed(0)} ms: ZADD of a million members took seconds`)
  })

  it('keeps the seed layout for cost 1: one plain member per request, ZCARD is the count', async () => {
    const clock = createFakeClock(MINUTE)
    const log = new RedisSlidingLog({ client: redis, limit: 10, windowMs: 60_000, prefix, clock: clock.now })
    for (let i = 0; i < 3; i++) await log.check('ones')
    const members = await redis.zrange(`${prefix}:ones`, '0', '-1')
    assert.equal(members.length, 3)
    for (const m of members) assert.match(m, /^\d+-[0-9a-f]+-\d+$/)
  })

  it('prunes costly members with the seed prune, and their cost with them', async () => {
    const clock = createFakeClock(MINUTE)
    const log = new RedisSlidingLog({ client: redis, limit: 10, windowMs: 10_000, prefix, clock: clock.now })
    const key = `${prefix}:mixed`
    await log.check('mixed', 3) // t0
    clock.advance(1_000)
    await log.check('mixed', 1) // t0 + 1 s
    clock.advance(1_000)
    await log.check('mixed', 5) // t0 + 2 s: 9
    assert.equal((await log.peek('mixed')).count, 9)
    const denied = await log.check('mixed', 4)
    assert.deepEqual([denied.allowed, denied.retryAfterMs], [false, 8_000])
    assert.equal((await log.check('mixed', 5)).retryAfterMs, 9_000)
    clock.advance(8_000) // t0 + 10 s: the first member (3) leaves
    assert.deepEqual([(await log.check('mixed', 4)).allowed, (await log.peek('mixed')).count], [true, 10])
    clock.advance(1_000) // t0 + 11 s: the second (1) leaves
    assert.equal((await log.peek('mixed')).count, 9)
    clock.advance(10_000) // every member left: "#cost" goes with them
    assert.equal((await log.peek('mixed')).count, 0)
    assert.equal(await redis.exists(key), 0)
  })

  it('gives an upper bound of the wait when the costly members that must leave are many', async () => {
    const clock = createFakeClock(MINUTE)
    const log = new RedisSlidingLog({ client: redis, limit: 300, windowMs: 60_000, prefix, clock: clock.now })
    // 100 members of cost 2, then 100 of cost 1, 10 ms apart: 300
    for (let i = 0; i < 200; i++) {
      assert.equal((await log.check('many', i < 100 ? 2 : 1)).allowed, true)
      clock.advance(10)
    }
    // 150 must leave: exactly, the first 75 members (cost 2) by MINUTE + 740 + 60 s; the 64
    // summed ones free 128, so the answer is the 150th member's time (rank bound) or the exact one
    const r = await log.check('many', 150)
    const exact = MINUTE + 740 + 60_000 - (MINUTE + 2_000)
    const bound = MINUTE + 1_490 + 60_000 - (MINUTE + 2_000)
    assert.equal(r.allowed, false)
    assert.ok(r.retryAfterMs >= exact && r.retryAfterMs <= bound, `${r.retryAfterMs} ms, exact ${exact}, bound ${bound}`)
  })
})

const POLICIES = `
policies:
  fixed: { use-algo: fixed-window-algo }
  counter: { use-algo: sliding-window-counter-algo, sync-rate: 0 }
  counter-periodic: { use-algo: sliding-window-counter-algo, sync-rate: 0.05 }
`

for (const store of ['redis', 'memory'] as const) {
  describe(`a cost above the limit over HTTP (${store} store)`, { timeout: 60_000 }, () => {
    const prefix = uniquePrefix()
    let redis: Redis
    let t: TestService
    before(async () => {
      redis = new Redis(SHARED_REDIS_URL)
      const storeSection = store === 'redis' ? `store: { type: redis, url: "${SHARED_REDIS_URL}" }` : 'store: { type: memory }'
      t = await startTestService(
        `rate-limiter: { use-algo: sliding-window-algo, max-requests: 5, window-size: 60, key-prefix: "${prefix}" }\n${POLICIES}${storeSection}\n`,
      )
    })
    after(async () => {
      await t?.close()
      await deleteKeys(redis, prefix)
      redis.disconnect()
    })

    for (const policy of ['default', 'fixed', 'counter', 'counter-periodic']) {
      it(`${policy}: answers 429 with retryAfterMs null and counts nothing`, async () => {
        assert.equal((await check(t.url, { userId: 'costly', policy })).status, 200)
        const a = await check(t.url, { userId: 'costly', policy, cost: 1_000_000 })
        assert.equal(a.status, 429)
        assert.equal(a.body?.retryAfterMs, null)
        assert.equal(a.headers.get('retry-after'), null)
        assert.equal((await call(`${t.url}/v1/users/costly?policy=${policy}`)).body?.count, 1)
        assert.equal((await check(t.url, { userId: 'costly', policy, cost: 4 })).status, 200, 'the rest of the limit is left')
      })
    }
  })
}
