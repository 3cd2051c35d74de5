import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { Options } from 'express-rate-limit'
import { policyName } from '../../src/adapters/common.js'
import { RateLimitingStore } from '../../src/adapters/express.js'
import { createFastifyStore } from '../../src/adapters/fastify.js'
import { ConfigError, createFakeClock, MemoryStrategy, RateLimiting } from '../../src/index.js'

const MINUTE = 1_699_999_980_000

function initialised(store: RateLimitingStore, windowMs: number, limit = 10): RateLimitingStore {
  store.init({ windowMs, limit } as Options)
  return store
}

type Result = { current: number; ttl: number }

function incr(
  store: {
    incr: (key: string, cb: (e: Error | null, r?: Result) => void, w: number, m: number) => void
  },
  key: string,
  w: number,
  max: number,
) {
  let out: Result | Error | undefined
  store.incr(
    key,
    (err, res) => {
      out = err ?? res
    },
    w,
    max,
  )
  return out
}

describe('policy names', () => {
  it("follows express-rate-limit's identifier", () => {
    assert.equal(policyName(100, 15 * 60_000), '100-in-15min')
    assert.equal(policyName(5, 30_000), '5-in-30sec')
    assert.equal(policyName(10, 3_600_000), '10-in-1hr')
    assert.equal(policyName(10, 7_200_000), '10-in-2hrs')
    assert.equal(policyName(1000, 86_400_000), '1000-in-1day')
  })
})

describe('RateLimitingStore without express', () => {
  it('answers increment synchronously in local memory with the sliding count rounded up', () => {
    const clock = createFakeClock(MINUTE + 30_000)
    const store = initialised(new RateLimitingStore({ clock: clock.now }), 60_000)
    for (let i = 1; i <= 3; i++) assert.equal((store.increment('k') as { totalHits: number }).totalHits, i)
    clock.set(MINUTE + 60_000 + 20_000) // 3 * 2/3 = 2 still weigh
    const info = store.increment('k') as { totalHits: number; resetTime: Date }
    assert.equal(info.totalHits, 3)
    const left = info.resetTime.getTime() - Date.now()
    assert.ok(left > 39_000 && left <= 40_000, `resetTime is the end of the window: ${left} ms`)
    clock.advance(6_000) // 3 * 34/60 + 2 = 3.7: rounded up to 4
    assert.equal((store.increment('k') as { totalHits: number }).totalHits, 4)
  })

  it('resets at the end of the window on the default clock, one Date per window', () => {
    const store = initialised(new RateLimitingStore(), 60_000)
    const a = store.increment('a') as { resetTime: Date }
    const b = store.increment('b') as { resetTime: Date }
    assert.equal(a.resetTime.getTime() % 60_000, 0, 'a window end, aligned to the minute')
    assert.ok(a.resetTime.getTime() - Date.now() <= 60_000 && a.resetTime.getTime() > Date.now() - 1000)
    assert.equal(b.resetTime, a.resetTime, 'shared while the window lasts')
  })

  it('takes hits back without going below zero', () => {
    const clock = createFakeClock(MINUTE)
    const store = initialised(new RateLimitingStore({ clock: clock.now }), 60_000)
    store.increment('k')
    store.decrement('k')
    store.decrement('k')
    assert.equal((store.increment('k') as { totalHits: number }).totalHits, 1)
  })

  it('uses a namespace you defined, and refuses a window it does not have', () => {
    const rl = RateLimiting.newInstance('store-user')
    rl.new({ namespace: 'api', windowSizes: [60] })
    const store = initialised(new RateLimitingStore({ rateLimiting: rl, namespace: 'api' }), 60_000)
    store.increment('k')
    assert.equal(rl.slidingWindow('k', 60, undefined, 'api'), 1)
    assert.equal(store.localKeys, true)
    assert.throws(
      () => initialised(new RateLimitingStore({ rateLimiting: rl, namespace: 'api' }), 1000),
      /RateLimitingStore: windowMs 1000 ms: .*window 1 is not one of namespace "api"'s windowSizes \[60\]/,
    )
    assert.throws(() => new RateLimitingStore({ rateLimiting: rl }), /rateLimiting needs namespace/)
    assert.throws(
      () =>
        new RateLimitingStore({
          rateLimiting: rl,
          namespace: 'api',
          clock: Date.now,
        }),
      /clock cannot be combined/,
    )
  })

  it('counts in windows of any whole number of ms (50 ms here), with the reset at the window end', () => {
    const clock = createFakeClock(MINUTE + 20)
    const store = initialised(new RateLimitingStore({ clock: clock.now }), 50, 2)
    const first = store.increment('k') as { totalHits: number; resetTime: Date }
    assert.equal(first.totalHits, 1)
    const left = first.resetTime.getTime() - Date.now()
    assert.ok(left > 20 && left <= 30, `30 ms to the end of the 50 ms window: ${left}`)
    store.increment('k')
    clock.advance(50) // 20 ms into the next window: 2 * 30/50 = 1.2 still weigh
    assert.equal((store.increment('k') as { totalHits: number }).totalHits, 3)
    clock.advance(100) // two windows later nothing weighs
    assert.equal((store.increment('k') as { totalHits: number }).totalHits, 1)
  })

  it('refuses a windowMs that is not a positive whole number of ms when initialised, naming it', () => {
    for (const windowMs of [0, -1, Number.NaN, 1.5, 2 ** 60])
      assert.throws(
        () => initialised(new RateLimitingStore(), windowMs),
        (err: unknown) =>
          err instanceof ConfigError && /RateLimitingStore: windowMs must be a positive whole number of ms/.test(err.message),
        `windowMs ${windowMs}`,
      )
  })

  it('explains a store used before init', () => {
    assert.throws(
      () => new RateLimitingStore().increment('k'),
      (err: unknown) => err instanceof ConfigError && /init\(\) was not called/.test(err.message),
    )
  })

  it('is not local with a strategy, and answers a Promise then', async () => {
    const strategy = new MemoryStrategy()
    const store = initialised(new RateLimitingStore({ strategy }), 60_000)
    assert.equal(store.localKeys, false)
    const info = store.increment('k')
    assert.ok(info instanceof Promise)
    assert.equal((await info).totalHits, 1)
    await store.shutdown()
  })
})

describe('createFastifyStore without fastify', () => {
  it('answers incr through the callback synchronously in local memory', () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const Store = createFastifyStore({ clock: clock.now })
    const store = new Store({})
    assert.deepEqual(incr(store, 'k', 60_000, 2), { current: 1, ttl: 44_700 })
    assert.deepEqual(incr(store, 'k', 60_000, 2), { current: 2, ttl: 44_700 })
    // over the limit: the ttl is the wait until a request fits again (3 * (1 - p) + 1 <= 2)
    assert.deepEqual(incr(store, 'k', 60_000, 2), {
      current: 3,
      ttl: 44_700 + 40_000,
    })
    assert.deepEqual(incr(store, 'k', 1000, 2), { current: 1, ttl: 700 }, 'another window size counts apart')
  })

  it('gives the exact wait over the limit, before the window ends when the previous window weighs most', () => {
    const clock = createFakeClock(MINUTE)
    const store = new (createFastifyStore({ clock: clock.now }))({})
    for (let i = 0; i < 20; i++) incr(store, 'k', 60_000, 100)
    clock.set(MINUTE + 60_000 + 15_000) // 20 * 0.75 = 15 already
    // 1 + 20 * (1 - p) + 1 <= 10 from p = 0.6: 36 s into the window, 21 s from now (the window ends in 45 s)
    assert.deepEqual(incr(store, 'k', 60_000, 10), { current: 16, ttl: 21_000 })
  })

  it('counts in a timeWindow of 500 ms', () => {
    const clock = createFakeClock(MINUTE + 100)
    const store = new (createFastifyStore({ clock: clock.now }))({ timeWindow: 500, max: 1 } as never)
    assert.deepEqual(incr(store, 'k', 500, 1), { current: 1, ttl: 400 })
    // over the limit: 2 * (1 - p) + 1 <= 1 only when the next window ends, 900 ms from now
    assert.deepEqual(incr(store, 'k', 500, 1), { current: 2, ttl: 900 })
  })

  it('refuses a bad timeWindow at registration, or through the callback when it comes per request', () => {
    const Store = createFastifyStore()
    for (const timeWindow of [0, -1, Number.NaN, 1.5])
      assert.throws(
        () => new Store({ timeWindow, max: 2 } as never),
        (err: unknown) =>
          err instanceof ConfigError && /createFastifyStore: timeWindow must be a positive whole number of ms/.test(err.message),
        `timeWindow ${timeWindow}`,
      )
    // a timeWindow function of the request is only known per request
    const err = incr(new Store({}), 'k', 0, 2)
    assert.ok(err instanceof ConfigError && /timeWindow must be a positive whole number of ms, got 0/.test(err.message))
  })

  it('refuses bad options when the class is made', () => {
    assert.throws(() => createFastifyStore({ strategy: {} as MemoryStrategy }), /strategy must be an engine strategy/)
    assert.throws(() => createFastifyStore({ namespace: '' }), /namespace must be a non-empty string/)
  })
})
