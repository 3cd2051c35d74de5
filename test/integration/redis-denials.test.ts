/**
 * Denials answered locally (src/algorithms/denials.ts, docs/SERVICE.md "Denials answered
 * locally"): after Redis denies a user, the Redis algorithms answer that user's requests of the
 * same kind without a Redis call until the denial can end, with the answer Redis would give; a
 * reset through the algorithm forgets the denial; `rememberDenials: false` asks Redis every time.
 * On the shared Redis, with a fake clock; the client counts the script calls it sends.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { MemoryFixedWindow, RedisFixedWindow, RedisSlidingLog } from '../../src/algorithms/index.js'
import { Denials } from '../../src/algorithms/denials.js'
import { createFakeClock } from '../../src/core/clock.js'
import { deleteKeys, SHARED_REDIS_URL, uniquePrefix } from './server-helpers.js'

const MINUTE = 1_699_999_980_000 // a multiple of 60 s

describe('Redis algorithms: denials answered locally', { timeout: 60_000 }, () => {
  let redis: Redis
  let calls = 0
  // the algorithms' client: the shared connection, counting the script calls that reach it
  let counted: Redis
  const prefix = uniquePrefix()
  before(() => {
    redis = new Redis(SHARED_REDIS_URL)
    counted = Object.assign(Object.create(redis) as Redis, {
      evalsha: (...args: Parameters<Redis['evalsha']>) => {
        calls++
        return redis.evalsha(...args)
      },
    })
  })
  after(async () => {
    await deleteKeys(redis, prefix)
    redis.disconnect()
  })

  it('fixed window: a denied user costs no Redis call until the window ends, and gets the answer Redis would give', async () => {
    const clock = createFakeClock(MINUTE + 10_000)
    const fw = new RedisFixedWindow({ client: counted, limit: 3, windowMs: 60_000, prefix, clock: clock.now })
    for (let i = 0; i < 3; i++) assert.equal((await fw.check('fw')).allowed, true)
    const denied = await fw.check('fw')
    assert.deepEqual([denied.allowed, denied.remaining, denied.retryAfterMs], [false, 0, 50_000])
    const sent = calls
    clock.advance(20_000)
    for (const cost of [1, 2]) {
      const r = await fw.check('fw', cost)
      assert.deepEqual([r.allowed, r.remaining, r.retryAfterMs, r.resetMs], [false, 0, 30_000, 30_000])
    }
    assert.equal(calls, sent, 'answered without Redis')
    assert.equal(await redis.get(fw.key('fw', MINUTE + 10_000)), '4', 'Redis counted the requests it saw, not those answered here')
    clock.advance(30_000) // the next window
    assert.equal((await fw.check('fw')).allowed, true)
    assert.equal(calls, sent + 1)
  })

  it('fixed window without counting denials: a denial answers with the count of the requests admitted since', async () => {
    const clock = createFakeClock(MINUTE)
    const fw = new RedisFixedWindow({ client: counted, limit: 5, windowMs: 60_000, prefix, clock: clock.now, countDenied: false })
    const memory = new MemoryFixedWindow({ limit: 5, windowMs: 60_000, clock: clock.now, countDenied: false })
    const answers = []
    for (const cost of [3, 3, 1, 1]) answers.push(await fw.check('uncounted', cost))
    const sent = calls
    answers.push(await fw.check('uncounted', 3))
    assert.equal(calls, sent, 'the denial of cost 3 still holds: answered without Redis')
    assert.deepEqual(
      answers.map((r) => [r.allowed, r.count, r.remaining]),
      [
        [true, 3, 2],
        [false, 3, 2],
        [true, 4, 1],
        [true, 5, 0],
        [false, 5, 0],
      ],
    )
    assert.deepEqual(
      answers,
      [3, 3, 1, 1, 3].map((cost) => memory.check('uncounted', cost)),
      'the memory version answers alike',
    )
  })

  it('fixed window: a reset through the algorithm or a withLimit() variant forgets the denial at once', async () => {
    const clock = createFakeClock(MINUTE)
    const fw = new RedisFixedWindow({ client: counted, limit: 1, windowMs: 60_000, prefix, clock: clock.now })
    await fw.check('reset')
    assert.equal((await fw.check('reset')).allowed, false)
    await fw.reset('reset')
    assert.equal((await fw.check('reset')).allowed, true, 'asked Redis after the reset')
    assert.equal((await fw.check('reset')).allowed, false)
    // a variant with a higher limit is not answered by the lower limit's denial; its reset is shared
    const wider = fw.withLimit(5)
    const sent = calls
    assert.equal((await wider.check('reset')).allowed, true)
    assert.equal(calls, sent + 1)
    await wider.reset('reset')
    assert.equal((await fw.check('reset')).allowed, true, 'the base forgot its denial with the variant reset')
  })

  it('fixed window: a reset made elsewhere (the key deleted) is seen when the remembered denial ends', async () => {
    const clock = createFakeClock(MINUTE)
    const fw = new RedisFixedWindow({ client: counted, limit: 1, windowMs: 60_000, prefix, clock: clock.now })
    await fw.check('elsewhere')
    assert.equal((await fw.check('elsewhere')).allowed, false)
    await redis.del(fw.key('elsewhere'))
    assert.equal((await fw.check('elsewhere')).allowed, false, 'still the remembered denial')
    clock.advance(60_000)
    assert.equal((await fw.check('elsewhere')).allowed, true)
  })

  it('with rememberDenials false, asks Redis every time and the counter counts every request (the seed INCR)', async () => {
    const clock = createFakeClock(MINUTE)
    const fw = new RedisFixedWindow({ client: counted, limit: 2, windowMs: 60_000, prefix, clock: clock.now, rememberDenials: false })
    const sent = calls
    for (let i = 0; i < 6; i++) await fw.check('always')
    assert.equal(calls, sent + 6)
    assert.equal(await redis.get(fw.key('always')), '6')
  })

  it('sliding log: a denied cost is answered locally until the log frees room for it, with the same wait', async () => {
    const clock = createFakeClock(MINUTE)
    const log = new RedisSlidingLog({ client: counted, limit: 3, windowMs: 10_000, prefix, clock: clock.now })
    await log.check('log', 2) // t0
    clock.advance(1_000)
    await log.check('log', 1) // t0 + 1 s: full; room for 1 when the first member leaves, at t0 + 10 s
    const denied = await log.check('log', 1)
    assert.deepEqual([denied.allowed, denied.retryAfterMs], [false, 9_000])
    let sent = calls
    clock.advance(3_000)
    const again = await log.check('log', 1)
    assert.deepEqual([again.allowed, again.retryAfterMs], [false, 6_000])
    assert.equal(calls, sent, 'the same cost: answered without Redis')
    // another cost: Redis answers it (its wait depends on other members)
    sent = calls
    assert.deepEqual([(await log.check('log', 3)).retryAfterMs, calls], [7_000, sent + 1])
    clock.advance(5_999) // 1 ms before the first member leaves
    assert.equal((await log.check('log', 1)).allowed, false)
    clock.advance(1)
    assert.equal((await log.check('log', 1)).allowed, true, 'the denial ended: Redis admits it')
  })

  it('sliding log: a request a higher limit admits ends the denial, so later answers count it', async () => {
    const clock = createFakeClock(MINUTE)
    const log = new RedisSlidingLog({ client: counted, limit: 3, windowMs: 10_000, prefix, clock: clock.now })
    const asked = new RedisSlidingLog({
      client: redis,
      limit: 3,
      windowMs: 10_000,
      prefix: `${prefix}-asked`,
      clock: clock.now,
      rememberDenials: false,
    })
    const answers: unknown[][] = []
    for (const [limit, advance] of [
      [3, 0],
      [3, 1_000],
      [3, 1_000],
      [3, 1_000], // denied: remembered
      [5, 1_000], // a per-user limit of 5 (an override) admits a 4th
      [3, 1_000], // denied, with the 4 entries and the wait they make
    ] as const) {
      clock.advance(advance)
      const pair = []
      for (const algorithm of [log, asked]) {
        const r = await (limit === 3 ? algorithm : algorithm.withLimit(limit)).check('override')
        pair.push([r.allowed, r.count, r.retryAfterMs, r.resetMs])
      }
      answers.push(pair)
    }
    for (const [i, [remembered, redisAnswer]] of answers.entries()) assert.deepEqual(remembered, redisAnswer, `request ${i + 1}`)
  })

  it('keeps at most the denials it is given room for, forgetting the oldest first', () => {
    const denials = new Denials(2)
    const denial = (untilMs: number) => ({ untilMs, cost: 1, limit: 1, untilWindowEnd: true, count: 2, local: 0, resetAtMs: 0 })
    denials.set('a', denial(100), 0)
    denials.set('b', denial(100), 0)
    denials.set('c', denial(100), 0)
    assert.equal(denials.size, 2)
    assert.equal(denials.get('a', 1, 1, 1), undefined)
    assert.notEqual(denials.get('c', 1, 1, 1), undefined)
    assert.equal(denials.get('c', 1, 1, 100), undefined, 'ended')
    denials.set('d', denial(50), 60)
    assert.equal(denials.get('d', 1, 1, 60), undefined, 'an ended denial is not kept')
  })
})
