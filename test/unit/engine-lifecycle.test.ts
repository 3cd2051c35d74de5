/**
 * A namespace's life: syncs awaited while a timer-driven one runs, and what every path does once
 * the instance is closed.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { type DiffBatch, MemoryStrategy, RateLimiting, type Strategy } from '../../src/index.js'

// A memory store that tells when the first push with writes arrives.
function watchedStore(): { strategy: Strategy; firstWrite: Promise<void> } {
  const store = new MemoryStrategy()
  let wrote: () => void = () => undefined
  const firstWrite = new Promise<void>((resolve) => {
    wrote = resolve
  })
  const strategy: Strategy = Object.assign(Object.create(store) as MemoryStrategy, {
    pushDiffs(batch: DiffBatch) {
      if (batch.windows.length > 0) wrote()
      return store.pushDiffs(batch)
    },
  })
  return { strategy, firstWrite }
}

describe('sync lifecycle', () => {
  it('keeps the process alive for a sync() queued behind a timer-driven sync in its settle time', async () => {
    // The timer-driven sync writes, waits syncRate / 20, then reads. A sync() asked for meanwhile
    // runs after it: if nothing held the event loop open during that wait, the process would
    // exit with the caller's await still pending (node:test reports it as cancelled).
    const { strategy, firstWrite } = watchedStore()
    const rl = RateLimiting.newInstance('settle')
    rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0.4, strategy })
    rl.increment('k', 60, 1, 'api')
    const keepAlive = setInterval(() => undefined, 1000) // until the timer-driven sync starts
    await firstWrite
    clearInterval(keepAlive)
    await rl.sync('api')
    assert.equal(rl.stats('api').pendingHits, 0)
    await rl.close()
  })
})

describe('after close()', () => {
  const closedError = (err: unknown) =>
    err instanceof RangeError && (err as { code?: string }).code === 'NAMESPACE_CLOSED' && /namespace "api" is closed/.test(err.message)

  for (const mode of ['local', 'periodic', 'synchronous'] as const) {
    it(`a limiter made before close() fails loudly instead of counting unsynced (${mode})`, async () => {
      const store = new MemoryStrategy()
      const rl = RateLimiting.newInstance(`closed-${mode}`)
      const syncRate = mode === 'local' ? -1 : mode === 'periodic' ? 1 : 0
      rl.new({ namespace: 'api', windowSizes: [60], syncRate, ...(mode === 'local' ? {} : { strategy: store }) })
      const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 5, window: 60 }] })
      await limiter.hit('k')
      await rl.close()
      assert.throws(() => limiter.hit('k'), closedError)
      assert.throws(() => limiter.peek('k'), closedError)
      await assert.rejects(limiter.reset('k'), closedError)
      const ns = rl.namespace
      assert.throws(() => ns.call(rl, 'api'), /namespace "api" is not defined/, 'rl.* forgets the namespace')
      if (mode !== 'local') {
        const stored = await store.getWindow('k', 'api', Math.floor(Date.now() / 60_000) * 60_000, 60_000)
        assert.equal(stored.count, 1, 'the hit before close() was flushed, and nothing after it')
      }
    })
  }

  it('the namespace object itself refuses increments, reads, syncs and fetches', async () => {
    const rl = RateLimiting.newInstance('closed-ns')
    rl.new({ namespace: 'api', windowSizes: [60], syncRate: 1, strategy: new MemoryStrategy(), autoSync: false })
    const ns = rl.namespace('api')
    await rl.close()
    assert.throws(() => ns.increment('k', 60, 1), closedError)
    assert.throws(() => ns.slidingWindow('k', 60), closedError)
    await assert.rejects(ns.sync(), closedError)
    assert.throws(() => ns.fetch(), closedError)
  })
})
