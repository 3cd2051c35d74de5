/**
 * limiter.acquire() and limiter.schedule(): FIFO per key, one timer per key, abort, maxWaitMs,
 * maxQueue, a cost above the limit, close, and never a denied try counted; in local, periodic
 * and synchronous namespaces on MemoryStrategy. Time is @sinonjs/fake-timers' (setTimeout and
 * the namespace's injected clock move together); nothing sleeps.
 */
import assert from 'node:assert/strict'
import { afterEach, beforeEach, describe, it } from 'node:test'
import FakeTimers from '@sinonjs/fake-timers'
import { AcquireError, ConfigError, type Decision, type Limiter, MemoryStrategy, RateLimiting } from '../../src/index.js'

const T0 = 1_700_000_000_000 // a whole second: windows of 1 s start here

let timers: ReturnType<typeof FakeTimers.install>
beforeEach(() => {
  timers = FakeTimers.install({ now: T0, toFake: ['setTimeout', 'clearTimeout'] })
})
afterEach(() => timers.uninstall())

type Mode = 'local' | 'periodic' | 'synchronous'
const syncRates: Record<Mode, number> = { local: -1, periodic: 0.1, synchronous: 0 }

function setup(
  opts: { mode?: Mode; limit?: number; countDenied?: boolean; maxQueue?: number; strategy?: MemoryStrategy; name?: string } = {},
) {
  const mode = opts.mode ?? 'local'
  const rl = RateLimiting.newInstance(opts.name ?? 'acquire-test')
  rl.new({
    namespace: 'api',
    windowSizes: [1],
    syncRate: syncRates[mode],
    clock: () => timers.now,
    autoSync: false,
    ...(mode === 'local' ? {} : { strategy: opts.strategy ?? new MemoryStrategy() }),
  })
  const limiter = rl.limiter({
    namespace: 'api',
    limits: [{ limit: opts.limit ?? 2, window: 1 }],
    ...(opts.countDenied === undefined ? {} : { countDenied: opts.countDenied }),
    ...(opts.maxQueue === undefined ? {} : { maxQueue: opts.maxQueue }),
  })
  return { rl, limiter }
}

/** Hits this process counts for `key` in the current and previous window. */
function counted(limiter: Limiter, key: string): number {
  const [c] = limiter.counts(key, timers.now)
  return (c?.current ?? 0) + (c?.previous ?? 0)
}

/** Starts `n` acquires and records the order (and fake time) in which they resolve. */
function acquireMany(limiter: Limiter, key: string, n: number) {
  const resolved: { i: number; atMs: number }[] = []
  const promises = Array.from({ length: n }, (_, i) =>
    limiter.acquire(key).then((d) => {
      resolved.push({ i, atMs: timers.now - T0 })
      return d
    }),
  )
  return { resolved, promises }
}

/** Lets store calls answer: a few turns of the real event loop (setImmediate is not faked). */
async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setImmediate(resolve))
}

async function rejection(p: Promise<unknown>): Promise<AcquireError> {
  const err = await p.then(
    () => assert.fail('expected a rejection'),
    (e: unknown) => e,
  )
  assert.ok(err instanceof AcquireError, `an AcquireError, got ${String(err)}`)
  return err
}

for (const mode of ['local', 'periodic', 'synchronous'] as const) {
  describe(`acquire (${mode} mode, MemoryStrategy)`, () => {
    it('serves the waiters of a key in FIFO order, each as soon as its exact retryAfterMs allows', async () => {
      const { rl, limiter } = setup({ mode })
      const { resolved, promises } = acquireMany(limiter, 'k', 5)
      await timers.tickAsync(0)
      assert.deepEqual(
        resolved.map((r) => r.i),
        [0, 1],
        'the limit of 2 is admitted at once',
      )
      await timers.tickAsync(3000)
      const decisions = await Promise.all(promises)
      assert.deepEqual(
        resolved.map((r) => r.i),
        [0, 1, 2, 3, 4],
      )
      // 2 in [0, 1000): the next hit fits when 2 * (1 - p) + 1 <= 2, at p = 0.5 of the next
      // window; at 2000, 0 + 1 * 1 + 1 <= 2; then 1 + 1 * (1 - p) + 1 <= 2 only at p = 1
      assert.deepEqual(
        resolved.map((r) => r.atMs),
        [0, 0, 1500, 2000, 3000],
      )
      assert.ok(decisions.every((d) => d.allowed))
      assert.equal(counted(limiter, 'k'), 2, 'the hits at 2000 (previous window) and 3000 (current), no more')
      await rl.close()
    })

    it('never counts a denied try, even with countDenied: true', async () => {
      const { rl, limiter } = setup({ mode, countDenied: true, limit: 3 })
      const { resolved, promises } = acquireMany(limiter, 'k', 10)
      await timers.tickAsync(0)
      assert.equal(counted(limiter, 'k'), 3)
      for (let t = 0; t < 2000; t++) await timers.tickAsync(5) // many wake-ups, each a try
      await Promise.all(promises)
      const start = Math.floor(timers.now / 1000) * 1000 - T0
      const [c] = limiter.counts('k', timers.now)
      assert.equal(c?.current, resolved.filter((r) => r.atMs >= start).length, 'the current window holds its admitted hits only')
      assert.equal(c?.previous, resolved.filter((r) => r.atMs >= start - 1000 && r.atMs < start).length)
      await rl.close()
    })

    it('rejects at once a cost above the limit, counting nothing', async () => {
      const { rl, limiter } = setup({ mode, limit: 2 })
      const err = await rejection(limiter.acquire('k', 3))
      assert.equal(err.code, 'NEVER_ALLOWED')
      assert.equal(err.key, 'k')
      assert.equal(counted(limiter, 'k'), 0)
      await rl.close()
    })

    it('rejects with ACQUIRE_TIMEOUT up front when retryAfterMs exceeds maxWaitMs, counting nothing', async () => {
      const { rl, limiter } = setup({ mode, limit: 2 })
      await limiter.acquire('k')
      await limiter.acquire('k')
      const late = limiter.acquire('k', 1, { maxWaitMs: 1499 }) // admitted at 1500 at the earliest
      const inTime = limiter.acquire('k', 1, { maxWaitMs: 2500 })
      const err = await rejection(late)
      assert.equal(err.code, 'ACQUIRE_TIMEOUT')
      assert.equal(timers.now, T0, 'rejected before any wait')
      await settle() // synchronous mode: inTime's denied try is taken back when the store answers
      assert.equal(counted(limiter, 'k'), 2)
      const behind = await rejection(limiter.acquire('k', 1, { maxWaitMs: 1000 }))
      assert.match(behind.message, /admitted in 1500 ms at the earliest/, 'rejected at once: the queue sleeps until 1500')
      await timers.tickAsync(1500)
      assert.equal((await inTime).allowed, true, 'the next waiter took the turn')
      assert.equal(timers.now, T0 + 1500)
      await rl.close()
    })

    it('maxWaitMs: 0 admits now or rejects', async () => {
      const { rl, limiter } = setup({ mode, limit: 1 })
      assert.equal((await limiter.acquire('k', 1, { maxWaitMs: 0 })).allowed, true)
      assert.equal((await rejection(limiter.acquire('k', 1, { maxWaitMs: 0 }))).code, 'ACQUIRE_TIMEOUT')
      await rl.close()
    })

    it('rejects on abort with the signal reason as cause, counts nothing, and the queue goes on', async () => {
      const { rl, limiter } = setup({ mode, limit: 1 })
      await limiter.acquire('k')
      const controller = new AbortController()
      const first = limiter.acquire('k', 1, { signal: controller.signal })
      const second = limiter.acquire('k')
      await timers.tickAsync(100)
      const reason = new Error('user left')
      controller.abort(reason)
      const err = await rejection(first)
      assert.equal(err.code, 'ACQUIRE_ABORTED')
      assert.equal(err.cause, reason)
      await timers.tickAsync(2000)
      assert.equal((await second).allowed, true)
      assert.equal(counted(limiter, 'k'), 1, 'the second hit (this window); the aborted one never counted')
      const aborted = await rejection(limiter.acquire('k', 1, { signal: AbortSignal.abort('gone') }))
      assert.equal(aborted.code, 'ACQUIRE_ABORTED')
      assert.equal(aborted.cause, 'gone')
      await rl.close()
    })

    it('rejects pending acquires with ACQUIRE_CLOSED when the instance closes', async () => {
      const { rl, limiter } = setup({ mode, limit: 1 })
      await limiter.acquire('k')
      const pending = [limiter.acquire('k'), limiter.acquire('k'), limiter.acquire('j')]
      await timers.tickAsync(0)
      await rl.close()
      for (const p of pending.slice(0, 2)) assert.equal((await rejection(p)).code, 'ACQUIRE_CLOSED')
      await pending[2] // j was admitted at once
      if (mode !== 'synchronous') assert.equal(timers.countTimers(), 0, 'no timer left behind') // (store-call deadlines aside)
      await assert.rejects(limiter.acquire('k'), { code: 'NAMESPACE_CLOSED' })
    })

    it('schedule runs fn when admitted and returns its result; a failing fn still counts its hit', async () => {
      const { rl, limiter } = setup({ mode, limit: 1 })
      assert.equal(await limiter.schedule('k', () => 42), 42)
      const later = limiter.schedule('k', async () => 'later')
      await timers.tickAsync(2000)
      assert.equal(await later, 'later')
      const failing = limiter.schedule('j', () => {
        throw new Error('api down')
      })
      await assert.rejects(failing, /api down/)
      assert.equal(counted(limiter, 'j'), 1, 'admitted and used: it counts')
      await assert.rejects(limiter.schedule('k', 'nope' as never), TypeError)
      await rl.close()
    })
  })
}

describe('acquire: one queue and one timer per key', () => {
  it('keeps one timer per key however many wait', async () => {
    const { rl, limiter } = setup({ limit: 1 })
    const all = [...acquireMany(limiter, 'a', 100).promises, ...acquireMany(limiter, 'b', 100).promises]
    await timers.tickAsync(0)
    assert.equal(timers.countTimers(), 2, 'one timer for a, one for b')
    await timers.tickAsync(10)
    assert.equal(timers.countTimers(), 2)
    await timers.tickAsync(200_000)
    await Promise.all(all)
    assert.equal(timers.countTimers(), 0, 'an empty queue leaves no timer')
    await rl.close()
  })

  it('bounds the waiters of a key with maxQueue (QUEUE_FULL), per key', async () => {
    const { rl, limiter } = setup({ limit: 1, maxQueue: 2 })
    await limiter.acquire('k')
    const waiting = [limiter.acquire('k'), limiter.acquire('k')]
    const err = await rejection(limiter.acquire('k'))
    assert.equal(err.code, 'QUEUE_FULL')
    assert.match(err.message, /maxQueue 2/)
    const other = limiter.acquire('j') // another key has its own queue
    await timers.tickAsync(5000)
    await Promise.all([...waiting, other])
    await rl.close()
  })

  it('a waiter behind the head whose deadline comes before the head is admitted is rejected then', async () => {
    const { rl, limiter } = setup({ limit: 1 })
    await limiter.acquire('k')
    const head = limiter.acquire('k')
    const short = limiter.acquire('k', 1, { maxWaitMs: 500 })
    assert.equal((await rejection(short)).code, 'ACQUIRE_TIMEOUT')
    await timers.tickAsync(2000)
    await head
    await rl.close()
  })

  it('validates options: maxQueue once at limiter(), per-call options with errors naming them', async () => {
    const rl = RateLimiting.newInstance('acquire-options')
    rl.new({ namespace: 'api', windowSizes: [1], clock: () => timers.now })
    assert.throws(() => rl.limiter({ namespace: 'api', limits: [{ limit: 1, window: 1 }], maxQueue: 0 }), ConfigError)
    assert.throws(
      () => rl.limiter({ namespace: 'api', limits: [{ limit: 1, window: 1 }], maxQueue: 1.5 }),
      /maxQueue must be a positive integer/,
    )
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 1, window: 1 }] })
    assert.equal(limiter.maxQueue, 10_000)
    await assert.rejects(limiter.acquire('k', 1, { maxWaitMs: -1 }), { name: 'RangeError', message: /maxWaitMs/ })
    await assert.rejects(limiter.acquire('k', 1, { maxWaitMs: Number.NaN }), RangeError)
    await assert.rejects(limiter.acquire('k', 1, { signal: {} as AbortSignal }), { name: 'TypeError', message: /signal/ })
    await assert.rejects(limiter.acquire(42 as unknown as string), { code: 'INVALID_KEY' })
    await assert.rejects(limiter.acquire('k', -1), { code: 'INVALID_VALUE' })
    assert.equal(counted(limiter, 'k'), 0)
    await rl.close()
  })

  it('with several limits, waits for the one with the longest wait', async () => {
    const rl = RateLimiting.newInstance('acquire-multi')
    rl.new({ namespace: 'api', windowSizes: [1, 10], clock: () => timers.now })
    const limiter = rl.limiter({
      namespace: 'api',
      limits: [
        { limit: 2, window: 1 },
        { limit: 3, window: 10 },
      ],
    })
    const { resolved, promises } = acquireMany(limiter, 'k', 4)
    await timers.tickAsync(30_000)
    await Promise.all(promises)
    // 3 in the 10 s window [T0, T0 + 10 s): the 4th fits when 3 * (1 - p) + 1 <= 3, p = 1/3 of the next
    assert.deepEqual(
      resolved.map((r) => r.atMs),
      [0, 0, 1500, 13_334],
    )
    await rl.close()
  })
})

describe('acquire across processes (two instances sharing one MemoryStrategy)', () => {
  it('periodic: a process waits for the hits the other synced', async () => {
    const strategy = new MemoryStrategy()
    const a = setup({ mode: 'periodic', limit: 2, strategy, name: 'proc-a' })
    const b = setup({ mode: 'periodic', limit: 2, strategy, name: 'proc-b' })
    await a.limiter.acquire('k')
    await a.limiter.acquire('k')
    await a.rl.sync('api')
    await b.rl.fetch('api') // a process warms up from the store (a key it never held is not refreshed by sync)
    const admitted: Decision[] = []
    void b.limiter.acquire('k').then((d) => admitted.push(d))
    await timers.tickAsync(1499)
    assert.equal(admitted.length, 0, "b knows a's 2 hits: it waits")
    await timers.tickAsync(1)
    assert.equal(admitted[0]?.allowed, true)
    await a.rl.close()
    await b.rl.close()
  })

  it('synchronous: the store decides; concurrent acquires of two processes admit exactly the limit per window', async () => {
    const strategy = new MemoryStrategy()
    const a = setup({ mode: 'synchronous', limit: 3, strategy, name: 'sync-a' })
    const b = setup({ mode: 'synchronous', limit: 3, strategy, name: 'sync-b' })
    const times: number[] = []
    const all = [a, b].flatMap(({ limiter }) =>
      Array.from({ length: 6 }, () => limiter.acquire('k').then(() => times.push(timers.now - T0))),
    )
    await timers.tickAsync(0)
    assert.equal(times.length, 3, 'the limit, not one more')
    await timers.tickAsync(10_000)
    await Promise.all(all)
    assert.equal(times.length, 12)
    for (let w = 0; w < 10; w++) {
      const inWindow = times.filter((t) => t >= w * 1000 && t < (w + 1) * 1000).length
      assert.ok(inWindow <= 3, `window ${w} admitted ${inWindow}`)
    }
    const start = Math.floor(timers.now / 1000) * 1000
    const stored =
      (await strategy.getWindow('k', 'api', start, 1000)).count + (await strategy.getWindow('k', 'api', start - 1000, 1000)).count
    const admittedThere = times.filter((t) => t + T0 >= start - 1000).length
    assert.equal(stored, admittedThere, 'the store holds the admitted hits only: denied tries were taken back')
    await a.rl.close()
    await b.rl.close()
  })
})
