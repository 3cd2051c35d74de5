import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ConfigError, createFakeClock, type Strategy } from '../../src/index.js'
import { perMinute, perNMinute, perNSecond, perSecond, type SimpleLimiter, WindowStats } from '../../src/simple/index.js'

const MINUTE = 1_699_999_980_000 // a minute boundary
const HALF_HOUR = 1_699_999_200_000 // a 30-minute boundary
const T_10_53 = Date.UTC(2026, 0, 1, 10, 53, 0, 0)

function calls(limiter: SimpleLimiter, n: number, key = 'k'): boolean[] {
  return Array.from({ length: n }, () => limiter.allow(key) as boolean)
}

describe('simple API factories', () => {
  it('allows exactly n calls per window, not n + 1', () => {
    const clock = createFakeClock(MINUTE)
    const cases: [SimpleLimiter, number][] = [
      [perSecond(5, { clock: clock.now }), 5],
      [perMinute(3, { clock: clock.now }), 3],
      [perNSecond(7, 7, { clock: clock.now }), 7],
      [perNMinute(4, 15, { clock: clock.now }), 4],
    ]
    for (const [limiter, n] of cases) {
      assert.deepEqual(calls(limiter, n + 2), [...Array(n).fill(true), false, false], `${limiter.name}`)
      assert.equal(limiter.limit, n)
    }
    assert.deepEqual(
      cases.map(([l]) => l.windowMs),
      [1000, 60_000, 7000, 900_000],
    )
  })

  it('refuses windows outside 1 to 30 and limits that are not whole, naming the value', () => {
    const refused = (fn: () => unknown, pattern: RegExp) =>
      assert.throws(fn, (err: unknown) => err instanceof ConfigError && err.code === 'INVALID_OPTION' && pattern.test(err.message))
    refused(() => perNSecond(5, 0), /perNSecond: seconds must be a whole number from 1 to 30, got 0/)
    refused(() => perNSecond(5, 31), /got 31/)
    refused(() => perNSecond(5, 1.5), /got 1\.5/)
    refused(() => perNMinute(5, 45), /perNMinute: minutes must be a whole number from 1 to 30, got 45/)
    refused(() => perMinute(0), /limit must be a positive whole number of calls per window, got 0/)
    refused(() => perSecond(2.5), /got 2\.5/)
    refused(() => perMinute(10, { name: 'a|b' }), /name must be a non-empty string without "\|"/)
    const limiter = perMinute(10)
    refused(() => {
      limiter.store = { name: 'not a strategy' } as unknown as Strategy
    }, /store must be an engine strategy/)
  })

  it('answers synchronously in local memory and checks the key', () => {
    const limiter = perMinute(1)
    assert.equal(limiter.allow('k'), true)
    assert.equal(limiter.allow('k'), false)
    assert.throws(() => limiter.allow(42 as unknown as string), TypeError)
  })
})

describe('sliding window without the Go limiter defects', () => {
  it('weighs the previous window by the share of it still inside the sliding window', () => {
    const clock = createFakeClock(MINUTE + 30_000)
    const limiter = perMinute(20, { clock: clock.now })
    assert.equal(calls(limiter, 20).every(Boolean), true)
    clock.set(MINUTE + 60_000 + 45_000) // 45 s into the next window: 20 * 0.25 = 5 still weigh
    assert.deepEqual(calls(limiter, 16), [...Array(15).fill(true), false])
  })

  it('never reuses the count of an older window with the same position in the minute', () => {
    const clock = createFakeClock(MINUTE + 7_000)
    const limiter = perSecond(3, { clock: clock.now })
    assert.deepEqual(calls(limiter, 4), [true, true, true, false])
    clock.advance(60_000) // second 7 again: the Go limiter's cyclic key "k#7" would still hold 3
    assert.deepEqual(calls(limiter, 4), [true, true, true, false])
  })

  it('keeps counts for two windows whatever the size (30-minute windows)', () => {
    const clock = createFakeClock(HALF_HOUR)
    const limiter = perNMinute(10, 30, { clock: clock.now })
    assert.equal(calls(limiter, 10).every(Boolean), true)
    clock.set(HALF_HOUR + 45 * 60_000) // half way through the next window: 10 * 0.5 = 5
    assert.deepEqual(calls(limiter, 6), [true, true, true, true, true, false])
    clock.set(HALF_HOUR + 60 * 60_000) // the first window is gone; the second (5 calls) weighs 1
    assert.deepEqual(calls(limiter, 6), [true, true, true, true, true, false])
    clock.set(HALF_HOUR + 120 * 60_000) // nothing left of either
    assert.equal(calls(limiter, 10).every(Boolean), true)
  })

  it('does not count denied calls by default, as the Go allow does; countDenied makes them count', () => {
    const clock = createFakeClock(MINUTE)
    const free = perSecond(2, { clock: clock.now })
    const strict = perSecond(2, { clock: clock.now, countDenied: true })
    assert.deepEqual(calls(free, 10), [true, true, ...Array(8).fill(false)])
    assert.deepEqual(calls(strict, 10), [true, true, ...Array(8).fill(false)])
    clock.advance(1500) // half way through the next second
    assert.deepEqual(calls(free, 2), [true, false], '2 * 0.5 + 1 <= 2')
    assert.deepEqual(calls(strict, 2), [false, false], '10 * 0.5 + 1 > 2')
  })

  it('admits a greedy client at most n times in any window-length interval', () => {
    const clock = createFakeClock(MINUTE)
    const limiter = perSecond(20, { clock: clock.now })
    const admitted: number[] = []
    for (let t = 0; t < 5000; t += 10) {
      clock.set(MINUTE + t)
      if (limiter.allow('greedy')) admitted.push(t)
    }
    let worst = 0
    for (let i = 0, j = 0; i < admitted.length; i++) {
      while ((admitted[i] as number) - (admitted[j] as number) >= 1000) j++
      worst = Math.max(worst, i - j + 1)
    }
    assert.equal(worst, 20, 'never more than the limit in any 1 s interval')
    assert.ok(admitted.length >= 90, `a steady client still gets most of the limit: ${admitted.length} of 100`)
  })

  it('forgets a key on reset', async () => {
    const limiter = perMinute(1)
    assert.equal(limiter.allow('k'), true)
    assert.equal(limiter.allow('k'), false)
    await limiter.reset('k')
    assert.equal(limiter.allow('k'), true)
  })
})

describe('allowWithStats', () => {
  it('reports the counts of a known sequence, including the previous-window share', () => {
    const clock = createFakeClock(T_10_53)
    const limiter = perMinute(10, { clock: clock.now })
    for (let i = 0; i < 6; i++) limiter.allow('k')
    clock.set(Date.UTC(2026, 0, 1, 10, 54, 10, 754)) // 10.754 s into the next minute
    const weight = (60_000 - 10_754) / 60_000
    const index = Math.floor(clock.now() / 60_000)
    const expected = (currentCounter: number, allow: boolean, retryAfterMs: number) =>
      new WindowStats({
        formattedWindowTime: 'H 10 M 54 S 10 MS 754',
        currentWindowIndex: index,
        currentCounter,
        previousWindowIndex: index - 1,
        previousWindowUsedPercent: weight,
        previousWindowUseCount: 6 * weight,
        rollingCounter: currentCounter + 6 * weight,
        allow,
        retryAfterMs,
      })
    for (let i = 0; i < 5; i++) {
      const stats = limiter.allowWithStats('k') as WindowStats
      assert.deepEqual(stats, expected(i, true, 0), `call ${i + 1}`)
    }
    // 5 + 6 * 0.82 = 9.92: one more would make 10.92 > 10. It fits again once 6 * (1 - p) <= 4,
    // a third of the way through the window: 20 s - 10.754 s
    const denied = limiter.allowWithStats('k') as WindowStats
    assert.deepEqual(denied, expected(5, false, 9246))
  })

  it("prints the Go limiter's JSON field names, shape and order", () => {
    const clock = createFakeClock(Date.UTC(2026, 0, 1, 10, 54, 10, 754))
    const limiter = perMinute(50, { clock: clock.now })
    const json = JSON.stringify(limiter.allowWithStats('k'))
    const index = Math.floor(clock.now() / 60_000)
    assert.equal(
      json,
      `{"FormattedWindowTime":"H 10 M 54 S 10 MS 754","CurrentWindowIndex":${index},"CurrentCounter":0,` +
        `"PreviousWindowIndex":${index - 1},"PreviousWindowUsedPercent":${(60_000 - 10_754) / 60_000},` +
        '"PreviousWindowUseCount":0,"RollingCounter":0,"Allow":true}',
    )
  })

  it('counts like allow: the stats call is a call', () => {
    const clock = createFakeClock(MINUTE)
    const limiter = perSecond(2, { clock: clock.now })
    assert.equal((limiter.allowWithStats('k') as WindowStats).allow, true)
    assert.equal(limiter.allow('k'), true)
    const third = limiter.allowWithStats('k') as WindowStats
    assert.equal(third.allow, false)
    assert.equal(third.rollingCounter, 2)
    // 2 calls weigh 1 half way through the next second: 1 s + 0.5 s
    assert.equal(third.retryAfterMs, 1500)
  })
})
