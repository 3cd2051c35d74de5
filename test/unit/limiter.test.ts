import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ConfigError, createFakeClock, type Decision, type Limiter, MemoryStrategy, RateLimiting } from '../../src/index.js'

const MINUTE = 1_699_999_980_000

function setup(limits: { limit: number; window: number }[], opts: { countDenied?: boolean; windowSizes?: number[] } = {}) {
  const clock = createFakeClock(MINUTE)
  const rl = RateLimiting.newInstance('limiter-test')
  rl.new({ namespace: 'api', windowSizes: opts.windowSizes ?? [1, 60], clock: clock.now })
  const limiter = rl.limiter({ namespace: 'api', limits, ...(opts.countDenied === undefined ? {} : { countDenied: opts.countDenied }) })
  const hit = (key = 'k', cost = 1) => limiter.hit(key, cost) as Decision
  return { clock, rl, limiter, hit }
}

describe('limiter decisions', () => {
  it('denies the 11th request inside one window', () => {
    const { hit } = setup([{ limit: 10, window: 60 }])
    const outcomes = Array.from({ length: 11 }, () => hit().allowed)
    assert.deepEqual(outcomes, [...Array(10).fill(true), false])
  })

  it('allows a hit iff rate + cost <= limit', () => {
    const { hit } = setup([{ limit: 10, window: 60 }])
    assert.equal(hit('k', 7).allowed, true)
    assert.equal(hit('k', 4).allowed, false, '7 + 4 > 10')
    assert.equal(hit('j', 10).allowed, true, 'exactly the limit is allowed')
    assert.equal(hit('i', 11).allowed, false)
  })

  it('reports limit, remaining, rate, window and reset of the deciding limit', () => {
    const { hit, clock } = setup([{ limit: 10, window: 60 }])
    clock.advance(15_000)
    const d = hit('k', 3)
    assert.deepEqual(d, {
      allowed: true,
      name: '10-in-60s',
      limit: 10,
      window: 60,
      remaining: 7,
      rate: 3,
      resetMs: 45_000,
      retryAfterMs: 0,
      reason: 'limit',
    })
  })

  it('lets the most restrictive of several limits decide and lists them all', () => {
    const { hit } = setup([
      { limit: 3, window: 1 },
      { limit: 100, window: 60 },
    ])
    hit()
    hit()
    const third = hit()
    assert.equal(third.allowed, true)
    assert.equal(third.window, 1, 'fewest remaining decides while allowed')
    assert.equal(third.remaining, 0)
    const fourth = hit()
    assert.equal(fourth.allowed, false)
    assert.equal(fourth.window, 1)
    assert.deepEqual(
      fourth.policies?.map((p) => [p.window, p.remaining]),
      [
        [1, 0],
        [60, 96],
      ],
    )
  })

  it('breaks a tie in remaining hits in favour of the larger window', () => {
    const { hit } = setup([
      { limit: 5, window: 1 },
      { limit: 5, window: 60 },
    ])
    assert.equal(hit().window, 60)
  })

  it('counts denied hits by default (penalty) and not with countDenied: false', () => {
    const penalised = setup([{ limit: 2, window: 60 }])
    for (let i = 0; i < 5; i++) penalised.hit()
    assert.equal(penalised.rl.slidingWindow('k', 60, undefined, 'api'), 5)
    const lenient = setup([{ limit: 2, window: 60 }], { countDenied: false })
    for (let i = 0; i < 5; i++) lenient.hit()
    assert.equal(lenient.rl.slidingWindow('k', 60, undefined, 'api'), 2)
  })

  it('does not count anything when one of several limits denies and countDenied is false', () => {
    const { hit, rl } = setup(
      [
        { limit: 1, window: 1 },
        { limit: 10, window: 60 },
      ],
      { countDenied: false },
    )
    hit()
    assert.equal(hit().allowed, false)
    assert.equal(rl.slidingWindow('k', 60, undefined, 'api'), 1)
  })

  it('gives an exact retry time: denied 1 ms before it, allowed at it', () => {
    for (const countDenied of [true, false]) {
      const { hit, clock, limiter } = setup([{ limit: 10, window: 60 }], { countDenied })
      clock.advance(50_000)
      for (let i = 0; i < 10; i++) hit()
      clock.advance(11_000) // 1 s into the next window: previous 10 at weight 59/60
      const denied = hit()
      assert.equal(denied.allowed, false)
      assert.ok(denied.retryAfterMs > 0)
      clock.advance(denied.retryAfterMs - 1)
      assert.equal((limiter.peek('k') as Decision).allowed, false, `countDenied ${countDenied}: 1 ms early`)
      clock.advance(1)
      assert.equal((limiter.peek('k') as Decision).allowed, true, `countDenied ${countDenied}: on time`)
    }
  })

  it('gives an exact retry time when the current window alone is over the limit', () => {
    const { hit, clock, limiter } = setup([{ limit: 5, window: 60 }])
    clock.advance(10_000)
    for (let i = 0; i < 8; i++) hit()
    const d = hit()
    assert.equal(d.allowed, false)
    assert.ok(d.retryAfterMs > 50_000, 'must wait past the end of this window')
    clock.advance(d.retryAfterMs - 1)
    assert.equal((limiter.peek('k') as Decision).allowed, false)
    clock.advance(1)
    assert.equal((limiter.peek('k') as Decision).allowed, true)
  })

  it('gives an exact retry time with several limits, when the counted denial fills a limit that allowed it', () => {
    // 2 a second and 3 a minute: the 3rd hit is denied by the second's limit and, counted, fills
    // the minute's; a retry when the second's limit lets it through is still denied
    for (const countDenied of [true, false]) {
      const { hit, clock, limiter } = setup(
        [
          { limit: 2, window: 1 },
          { limit: 3, window: 60 },
        ],
        { countDenied },
      )
      clock.advance(10_000)
      hit()
      hit()
      const denied = hit()
      assert.equal(denied.allowed, false)
      const minute = denied.policies?.find((p) => p.window === 60)
      if (countDenied) {
        assert.equal(denied.window, 60, 'the limit that holds the retry longest decides')
        assert.ok((minute?.retryAfterMs ?? 0) > 1000, "the minute's own wait is reported")
      } else assert.equal(minute?.retryAfterMs, 0, 'an uncounted denial leaves the minute room for one more')
      clock.advance(denied.retryAfterMs - 1)
      assert.equal((limiter.peek('k') as Decision).allowed, false, `countDenied ${countDenied}: 1 ms early`)
      clock.advance(1)
      assert.equal((limiter.peek('k') as Decision).allowed, true, `countDenied ${countDenied}: on time`)
    }
  })

  it('peeks without counting and resets a key', async () => {
    const { hit, limiter, rl } = setup([{ limit: 2, window: 60 }])
    hit()
    const p = limiter.peek('k') as Decision
    assert.equal(p.allowed, true)
    assert.equal(p.remaining, 1)
    assert.equal(rl.slidingWindow('k', 60, undefined, 'api'), 1)
    hit()
    assert.equal((limiter.peek('k') as Decision).allowed, false)
    await limiter.reset('k')
    assert.equal(rl.slidingWindow('k', 60, undefined, 'api'), 0)
    assert.equal(hit().allowed, true)
  })

  it('slides: no burst at the window boundary', () => {
    const { hit, clock } = setup([{ limit: 10, window: 60 }])
    clock.advance(59_000)
    for (let i = 0; i < 10; i++) assert.equal(hit().allowed, true)
    clock.advance(1_000) // the new window: previous 10 at weight 1
    assert.equal(hit().allowed, false, 'a fixed window would allow 10 more here')
  })

  it('refuses bad limiter options with a ConfigError naming them', () => {
    const { rl } = setup([{ limit: 1, window: 60 }])
    const bad: [unknown, RegExp][] = [
      [{ namespace: 'api', limits: [] }, /limits must be a non-empty array/],
      [
        { namespace: 'api', limits: [{ limit: 0, window: 60 }] },
        /limits\[0\]\.limit must be a positive number or a function of the key, got 0/,
      ],
      [
        { namespace: 'api', limits: [{ limit: 5, window: 30 }] },
        /limits\[0\]\.window 30 is not one of namespace "api"'s windowSizes \[1, 60\]/,
      ],
      [
        {
          namespace: 'api',
          limits: [
            { limit: 5, window: 60 },
            { limit: 6, window: 60 },
          ],
        },
        /limits\[1\]\.window 60 appears twice/,
      ],
      [{ namespace: 'api', limits: [{ limit: 5, window: 60 }], countDenied: 'yes' }, /countDenied must be a boolean/],
    ]
    for (const [options, message] of bad) {
      assert.throws(
        () => rl.limiter(options as never),
        (err: unknown) => err instanceof ConfigError && message.test(err.message),
      )
    }
    assert.throws(() => rl.limiter({ namespace: 'nope', limits: [{ limit: 1, window: 60 }] }), /namespace "nope" is not defined/)
  })

  it('refuses a bad cost per hit', () => {
    const { limiter } = setup([{ limit: 10, window: 60 }])
    assert.throws(() => limiter.hit('k', -1), RangeError)
    assert.throws(() => limiter.hit('k', Number.NaN), RangeError)
    assert.throws(() => limiter.hit(42 as never), TypeError)
  })
})

describe('limiter in synchronous mode', () => {
  function fleet(n: number, limit: number, countDenied = true) {
    const clock = createFakeClock(MINUTE)
    const store = new MemoryStrategy()
    return {
      store,
      clock,
      limiters: Array.from({ length: n }, (_, i) => {
        const rl = RateLimiting.newInstance(`sync-${i}`)
        rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0, strategy: store, clock: clock.now })
        return rl.limiter({ namespace: 'api', limits: [{ limit, window: 60 }], countDenied })
      }),
    }
  }

  it('costs one store round trip per hit', async () => {
    const { store, limiters } = fleet(1, 10)
    const before = store.calls.pushDiffs
    for (let i = 0; i < 5; i++) await limiters[0]?.hit('k')
    assert.equal(store.calls.pushDiffs - before, 5)
  })

  it('admits exactly the limit when instances sharing a store hit concurrently', async () => {
    for (const countDenied of [true, false]) {
      const { limiters } = fleet(4, 50, countDenied)
      const decisions = await Promise.all(Array.from({ length: 200 }, (_, i) => limiters[i % 4]?.hit('user')))
      assert.equal(decisions.filter((d) => d?.allowed).length, 50, `countDenied ${countDenied}`)
    }
  })

  it('with countDenied false, a hit sent while a denied hit is being taken back is still counted in the store', async () => {
    // A denied hit is taken back by a push in the background. A hit sent before that push is
    // acknowledged finds its local count equal to the acknowledged one; it must still write,
    // or the store orders nothing and the hit is admitted without being stored.
    for (const gap of ['back-to-back', 'awaited'] as const) {
      const { store, limiters } = fleet(1, 2, false)
      const limiter = limiters[0] as Limiter
      assert.deepEqual([(await limiter.hit('k')).allowed, (await limiter.hit('k')).allowed], [true, true])
      const outcomes =
        gap === 'back-to-back'
          ? (await Promise.all([limiter.hit('k'), limiter.hit('k'), limiter.hit('k')])).map((d) => d.allowed)
          : [(await limiter.hit('k')).allowed, (await limiter.hit('k')).allowed, (await limiter.hit('k')).allowed]
      assert.deepEqual(outcomes, [false, false, false], gap)
      await new Promise((resolve) => setImmediate(resolve)) // the take-backs land
      const row = await store.getWindow('k', 'api', Math.floor(MINUTE / 60_000) * 60_000, 60_000)
      assert.equal(row.count, 2, `${gap}: the store holds exactly the two admitted hits`)
      assert.equal((await limiter.peek('k')).remaining, 0, gap)
    }
  })

  it('decides by onStoreError when the store is down, and says why', async () => {
    for (const onStoreError of ['allow', 'deny', 'local'] as const) {
      const store = new MemoryStrategy()
      const rl = RateLimiting.newInstance('down')
      rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0, strategy: store, onStoreError, onError: () => {} })
      const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 1, window: 60 }] })
      store.down()
      const first = await limiter.hit('k')
      const second = await limiter.hit('k')
      if (onStoreError === 'local') {
        assert.deepEqual([first.allowed, second.allowed], [true, false], 'local counts decide')
      } else {
        assert.equal(first.allowed, onStoreError === 'allow')
        assert.equal(first.storeError?.code, 'STORE_UNAVAILABLE')
      }
      await rl.close().catch(() => undefined)
    }
  })

  it('never hangs on a store that does not answer: the timeout decides', async () => {
    const store = new MemoryStrategy()
    const rl = RateLimiting.newInstance('hang')
    rl.new({
      namespace: 'api',
      windowSizes: [60],
      syncRate: 0,
      strategy: store,
      storeTimeoutMs: 20,
      onStoreError: 'deny',
      onError: () => {},
    })
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 5, window: 60 }] })
    store.hang()
    const d = await limiter.hit('k')
    assert.equal(d.allowed, false)
    assert.equal(d.storeError?.code, 'STORE_TIMEOUT')
    store.up()
    await rl.close()
  })
})

describe('limiter.allow() and limiter.counts()', () => {
  it('allow() answers what hit() would, counting the same, for one limit and for several', async () => {
    for (const limits of [
      [{ limit: 3, window: 60 }],
      [
        { limit: 3, window: 1 },
        { limit: 5, window: 60 },
      ],
    ]) {
      const a = setup(limits)
      const b = setup(limits)
      for (let i = 0; i < 6; i++) assert.equal(a.limiter.allow('k'), b.hit('k').allowed, `hit ${i}`)
      assert.deepEqual(a.limiter.counts('k'), b.limiter.counts('k'))
    }
    // in a synchronous namespace, a Promise of the same answer
    const rl = RateLimiting.newInstance('allow-sync')
    rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0, strategy: new MemoryStrategy() })
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 1, window: 60 }] })
    assert.deepEqual([await limiter.allow('k'), await limiter.allow('k')], [true, false])
    await rl.close()
  })

  it('counts() gives each window its current and previous totals and reset, counting nothing', () => {
    const { clock, limiter, hit } = setup([
      { limit: 100, window: 1 },
      { limit: 1000, window: 60 },
    ])
    hit('k', 4)
    clock.advance(1_250) // into the next 1 s window, the same 60 s one
    hit('k', 2)
    assert.deepEqual(limiter.counts('k'), [
      { name: '100-in-1s', window: 1, current: 2, previous: 4, resetMs: 750 },
      { name: '1000-in-60s', window: 60, current: 6, previous: 0, resetMs: 58_750 },
    ])
    assert.deepEqual(limiter.counts('k'), limiter.counts('k'), 'reading counts nothing')
    assert.deepEqual(limiter.counts('nobody')[0], { name: '100-in-1s', window: 1, current: 0, previous: 0, resetMs: 750 })
  })

  it('exposes the clock it decides by', () => {
    const { clock, limiter } = setup([{ limit: 1, window: 60 }])
    assert.equal(limiter.clock(), clock.now())
  })
})
