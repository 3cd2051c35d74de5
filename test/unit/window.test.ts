import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { previousWeight, retryAfterMs, slidingRate, windowStartSec } from '../../src/core/window.js'
import { createFakeClock, RateLimiting } from '../../src/index.js'

// 2023-11-14T22:13:00Z: the start of a minute and of an hour-aligned second count
const MINUTE = 1_699_999_980_000

describe('window math', () => {
  it('gives the seed example: current 10, previous 40, 30 s into a 60 s window is 30', () => {
    assert.equal(slidingRate(10, 40, previousWeight(MINUTE + 30_000, 60_000)), 30)
  })

  it('computes the seed example through the engine with a fake clock', () => {
    const clock = createFakeClock(MINUTE - 60_000 + 5_000)
    const rl = RateLimiting.newInstance('seed')
    rl.new({ namespace: 'api', windowSizes: [60], clock: clock.now })
    rl.increment('1.2.3.4', 60, 40, 'api')
    clock.set(MINUTE + 1_000)
    rl.increment('1.2.3.4', 60, 10, 'api')
    clock.set(MINUTE + 30_000)
    assert.equal(rl.slidingWindow('1.2.3.4', 60, undefined, 'api'), 30)
  })

  it("matches Kong's README (10 + 20 x 0.5 = 20) and Cloudflare's example (18 + 42 x 45/60 = 49.5)", () => {
    assert.equal(slidingRate(10, 20, previousWeight(MINUTE + 30_000, 60_000)), 20)
    assert.equal(slidingRate(18, 42, previousWeight(MINUTE + 15_000, 60_000)), 49.5)
  })

  it('aligns windows to the epoch for sizes 1, 30, 60 and 3600 s', () => {
    const t = Date.UTC(2026, 10, 21, 13, 47, 31, 250)
    assert.equal(windowStartSec(t, 1), Date.UTC(2026, 10, 21, 13, 47, 31) / 1000)
    assert.equal(windowStartSec(t, 30), Date.UTC(2026, 10, 21, 13, 47, 30) / 1000)
    assert.equal(windowStartSec(t, 60), Date.UTC(2026, 10, 21, 13, 47, 0) / 1000)
    assert.equal(windowStartSec(t, 3600), Date.UTC(2026, 10, 21, 13, 0, 0) / 1000)
    // the last ms of a window and the first of the next
    assert.equal(windowStartSec(Date.UTC(2026, 10, 21, 13, 47, 29, 999), 30), Date.UTC(2026, 10, 21, 13, 47, 0) / 1000)
    assert.equal(windowStartSec(Date.UTC(2026, 10, 21, 13, 47, 30, 0), 30), Date.UTC(2026, 10, 21, 13, 47, 30) / 1000)
  })

  it('weighs the previous window with millisecond precision', () => {
    assert.equal(previousWeight(MINUTE, 60_000), 1)
    assert.equal(previousWeight(MINUTE + 1, 60_000), 59_999 / 60_000)
    assert.equal(previousWeight(MINUTE + 30_001, 60_000), 29_999 / 60_000)
    assert.equal(previousWeight(MINUTE + 59_999, 60_000), 1 / 60_000)
    assert.equal(previousWeight(MINUTE + 250, 1_000), 0.75)
    // through the engine: one ms moves the rate
    const clock = createFakeClock(MINUTE - 1_000)
    const rl = RateLimiting.newInstance('ms')
    rl.new({ windowSizes: [1], clock: clock.now })
    rl.increment('k', 1, 1000)
    clock.set(MINUTE + 1)
    assert.equal(rl.slidingWindow('k', 1), 999)
    clock.set(MINUTE + 2)
    assert.equal(rl.slidingWindow('k', 1), 998)
  })

  it('does not round the rate', () => {
    assert.equal(slidingRate(1, 1, previousWeight(MINUTE + 20_000, 60_000)), 1 + 40_000 / 60_000)
  })
})

/** The first whole ms (>= now) at which a hit of `cost` passes, by walking time. */
function bruteForceRetry(cur: number, prev: number, nowMs: number, sizeMs: number, limit: number, cost: number): number {
  const start = Math.floor(nowMs / sizeMs) * sizeMs
  for (let t = nowMs; t < start + 3 * sizeMs; t++) {
    const s = Math.floor(t / sizeMs) * sizeMs
    const w = (sizeMs - (t % sizeMs)) / sizeMs
    const rate = s === start ? cur + prev * w : s === start + sizeMs ? cur * w : 0
    if (rate + cost <= limit) return t - nowMs
  }
  return Number.POSITIVE_INFINITY
}

describe('retry time', () => {
  it('equals a brute-force search over time, ms by ms', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4 }),
        fc.integer({ min: 0, max: 3999 }),
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 1, max: 30 }),
        fc.integer({ min: 1, max: 5 }),
        (sizeSec, offsetMs, cur, prev, limit, cost) => {
          const sizeMs = sizeSec * 1000
          const now = MINUTE + (offsetMs % sizeMs)
          const expected = bruteForceRetry(cur, prev, now, sizeMs, limit, cost)
          assert.equal(retryAfterMs(cur, prev, now, sizeMs, limit, cost), expected)
        },
      ),
      { numRuns: 400 },
    )
  })

  it('waits into the next window when the current window alone is over the limit', () => {
    // 15 hits now, limit 14: the next window starts with previous = 15 at weight 1
    const now = MINUTE + 30_000
    const wait = retryAfterMs(15, 0, now, 60_000, 14, 1)
    assert.equal(wait, 30_000 + Math.ceil(60_000 * (1 - 13 / 15)))
    assert.equal(wait, bruteForceRetry(15, 0, now, 60_000, 14, 1))
  })

  it('is 0 when the hit is allowed and Infinity when the cost exceeds the limit', () => {
    assert.equal(retryAfterMs(1, 1, MINUTE, 60_000, 10, 1), 0)
    assert.equal(retryAfterMs(0, 0, MINUTE, 60_000, 10, 11), Number.POSITIVE_INFINITY)
  })
})
