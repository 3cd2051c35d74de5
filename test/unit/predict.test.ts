/**
 * Predictive sync (docs/ARCHITECTURE.md, "Prediction"): a periodic process adds to its view the
 * hits other processes made since the last sync, estimated from the growth of their count between
 * its last two syncs; never stored, zero after a sync that saw no growth, capped at one interval.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ConfigError, createFakeClock, MemoryStrategy, RateLimiting } from '../../src/index.js'

const T0 = 1_700_000_040_000 // a minute boundary

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
    // 10 hits a second for 0.5 s
    assert.ok(Math.abs((a.slidingWindow('k', 60, undefined, 'api') as number) - (synced + 5)) < 1e-9)
    const limiter = a.limiter({ namespace: 'api', limits: [{ limit: 27, window: 60 }] })
    assert.equal(limiter.counts('k')[0]?.current, synced + 5)
    assert.equal(limiter.allow('k'), true, '21 synced + 5 estimated + 1 <= 27')
    assert.equal(limiter.allow('k'), false, '22 + 5 + 1 > 27: the estimate denies what the synced counts alone (23) would allow')
  })

  it('counts what a read between two syncs saw against the estimate (a timer-driven sync reads twice)', async () => {
    const { a, b, clock, second } = fleet(true)
    await a.sync('api')
    await second()
    await second() // rate 10/s, baseline 21 at this instant
    clock.advance(500)
    for (let i = 0; i < 5; i++) b.increment('k', 60, 1, 'api')
    await b.sync('api')
    await a.sync('api') // 0.5 s after the baseline: too close to measure, but it saw 5 more
    assert.equal(a.slidingWindow('k', 60, undefined, 'api'), 26, '5 expected, 5 seen: nothing left to estimate')
    clock.advance(200)
    assert.ok(Math.abs((a.slidingWindow('k', 60, undefined, 'api') as number) - 28) < 1e-9, '7 expected since the baseline, 5 seen')
  })

  it('stops at two sync intervals, and is gone after an interval that saw no growth', async () => {
    const { a, clock, second } = fleet(true)
    await a.sync('api')
    await second()
    clock.advance(5_000) // no sync for 5 s: the estimate covers at most two intervals, 20 hits
    assert.ok(Math.abs((a.slidingWindow('k', 60, undefined, 'api') as number) - (11 + 20)) < 1e-9)
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
