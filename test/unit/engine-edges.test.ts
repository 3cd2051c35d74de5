/**
 * Values at the edges: windows of a few ms and of 2^54 ms, negative and huge values, costs
 * above the limit, a clock that steps back. Each gives a clear error at the boundary or a finite,
 * non-negative answer: never a hang, a crash or a rate of NaN.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createFakeClock, type Decision, MemoryStrategy, RateLimiting } from '../../src/index.js'

const T0 = 1_699_999_980_000 // the start of a minute

function local(windowSizes: number[], clock = createFakeClock(T0)) {
  const rl = RateLimiting.newInstance('edges')
  rl.new({ namespace: 'api', windowSizes, clock: clock.now })
  return { rl, clock }
}

describe('windows in milliseconds', () => {
  it('limits per 50 ms window with the exact retry time, and the previous window weighs per ms', () => {
    const { rl, clock } = local([0.05])
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 2, window: 0.05 }] })
    assert.equal((limiter.hit('k') as Decision).allowed, true)
    assert.equal((limiter.hit('k') as Decision).allowed, true)
    const denied = limiter.hit('k') as Decision
    assert.equal(denied.allowed, false)
    assert.equal(denied.window, 0.05)
    assert.equal(denied.resetMs, 50)
    // 3 counted (denied hits count): allowed once 3 x weight + 1 <= 2, i.e. weight <= 1/3 in the next window
    assert.equal(denied.retryAfterMs, 50 + Math.ceil(50 * (2 / 3)))
    clock.advance(50 + 25) // half-way through the next window: 3 x 0.5
    assert.equal(rl.slidingWindow('k', 0.05, undefined, 'api'), 1.5)
    clock.advance(25)
    assert.equal(rl.slidingWindow('k', 0.05, undefined, 'api'), 0)
  })

  it('finds a window however its size is written (0.1 + 0.2 is the 300 ms window)', () => {
    const { rl } = local([0.3, 1.5])
    rl.increment('k', 0.1 + 0.2, 2, 'api')
    assert.equal(rl.slidingWindow('k', 0.3, undefined, 'api'), 2)
    assert.equal(rl.increment('k', 1.5, 1, 'api'), 1)
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 5, window: 0.1 + 0.2 }] })
    assert.equal((limiter.hit('k') as Decision).window, 0.3)
  })

  it('syncs sub-second windows through a store', async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(T0 + 10)
    const [a, b] = ['a', 'b'].map((name) => {
      const rl = RateLimiting.newInstance(name)
      rl.new({ namespace: 'api', windowSizes: [0.25], syncRate: 1, strategy: store, clock: clock.now, autoSync: false })
      return rl
    }) as [RateLimiting, RateLimiting]
    a.increment('k', 0.25, 2, 'api')
    b.increment('k', 0.25, 3, 'api')
    await a.sync('api')
    await b.sync('api')
    await a.sync('api')
    assert.equal(a.slidingWindow('k', 0.25, undefined, 'api'), 5)
    assert.equal(b.slidingWindow('k', 0.25, undefined, 'api'), 5)
    assert.equal((await store.getWindow('k', 'api', T0, 250)).count, 5)
  })

  it('takes a window of 285,421 years and answers a denied hit with a finite wait', () => {
    // @fastify/rate-limit's "MAx safe Exponential Backoff" test; a walk ms by ms hung here
    const years = (285_421 * 365.25 * 86_400_000) / 1000
    const { rl } = local([years], createFakeClock(Date.now()))
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 2, window: years }] })
    limiter.hit('k')
    limiter.hit('k')
    const d = limiter.hit('k') as Decision
    assert.equal(d.allowed, false)
    assert.ok(Number.isFinite(d.retryAfterMs) && d.retryAfterMs > 0 && d.retryAfterMs <= 2 * years * 1000, String(d.retryAfterMs))
  })
})

describe('bad and extreme values', () => {
  it('says the type of a window size given as a string', () => {
    const { rl } = local([60])
    assert.throws(
      () => rl.increment('k', '60' as never, 1, 'api'),
      (err: unknown) =>
        err instanceof TypeError &&
        (err as { code?: string }).code === 'UNKNOWN_WINDOW_SIZE' &&
        /window size must be a number of seconds, got string "60"/.test(err.message),
    )
  })

  it('never lets a rate go negative: a process takes back at most what it counted', () => {
    const { rl } = local([60])
    assert.equal(rl.increment('k', 60, 5, 'api'), 5)
    assert.equal(rl.increment('k', 60, -7, 'api'), 0)
    assert.equal(rl.increment('k', 60, 1, 'api'), 1)
  })

  it('refuses values beyond 2^53 - 1, so rates stay finite', () => {
    const { rl } = local([60])
    for (const value of [1e308, -1e308, 2 ** 53]) {
      assert.throws(
        () => rl.increment('k', 60, value, 'api'),
        (err: unknown) => err instanceof RangeError && /value must be between -\(2\^53 - 1\) and 2\^53 - 1/.test(err.message),
      )
    }
    rl.increment('k', 60, Number.MAX_SAFE_INTEGER, 'api')
    const rate = rl.increment('k', 60, Number.MAX_SAFE_INTEGER, 'api') as number
    assert.ok(Number.isFinite(rate) && rate > 0)
    assert.ok(Number.isFinite(rl.slidingWindow('k', 60, undefined, 'api') as number))
  })

  it('denies a cost above the limit without counting it, in every mode', async () => {
    for (const syncRate of [-1, 1, 0]) {
      const store = new MemoryStrategy()
      const rl = RateLimiting.newInstance(`cost-${syncRate}`)
      rl.new({ namespace: 'api', windowSizes: [60], syncRate, ...(syncRate >= 0 ? { strategy: store } : {}), autoSync: false })
      for (const limits of [
        [{ limit: 5, window: 60 }],
        [
          { limit: 5, window: 60 },
          { limit: 1_000_000, window: 60 * 60 },
        ],
      ]) {
        if (limits.length === 2) {
          rl.close()
          continue
        }
        const limiter = rl.limiter({ namespace: 'api', limits, countDenied: true })
        const d = await limiter.hit('k', 1_000_000)
        assert.equal(d.allowed, false, `syncRate ${syncRate}`)
        assert.equal(d.retryAfterMs, Number.POSITIVE_INFINITY)
        const after = await limiter.hit('k', 1)
        assert.equal(after.allowed, true, 'the key is not poisoned by the refused cost')
        assert.equal(after.rate, 1)
      }
      if (syncRate >= 0) assert.equal(store.size <= 2, true)
    }
  })

  it('denies a cost above one of several limits without counting it on the others', () => {
    const clock = createFakeClock(T0)
    const rl = RateLimiting.newInstance('cost-multi')
    rl.new({ namespace: 'api', windowSizes: [1, 60], clock: clock.now })
    const limiter = rl.limiter({
      namespace: 'api',
      limits: [
        { limit: 5, window: 1 },
        { limit: 100, window: 60 },
      ],
    })
    const d = limiter.hit('k', 50) as Decision
    assert.equal(d.allowed, false)
    assert.equal(rl.slidingWindow('k', 60, undefined, 'api'), 0, 'nothing counted on the 60 s limit')
  })

  it('survives a clock that steps back 1 s followed by a huge cost', () => {
    const clock = createFakeClock(T0 + 30_000)
    const { rl } = local([60], clock)
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 2_000_000, window: 60 }] })
    limiter.hit('k', 10)
    clock.set(T0 + 29_000)
    const d = limiter.hit('k', 1_000_000) as Decision
    assert.equal(d.allowed, true)
    assert.equal(d.rate, 1_000_010)
    assert.ok(Number.isFinite(d.retryAfterMs))
  })
})
