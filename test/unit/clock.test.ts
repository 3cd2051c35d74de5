/**
 * The default clock under the fake-timer libraries users' test suites run with (node:test
 * mock.timers, @sinonjs/fake-timers, which jest's modern fake timers are built on): it follows a
 * fake Date at once, and real time again the moment the fake is removed, however its timers were
 * dropped. These tests are about the real clock itself, so a few of them wait a few real
 * milliseconds (on a timer taken before any fake is installed); none depends on how long.
 */
import assert from 'node:assert/strict'
import { setTimeout as realSleep } from 'node:timers/promises'
import { describe, it, mock } from 'node:test'
import FakeTimers from '@sinonjs/fake-timers'
import { cachedClock } from '../../src/core/clock.js'
import { RateLimiting } from '../../src/index.js'

// A reading this close to Date.now() is fresh (the clock's bound is about 1 ms; the slack is for
// a loaded machine, and is far below the 60 s jumps the fakes below make).
function assertFresh(ms: number): void {
  const now = Date.now()
  assert.ok(Math.abs(now - ms) < 500, `clock read ${ms}, Date.now() is ${now}`)
}

describe('the default clock under fake timers', () => {
  it('node:test mock.timers: follows the fake Date, including tick, then real time right after reset()', () => {
    assertFresh(cachedClock()) // a real reading is cached now
    mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 60_000 })
    try {
      assert.equal(cachedClock(), 60_000)
      mock.timers.tick(1500)
      assert.equal(cachedClock(), 61_500, 'a tick shows at once')
      assert.equal(cachedClock(), 61_500)
    } finally {
      // drops every fake timer, ours included if we had armed one through the fake
      mock.timers.reset()
    }
    for (let i = 0; i < 200; i++) assertFresh(cachedClock())
  })

  it('node:test mock.timers: a limiter decides on the fake time and on real time after reset (the store repro of issue 9)', () => {
    const rl = RateLimiting.newInstance('fake-timers')
    rl.new({ namespace: 'api', windowSizes: [60] })
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 1000, window: 60 }] })
    mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 0 })
    let fakeReset: number
    try {
      fakeReset = (limiter.hit('a') as { resetMs: number }).resetMs
    } finally {
      mock.timers.reset()
    }
    assert.equal(fakeReset, 60_000, 'at fake time 0 the 60 s window ends in 60 s')
    const real = limiter.hit('b') as { resetMs: number }
    // the window ends on a real minute boundary: now + resetMs lands on one (a few ms of slack
    // for the time between the decision and this read on a busy machine)
    const offset = (Date.now() + real.resetMs) % 60_000
    assert.ok(offset <= 50 || offset >= 59_950, `after reset the window is the real one (off by ${offset} ms)`)
  })

  it('@sinonjs/fake-timers: install, tick, setSystemTime (no timer fires) and uninstall', () => {
    assertFresh(cachedClock())
    const clock = FakeTimers.install({ now: 120_000 })
    try {
      assert.equal(cachedClock(), 120_000)
      clock.tick(250)
      assert.equal(cachedClock(), 120_250)
      clock.setSystemTime(900_000) // jest.setSystemTime: moves Date without firing any timer
      assert.equal(cachedClock(), 900_000)
    } finally {
      clock.uninstall()
    }
    for (let i = 0; i < 200; i++) assertFresh(cachedClock())
  })

  it('@sinonjs/fake-timers faking only the timers: the cache still expires in real time', async () => {
    const sleep = (ms: number) => realSleep(ms) // node:timers/promises, taken before the fake
    const clock = FakeTimers.install({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'setInterval'] })
    try {
      const first = cachedClock()
      await sleep(5)
      assert.ok(cachedClock() >= first + 4, 'a reading is dropped about 1 ms after it was taken, real time')
      clock.runAll() // a test that runs every fake timer runs none of ours
      await sleep(5)
      assertFresh(cachedClock())
    } finally {
      clock.uninstall()
    }
  })

  it('a copy of the clock loaded while timers were already fake never serves a reading past its turn once its timer is overdue', async () => {
    // The worst case: node:timers itself was faked when the module loaded, so its expiry timer is
    // fake and never fires. Once the timer is overdue (20 ms), a reading ends with its turn.
    mock.timers.enable({ apis: ['setTimeout'] })
    let fresh: () => number
    try {
      const url = new URL('../../src/core/clock.ts', import.meta.url)
      url.search = '?loaded-under-fake-timers'
      fresh = ((await import(url.href)) as { cachedClock: () => number }).cachedClock
      fresh() // arms a fake timer
      const until = Date.now() + 30
      while (Date.now() < until) {
        // block the loop: not even a real timer could fire now
      }
      for (let i = 0; i < 64; i++) fresh() // the overdue timer is found out at the next refresh
      for (let i = 0; i < 5; i++) {
        fresh()
        const next = Date.now() + 3
        // 3 ms pass, and turns end, between two reads (node:timers/promises is not faked here)
        while (Date.now() < next) await realSleep(1)
        assert.ok(fresh() >= next, 'a reading from an earlier turn is not served')
      }
    } finally {
      mock.timers.reset()
    }
  })

  it('within one long synchronous run, at most 63 reads in a row are behind the system clock', () => {
    let streak = 0
    let longest = 0
    const until = Date.now() + 20
    for (let before = Date.now(); before < until; before = Date.now()) {
      streak = cachedClock() < before ? streak + 1 : 0
      if (streak > longest) longest = streak
    }
    assert.ok(longest <= 63, `${longest} reads in a row were stale`)
  })
})
