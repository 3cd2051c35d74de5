/**
 * The simple API against a central store, as a suite any store can run:
 * `runSimpleStoreSuite({ name: 'memory', makeStore: () => new MemoryStrategy() })` here, and the
 * same call with a memcached (simple-memcached.test.ts) or Redis (simple-redis.test.ts) strategy
 * in an integration test against a real server.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { describe, it } from 'node:test'
import { createFakeClock, type Strategy } from '../../src/index.js'
import { perMinute, perNMinute, perSecond } from '../../src/simple/index.js'

export interface SimpleStoreSuiteOptions {
  /** Shown in the test names. */
  readonly name: string
  /** A fresh store; limiters of one test share the store it returns. */
  readonly makeStore: () => Strategy | Promise<Strategy>
  /** Closes what `makeStore` opened, once per test. @default store.close() */
  readonly closeStore?: (store: Strategy) => Promise<void>
}

const HALF_HOUR = 1_800_000

/** A fake time on a 30-minute boundary a little ahead of the real one (stores with TTLs see sane times). */
function startMs(): number {
  return Math.ceil(Date.now() / HALF_HOUR) * HALF_HOUR + HALF_HOUR
}

export function runSimpleStoreSuite(options: SimpleStoreSuiteOptions): void {
  const { name, makeStore } = options
  const closeStore = options.closeStore ?? ((store: Strategy) => store.close())

  async function withStore(test: (store: Strategy, ns: string) => Promise<void>): Promise<void> {
    const store = await makeStore()
    try {
      await test(store, `simple-suite-${randomUUID().slice(0, 8)}`)
    } finally {
      await closeStore(store)
    }
  }

  describe(`simple API with a ${name} store`, () => {
    it('lets concurrent callers of two processes take exactly the limit, never one more', () =>
      withStore(async (store, ns) => {
        const clock = createFakeClock(startMs() + 5_000)
        const a = perMinute(10, { store, name: ns, clock: clock.now })
        const b = perMinute(10, { store, name: ns, clock: clock.now })
        const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? a : b).allow('hot')))
        assert.equal(answers.filter(Boolean).length, 10, 'exactly the limit across both processes')
        const stats = await a.allowWithStats('hot')
        assert.equal(stats.allow, false)
        assert.equal(stats.currentCounter, 10, 'denied calls were taken back, allowed ones stay')
        await a.close()
        await b.close()
      }))

    it('answers a Promise with a store and a boolean without one', () =>
      withStore(async (store, ns) => {
        const clock = createFakeClock(startMs())
        const limiter = perSecond(2, { name: ns, clock: clock.now })
        assert.equal(limiter.allow('k'), true)
        assert.equal(limiter.store, undefined)
        limiter.store = store
        assert.equal(limiter.store, store)
        const answer = limiter.allow('k')
        assert.ok(answer instanceof Promise)
        assert.equal(await answer, true, 'a new store starts counting afresh')
        assert.equal(await limiter.allow('k'), true)
        assert.equal(await limiter.allow('k'), false)
        limiter.store = undefined
        assert.equal(limiter.allow('k'), true, 'back to local memory')
        await limiter.close()
      }))

    it('keeps the previous window of a 30-minute limit for a process that never saw the key', () =>
      withStore(async (store, ns) => {
        const t0 = startMs()
        const clock = createFakeClock(t0)
        const first = perNMinute(10, 30, { store, name: ns, clock: clock.now })
        for (let i = 0; i < 10; i++) assert.equal(await first.allow('k'), true)
        await first.close()
        clock.set(t0 + 45 * 60_000) // half way through the next 30-minute window
        const fresh = perNMinute(10, 30, { store, name: ns, clock: clock.now })
        const stats = await fresh.allowWithStats('k')
        assert.equal(stats.previousWindowUseCount, 5, 'the store still holds the previous window')
        const rest = await Promise.all(Array.from({ length: 6 }, () => fresh.allow('k')))
        assert.deepEqual(rest, [true, true, true, true, false, false], '5 + 5 = 10')
        await fresh.close()
      }))

    it('never reuses the count of an older window with the same position in the minute', () =>
      withStore(async (store, ns) => {
        const clock = createFakeClock(startMs() + 7_000)
        const limiter = perSecond(3, { store, name: ns, clock: clock.now })
        for (let i = 0; i < 3; i++) assert.equal(await limiter.allow('k'), true)
        assert.equal(await limiter.allow('k'), false)
        clock.advance(60_000) // second 7 of the next minute: the Go limiter's key "k#7" again
        assert.deepEqual(await Promise.all([limiter.allow('k'), limiter.allow('k'), limiter.allow('k')]), [true, true, true])
        await limiter.close()
      }))

    it('resets a key for every process sharing the store', () =>
      withStore(async (store, ns) => {
        const clock = createFakeClock(startMs())
        const a = perMinute(2, { store, name: ns, clock: clock.now })
        const b = perMinute(2, { store, name: ns, clock: clock.now })
        await a.allow('k')
        await b.allow('k')
        assert.equal(await a.allow('k'), false)
        await b.reset('k')
        assert.equal(await a.allow('k'), true)
        assert.equal(await b.allow('k'), true)
        assert.equal(await a.allow('k'), false)
        await a.close()
        await b.close()
      }))
  })
}
