/**
 * Predictive sync (docs/ARCHITECTURE.md, "Prediction"): a periodic process adds to its view the
 * hits other processes made since the last sync, estimated from the growth of their count between
 * its last two syncs, taken low (the growth less its square root); never stored, zero after a
 * sync that saw no growth, capped at two intervals.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ConfigError, createFakeClock, MemoryStrategy, RateLimiting } from '../../src/index.js'

const T0 = 1_700_000_040_000 // a minute boundary
// The others' rate the estimator takes from a growth of 10 hits in 1 s: 10 − √10 hits, per ms.
const RATE = (10 - Math.sqrt(10)) / 1000
const near = (actual: number | Promise<number> | undefined, expected: number, message?: string) =>
  assert.ok(Math.abs((actual as number) - expected) < 1e-9, `${message ?? ''}: ${String(actual)} != ${expected}`)

function fleet(predict: boolean) {
  const clock = createFakeClock(T0)
  const store = new MemoryStrategy()
  const make = (name: string, withPrediction: boolean) => {
    const rl = RateLimiting.newInstance(name)
    rl.new({
      namespace: 'api',
      windowSizes: [60],
      syncRate: 1,
      strategy: store,
      clock: clock.now,
      autoSync: false,
      predict: withPrediction,
    })
    return rl
  }
  const a = make('predicting', predict)
  const b = make('other', false)
  // b hits `k` 10 times a second; a holds the key and syncs every second
  const second = async (hits = 10) => {
    for (let i = 0; i < hits; i++) {
      b.increment('k', 60, 1, 'api')
      clock.advance(100)
    }
    await b.sync('api')
    await a.sync('api')
  }
  a.increment('k', 60, 1, 'api')
  return { a, b, clock, store, second }
}

describe('prediction', () => {
  it('adds the others’ rate since the last sync × the time since, in every view that decides', async () => {
    const { a, clock, second } = fleet(true)
    await a.sync('api') // baseline
    await second()
    await second()
    const synced = 1 + 20 // a's hit and b's 20, as of a's last sync
    assert.equal(a.slidingWindow('k', 60, undefined, 'api'), synced, 'right after a sync: nothing to add')
    clock.advance(500)
    // 10 hits a second seen, taken as 10 − √10 ≈ 6.84, for 0.5 s: about 3.42
    const estimate = RATE * 500
    near(a.slidingWindow('k', 60, undefined, 'api'), synced + estimate)
    const limiter = a.limiter({ namespace: 'api', limits: [{ limit: 26, window: 60 }] })
    near(limiter.counts('k')[0]?.current, synced + estimate)
    assert.equal(limiter.allow('k'), true, '21 synced + 3.42 estimated + 1 <= 26')
    assert.equal(limiter.allow('k'), false, '22 + 3.42 + 1 > 26: the estimate denies what the synced counts alone (23) would allow')
  })

  it('predicts nothing for a key the others hit once an interval: one hit is no evidence of a rate', async () => {
    const { a, clock, second } = fleet(true)
    await a.sync('api')
    await second(1)
    await second(1)
    clock.advance(900)
    assert.equal(a.slidingWindow('k', 60, undefined, 'api'), 3)
  })

  it('counts what a read between two syncs saw against the estimate (a timer-driven sync reads twice)', async () => {
    const { a, b, clock, second } = fleet(true)
    await a.sync('api')
    await second()
    await second() // rate 10 − √10 a second, baseline 21 at this instant
    clock.advance(500)
    for (let i = 0; i < 2; i++) b.increment('k', 60, 1, 'api')
    await b.sync('api')
    await a.sync('api') // 0.5 s after the baseline: too close to measure, but it saw 2 more
    near(a.slidingWindow('k', 60, undefined, 'api'), 23 + RATE * 500 - 2, 'about 3.42 expected, 2 seen')
    clock.advance(200)
    near(a.slidingWindow('k', 60, undefined, 'api'), 23 + RATE * 700 - 2, 'about 4.79 expected since the baseline, 2 seen')
    for (let i = 0; i < 5; i++) b.increment('k', 60, 1, 'api')
    await b.sync('api')
    await a.sync('api') // still too close to measure: 7 seen, more than expected
    assert.equal(a.slidingWindow('k', 60, undefined, 'api'), 28, 'never below what the counts say')
  })

  it('stops at two sync intervals, and is gone after an interval that saw no growth', async () => {
    const { a, clock, second } = fleet(true)
    await a.sync('api')
    await second()
    clock.advance(5_000) // no sync for 5 s: the estimate covers at most two intervals
    near(a.slidingWindow('k', 60, undefined, 'api'), 11 + RATE * 2000)
    await second(0) // a sync with no new hits of the others
    clock.advance(800)
    assert.equal(a.slidingWindow('k', 60, undefined, 'api'), 11)
  })

  it('is never pushed: the store holds the hits only', async () => {
    const { a, clock, second, store } = fleet(true)
    await a.sync('api')
    await second()
    clock.advance(900)
    a.increment('k', 60, 1, 'api')
    await a.sync('api')
    const row = await store.getWindow('k', 'api', T0, 60_000)
    assert.equal(row.count, 12)
  })

  it('is off by default, and checked', async () => {
    const { a, clock, second } = fleet(false)
    await a.sync('api')
    await second()
    await second()
    clock.advance(500)
    assert.equal(a.slidingWindow('k', 60, undefined, 'api'), 21)
    const rl = RateLimiting.newInstance('bad-predict')
    assert.throws(
      () => rl.new({ namespace: 'x', windowSizes: [60], predict: 'yes' as never }),
      (err: unknown) => err instanceof ConfigError && /predict/.test(String(err)),
    )
  })
})
