/**
 * A user's test suite fakes timers (sinon, Jest, node:test) around some tests and not others,
 * in one process. The library's store deadlines and periodic sync run on node:timers' own timers
 * (src/core/io-timers.ts): a timer armed while fakes were installed must not stay pending for
 * good once they are removed, or every later store call of the process loses its deadline and
 * the periodic sync stops. These tests wait in real time, for a store call's deadline (50 ms)
 * and a few syncs (50 ms apart), on a MemoryStrategy.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { MemoryStrategy } from '../../src/strategies/memory.js'
import { installFakeTimers as installFakes, realTimers as real } from '../support/fake-timers.js'
import { until } from './server-helpers.js'

let run = 0
function synchronous(store: MemoryStrategy) {
  const rl = RateLimiting.newInstance(`fake-timers-${++run}`)
  rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0, strategy: store, storeTimeoutMs: 50, onStoreError: 'deny' })
  return { rl, limiter: rl.limiter({ namespace: 'api', limits: [{ limit: 100, window: 60 }] }) }
}

// Resolves with the call's outcome, or with 'no answer' after `ms` of real time.
async function within<T>(call: Promise<T>, ms: number): Promise<T | 'no answer'> {
  let timer: ReturnType<typeof setTimeout> | undefined
  const guard = new Promise<'no answer'>((resolve) => {
    timer = real.setTimeout(() => resolve('no answer'), ms)
  })
  try {
    return await Promise.race([call, guard])
  } finally {
    real.clearTimeout(timer)
  }
}

describe("a test suite's fake timers", { timeout: 20_000 }, () => {
  it('leave a store call its deadline while they are installed', async () => {
    const store = new MemoryStrategy()
    const { rl, limiter } = synchronous(store)
    const fakes = installFakes(Date.now())
    try {
      store.hang()
      const d = await within(Promise.resolve(limiter.hit('k')), 2000)
      assert.notEqual(d, 'no answer', 'the call timed out without the fake clock being advanced')
      assert.equal((d as { allowed: boolean }).allowed, false, "onStoreError 'deny'")
    } finally {
      fakes.uninstall()
      store.up()
      await rl.close().catch(() => undefined)
    }
  })

  it('leave every later store call its deadline once they are removed', async () => {
    const store = new MemoryStrategy()
    const { rl, limiter } = synchronous(store)
    // a test with fake timers: the calls it makes arm the deadline timer under the fakes
    const fakes = installFakes(Date.now())
    assert.equal((await limiter.hit('k')).allowed, true)
    fakes.uninstall()
    // a later test: the store stops answering, and the call must still time out
    store.hang()
    const errors: unknown[] = []
    const started = performance.now()
    const d = await within(
      Promise.resolve(limiter.hit('k')).catch((err: unknown) => errors.push(err)),
      2000,
    )
    assert.notEqual(d, 'no answer', `no answer after ${Math.round(performance.now() - started)} ms (storeTimeoutMs 50)`)
    assert.deepEqual(errors, [], "onStoreError 'deny' decides instead of throwing")
    store.up()
    await rl.close().catch(() => undefined)
  })

  it('leave the periodic sync running once they are removed', async () => {
    const store = new MemoryStrategy()
    const a = RateLimiting.newInstance(`fake-timers-${++run}`)
    const b = RateLimiting.newInstance(`fake-timers-${++run}`)
    for (const rl of [a, b]) rl.new({ namespace: 'api', windowSizes: [600], syncRate: 0.05, strategy: store })
    a.increment('k', 600, 1, 'api')
    b.increment('k', 600, 1, 'api') // b holds the key, so its syncs read the fleet's count back
    // a test with fake timers, during which the sync timer fires and is armed again
    const fakes = installFakes(Date.now())
    await new Promise((resolve) => real.setTimeout(resolve, 150))
    fakes.uninstall()
    const pushes = store.calls.pushDiffs
    a.increment('k', 600, 5, 'api')
    await until(() => store.calls.pushDiffs > pushes + 2, 2000, 'three more syncs in real time')
    await until(() => b.slidingWindow('k', 600, 0, 'api') === 7, 2000, "the other process's view of a's 6 hits and its own")
    await Promise.all([a.close(), b.close()])
  })
})
