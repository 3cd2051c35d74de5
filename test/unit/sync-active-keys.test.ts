/**
 * What a timer-driven sync refreshes (docs/ARCHITECTURE.md, "One sync"): every key hit or read
 * since the last sync and every key near a limiter's limit, each sync; the other keys a process
 * holds in a round-robin, a slice per sync, so that each is refreshed at least once per
 * `idleRefreshMs`. The store traffic of a sync follows the keys in use, not the keys held.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createFakeClock, type DiffBatch, MemoryStrategy, RateLimiting } from '../../src/index.js'

const T0 = 1_699_999_980_000 // the start of a minute

/** A memory store that records the key-windows the pushes of the last sync wrote and read. */
class CountingStore extends MemoryStrategy {
  last = { writes: 0, reads: 0 }
  override pushDiffs(batch: DiffBatch) {
    this.last.writes += batch.windows.length
    this.last.reads += batch.refresh.length
    return super.pushDiffs(batch)
  }
}

function fleet(options: { idleRefreshMs?: number } = {}) {
  const store = new CountingStore()
  const clock = createFakeClock(T0 + 1_000)
  const [a, b] = ['a', 'b'].map((name) => {
    const rl = RateLimiting.newInstance(name)
    rl.new({ namespace: 'api', windowSizes: [60], syncRate: 1, strategy: store, clock: clock.now, autoSync: false, ...options })
    return rl
  }) as [RateLimiting, RateLimiting]
  // what the timer runs: no settle wait here, the same selection of keys
  const timerSync = (rl: RateLimiting) => {
    store.last = { writes: 0, reads: 0 }
    return rl.namespace('api').sync(false)
  }
  return { store, clock, a, b, timerSync }
}

describe('periodic sync: refresh what matters', () => {
  it('sends the keys in use and a bounded slice of the idle ones, not every key held', async () => {
    const { store, a, timerSync } = fleet()
    for (let i = 0; i < 10_000; i++) a.increment(`idle-${i}`, 60, 1, 'api')
    await a.sync('api') // a full sync: 10,000 keys written
    assert.equal(store.last.writes + store.last.reads > 0, true)
    for (let i = 0; i < 50; i++) a.increment(`idle-${i * 7}`, 60, 1, 'api')
    await timerSync(a)
    // 50 keys hit: their current window written, their previous read back; idle keys: 256 a
    // sync (all 10,000 in idleRefreshMs, 30 s = 30 syncs, would take 334, but only 50 are in use)
    assert.equal(store.last.writes, 50)
    assert.ok(store.last.reads <= 50 + 2 * 256, `${store.last.reads} key-windows read`)
    // (the slice walks 256 slots; those of keys already visited count in it)
    assert.ok(store.last.reads >= 50 + 2 * (256 - 50), `and a slice of the idle keys: ${JSON.stringify(store.last)}`)
  })

  it('spends on idle keys no more than on the keys in use: 1,000 in use of 100,000 held', async () => {
    const { store, a, timerSync } = fleet()
    for (let i = 0; i < 100_000; i++) a.increment(`held-${i}`, 60, 1, 'api')
    await a.sync('api')
    for (let i = 0; i < 1_000; i++) a.increment(`held-${i * 97}`, 60, 1, 'api')
    await timerSync(a)
    // idleRefreshMs would ask for 100,000 / 30 = 3,334 idle keys a sync; the slice is capped at
    // the 1,000 in use, so a sync costs in proportion to them (two windows per idle key read)
    assert.equal(store.last.writes, 1_000)
    assert.ok(store.last.reads <= 1_000 + 2 * 1_000, `${store.last.reads} key-windows read`)
    assert.ok(store.last.reads >= 2 * 1_000, 'and as many idle keys as keys in use')
    // with none in use, the floor of 256
    await timerSync(a)
    assert.equal(store.last.writes, 0)
    assert.equal(store.last.reads, 2 * 256)
  })

  it('refreshes a key near its limit on every sync even when this process does not hit it', async () => {
    const { a, b, timerSync } = fleet()
    const limits = [{ limit: 10, window: 60 }]
    const la = a.limiter({ namespace: 'api', limits })
    b.limiter({ namespace: 'api', limits })
    for (let i = 0; i < 2_000; i++) a.increment(`idle-${i}`, 60, 1, 'api') // held before the hot keys
    for (let i = 0; i < 6; i++) la.hit('near') // 60% of the limit
    la.hit('far') // 10%
    b.increment('near', 60, 1, 'api')
    b.increment('far', 60, 1, 'api')
    await a.sync('api')
    await b.sync('api')
    // the other process hits both keys; this one does not touch them
    b.increment('near', 60, 2, 'api')
    b.increment('far', 60, 2, 'api')
    await b.sync('api')
    await timerSync(a)
    assert.equal(a.slidingWindow('near', 60, undefined, 'api'), 9, 'near its limit: refreshed by this sync')
    assert.equal(a.slidingWindow('far', 60, undefined, 'api'), 1, 'far from it: not yet (only its own hit), it waits for the idle round')
  })

  it('refreshes every held key within idleRefreshMs while keys are in use, a slice per sync', async () => {
    const { a, b, timerSync } = fleet({ idleRefreshMs: 5_000 })
    for (let i = 0; i < 3_000; i++) a.increment(`k${i}`, 60, 1, 'api')
    await a.sync('api')
    for (let i = 0; i < 3_000; i++) b.increment(`k${i}`, 60, 1, 'api')
    await b.sync('api')
    // 3,000 keys in 5 syncs of 1 s: 600 a sync, while 600 others are in use; from anywhere in
    // the round, 6 syncs see them all
    for (let i = 0; i < 6; i++) {
      for (let j = 0; j < 600; j++) a.increment(`busy-${j}`, 60, 1, 'api')
      await timerSync(a)
    }
    for (let i = 0; i < 3_000; i++) assert.equal(a.slidingWindow(`k${i}`, 60, undefined, 'api'), 2, `k${i}`)
  })

  it('with few keys in use, goes round the held keys at 256 a sync instead', async () => {
    const { a, b, timerSync } = fleet({ idleRefreshMs: 5_000 })
    for (let i = 0; i < 3_000; i++) a.increment(`k${i}`, 60, 1, 'api')
    await a.sync('api')
    for (let i = 0; i < 3_000; i++) b.increment(`k${i}`, 60, 1, 'api')
    await b.sync('api')
    // docs/ARCHITECTURE.md: a round takes max(idleRefreshMs, held / max(256, in use) syncs):
    // 3,000 / 256 = 12 syncs, not 5; 6 are not enough, 13 are from anywhere in the round
    for (let i = 0; i < 6; i++) await timerSync(a)
    let fresh = 0
    for (let i = 0; i < 3_000; i++) if (a.slidingWindow(`k${i}`, 60, undefined, 'api') === 2) fresh++
    assert.ok(fresh < 3_000, `${fresh} refreshed after 6 syncs`)
    for (let i = 0; i < 7; i++) await timerSync(a)
    for (let i = 0; i < 3_000; i++) assert.equal(a.slidingWindow(`k${i}`, 60, undefined, 'api'), 2, `k${i}`)
  })

  it('retries the writes of a failed sync on the next one, even for keys not hit since', async () => {
    const { store, a, b, timerSync } = fleet()
    for (let i = 0; i < 2_000; i++) a.increment(`idle-${i}`, 60, 1, 'api')
    await a.sync('api')
    a.increment('lost?', 60, 3, 'api')
    store.failNextPushes(1)
    await assert.rejects(timerSync(a))
    await timerSync(a)
    b.increment('lost?', 60, 1, 'api')
    await b.sync('api')
    assert.equal(b.slidingWindow('lost?', 60, undefined, 'api'), 4)
  })

  it('keeps the queue of keys to sync bounded when nothing syncs (a key flood, no store calls)', () => {
    const clock = createFakeClock(T0)
    const rl = RateLimiting.newInstance('flood')
    rl.new({ windowSizes: [60], syncRate: 1, strategy: new MemoryStrategy(), clock: clock.now, autoSync: false, maxKeys: 2_000 })
    for (let i = 0; i < 100_000; i++) rl.increment(`flood-${i}`, 60)
    const table = rl.namespace('default').table(60) as unknown as { queue: unknown[] }
    assert.ok(table.queue.length <= 2_000, `${table.queue.length} entries queued`)
    assert.equal(rl.stats().dict.keys, 2_000)
  })
})
