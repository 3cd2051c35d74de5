import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { MAX_WINDOW_MS, previousWeight, retryAfterMs, slidingRate, windowSizeMs, windowStartMs } from '../../src/core/window.js'
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

  it('aligns windows to the epoch for sizes 50 ms, 1, 30, 60 and 3600 s', () => {
    const t = Date.UTC(2026, 10, 21, 13, 47, 31, 260)
    assert.equal(windowStartMs(t, 50), Date.UTC(2026, 10, 21, 13, 47, 31, 250))
    assert.equal(windowStartMs(t, 1000), Date.UTC(2026, 10, 21, 13, 47, 31))
    assert.equal(windowStartMs(t, 30_000), Date.UTC(2026, 10, 21, 13, 47, 30))
    assert.equal(windowStartMs(t, 60_000), Date.UTC(2026, 10, 21, 13, 47, 0))
    assert.equal(windowStartMs(t, 3_600_000), Date.UTC(2026, 10, 21, 13, 0, 0))
    // the last ms of a window and the first of the next
    assert.equal(windowStartMs(Date.UTC(2026, 10, 21, 13, 47, 29, 999), 30_000), Date.UTC(2026, 10, 21, 13, 47, 0))
    assert.equal(windowStartMs(Date.UTC(2026, 10, 21, 13, 47, 30, 0), 30_000), Date.UTC(2026, 10, 21, 13, 47, 30))
  })

  it('takes window sizes in seconds down to whole ms, and nothing it cannot represent', () => {
    assert.equal(windowSizeMs(60), 60_000)
    assert.equal(windowSizeMs(0.05), 50)
    assert.equal(windowSizeMs(0.001), 1)
    assert.equal(windowSizeMs(0.007), 7, '0.007 * 1000 is 7.000000000000001')
    assert.equal(windowSizeMs(0.1 + 0.2), 300)
    assert.equal(windowSizeMs(9_007_199_254_740), 9_007_199_254_740_000)
    assert.equal(windowSizeMs(285_421 * 365.25 * 86_400), 9_007_201_749_600_000, "285,421 years, as @fastify/rate-limit's ms() reads them")
    assert.equal(windowSizeMs(MAX_WINDOW_MS / 1000), MAX_WINDOW_MS)
    for (const bad of [0, -1, 0.0005, 1.0005, 1e14, Number.NaN, Number.POSITIVE_INFINITY]) {
      assert.ok(Number.isNaN(windowSizeMs(bad)), `${bad} is refused`)
    }
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
  it('equals a brute-force search over time, ms by ms, for any window of whole ms', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 4000 }),
        fc.integer({ min: 0, max: 3999 }),
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 0, max: 40 }),
        fc.integer({ min: 1, max: 30 }),
        fc.integer({ min: 1, max: 5 }),
        (sizeMs, offsetMs, cur, prev, limit, cost) => {
          const now = MINUTE + (offsetMs % sizeMs)
          const expected = bruteForceRetry(cur, prev, now, sizeMs, limit, cost)
          assert.equal(retryAfterMs(cur, prev, now, sizeMs, limit, cost), expected)
        },
      ),
      { numRuns: 1000 },
    )
  })

  it('equals the brute-force search with decimal counts, limits and costs', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 3000 }),
        fc.integer({ min: 0, max: 2999 }),
        fc.double({ min: 0, max: 50, noNaN: true }),
        fc.double({ min: 0, max: 50, noNaN: true }),
        fc.double({ min: 0.5, max: 30, noNaN: true }),
        fc.double({ min: 0.01, max: 5, noNaN: true }),
        (sizeMs, offsetMs, cur, prev, limit, cost) => {
          const now = MINUTE + (offsetMs % sizeMs)
          assert.equal(retryAfterMs(cur, prev, now, sizeMs, limit, cost), bruteForceRetry(cur, prev, now, sizeMs, limit, cost))
        },
      ),
      { numRuns: 1000 },
    )
  })

  // a timeout, not a timing: a walk ms by ms would never end here
  it('answers for windows up to 2^54 ms and is never early there', { timeout: 10_000 }, () => {
    // @fastify/rate-limit's "MAx safe Exponential Backoff": a 285421-year window hung a ms-by-ms walk
    for (const sizeMs of [9_007_199_254_740_000, MAX_WINDOW_MS, 285_421 * 365.25 * 86_400_000]) {
      // fixed instants, so that a failure reproduces: epoch 0, one in 2026 (this case once failed
      // there: now + wait rounded below the instant the formula allowed), the end of the window
      for (const now of [0, 1_763_887_000_000, 1_798_761_599_999, sizeMs - 1]) {
        const wait = retryAfterMs(3, 0, now, sizeMs, 2, 1)
        assert.ok(Number.isFinite(wait) && wait > 0, `size ${sizeMs}, now ${now}: ${wait}`)
        // allowed at now + wait by the formula itself: the current window alone held 3
        const start = windowStartMs(now, sizeMs)
        const t = now + wait
        const rate = t < start + sizeMs ? 3 : t < start + 2 * sizeMs ? 3 * ((start + 2 * sizeMs - t) / sizeMs) : 0
        assert.ok(rate + 1 <= 2, `still over the limit at ${t}`)
      }
    }
  })

  it('is never early for huge windows at any instant, the wait added to now as a caller does', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 2 ** 52, max: MAX_WINDOW_MS }),
        fc.double({ min: 0, max: 1, noNaN: true, maxExcluded: true }),
        fc.integer({ min: 0, max: 20 }),
        fc.integer({ min: 0, max: 20 }),
        fc.integer({ min: 1, max: 10 }),
        (sizeMs, offset, cur, prev, limit) => {
          const now = Math.floor(offset * sizeMs)
          const wait = retryAfterMs(cur, prev, now, sizeMs, limit, 1)
          if (wait === 0 || !Number.isFinite(wait)) return
          const start = windowStartMs(now, sizeMs)
          const t = now + wait
          const rate =
            t < start + sizeMs
              ? cur + prev * ((start + sizeMs - t) / sizeMs)
              : t < start + 2 * sizeMs
                ? cur * ((start + 2 * sizeMs - t) / sizeMs)
                : 0
          assert.ok(rate + 1 <= limit, `size ${sizeMs}, now ${now}: still over the limit at ${t}`)
        },
      ),
      { numRuns: 2000 },
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
