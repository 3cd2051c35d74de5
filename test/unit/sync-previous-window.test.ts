import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { DiffBatch } from '../../src/core/strategy.js'
import { createFakeClock, MemoryStrategy, RateLimiting } from '../../src/index.js'

const MINUTE = 1_699_999_980_000 // a multiple of 60 s: window W starts here
const NEXT = MINUTE + 60_000 // window W+1

/** A memory store that counts the previous-window reads of synchronous pushes. */
class CountingStore extends MemoryStrategy {
  previousReads = 0

  override pushDiffs(batch: DiffBatch) {
    const currentStart = Math.floor(batch.nowMs / 60_000) * 60_000
    for (const r of batch.refresh) if (r.windowStartMs < currentStart) this.previousReads++
    return super.pushDiffs(batch)
  }
}

// current + previous × the previous window's weight at `nowMs`, for a 60 s window
function rate(current: number, previous: number, nowMs: number): number {
  return current + previous * ((60_000 - (nowMs % 60_000)) / 60_000)
}

function near(actual: number, expected: number, message: string): void {
  assert.ok(Math.abs(actual - expected) < 1e-9, `${message}: ${actual} != ${expected}`)
}

describe('synchronous mode: the previous window', () => {
  it('reads a key’s closed previous window once per second, not on every hit', async () => {
    const store = new CountingStore()
    const clock = createFakeClock(MINUTE)
    const rl = RateLimiting.newInstance('prev-reads')
    rl.new({ windowSizes: [60], syncRate: 0, strategy: store, clock: clock.now })
    await rl.increment('k', 60, 10)
    clock.set(NEXT)
    store.previousReads = 0
    for (let i = 0; i < 5; i++) await rl.increment('k', 60, 1)
    assert.equal(store.previousReads, 1, 'five hits in one second read it once')
    clock.advance(1000)
    near(await rl.increment('k', 60, 1), rate(6, 10, clock.now()), 'the rate uses the value read')
    assert.equal(store.previousReads, 2, 'the next second reads it again')
    await rl.close()
  })

  it('sees a late push of the previous window by another process within one second', async () => {
    const store = new CountingStore()
    const clock = createFakeClock(MINUTE)
    const a = RateLimiting.newInstance('prev-late-a')
    const b = RateLimiting.newInstance('prev-late-b')
    a.new({ windowSizes: [60], syncRate: 0, strategy: store, clock: clock.now })
    b.new({ windowSizes: [60], syncRate: 1, strategy: store, clock: clock.now, autoSync: false })
    await a.increment('k', 60, 10)
    b.increment('k', 60, 5) // counted in W, pushed only in W+1
    clock.set(NEXT)
    near(await a.increment('k', 60, 1), rate(1, 10, clock.now()), 'before b pushes')
    clock.advance(100)
    await b.sync()
    clock.advance(800)
    near(await a.increment('k', 60, 1), rate(2, 10, clock.now()), 'within the second: the value read at its start')
    clock.set(NEXT + 1000)
    near(await a.increment('k', 60, 1), rate(3, 15, clock.now()), 'the next second: the late push is seen')
    await Promise.all([a.close(), b.close()])
  })

  it('sees another process’s reset of the previous window within one second', async () => {
    const store = new CountingStore()
    const clock = createFakeClock(MINUTE)
    const a = RateLimiting.newInstance('prev-reset-a')
    const b = RateLimiting.newInstance('prev-reset-b')
    for (const rl of [a, b]) rl.new({ windowSizes: [60], syncRate: 0, strategy: store, clock: clock.now })
    const limiterA = a.limiter({ limits: [{ limit: 12, window: 60 }] })
    const limiterB = b.limiter({ limits: [{ limit: 12, window: 60 }] })
    for (let i = 0; i < 10; i++) assert.equal((await limiterA.hit('k')).allowed, true)
    clock.set(NEXT + 30_000) // previous weight 0.5: rate 5 before this second's hits
    assert.equal((await limiterA.hit('k')).rate, 6)
    await limiterB.reset('k')
    clock.advance(500)
    const stale = await limiterA.hit('k')
    assert.equal(stale.rate, 1 + 10 * (29.5 / 60), 'the current window is reset at once; the previous one is still the value read')
    clock.set(NEXT + 31_000)
    const fresh = await limiterA.hit('k')
    assert.equal(fresh.rate, 2, 'the next second: both windows reset')
    assert.equal(fresh.remaining, 10)
    await Promise.all([a.close(), b.close()])
  })

  it('still writes a previous window that holds unsynced hits of this process', async () => {
    const store = new CountingStore()
    const clock = createFakeClock(MINUTE)
    const a = RateLimiting.newInstance('prev-unsynced-a')
    const b = RateLimiting.newInstance('prev-unsynced-b')
    for (const rl of [a, b]) rl.new({ windowSizes: [60], syncRate: 0, strategy: store, clock: clock.now, onError: () => {} })
    await a.increment('k', 60, 4)
    clock.set(NEXT - 1000)
    store.failNextPushes(1)
    await a.increment('k', 60, 3) // counted locally, not in the store
    clock.set(NEXT)
    await a.increment('k', 60, 1) // pushes W's 7 along with W+1's 1
    near(await b.slidingWindow('k', 60), rate(1, 7, clock.now()), 'the other process sees all of W')
    await Promise.all([a.close(), b.close()])
  })
})
