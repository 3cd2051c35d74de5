/**
 * Escrow namespaces (docs/ARCHITECTURE.md, "Escrow") on the memory store, on an injected clock:
 * hits decided locally on granted budget, grants of one event-loop turn in one call, refusals
 * answered without a store call, budget returned when a window closes, the lease, a store that
 * lost its reservations, what onStoreError does when no grant can be had, and the options' errors.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createFakeClock, type Decision, type Limiter, MemoryStrategy, RateLimiting } from '../../src/index.js'
import type { Strategy } from '../../src/core/strategy.js'

const SIZE_S = 10
// learnMs = 2 × syncRate + 2 × storeTimeoutMs
const LEARN_MS = 2 * 1000 + 2 * 1000

interface Fleet {
  readonly store: MemoryStrategy
  readonly clock: ReturnType<typeof createFakeClock>
  readonly processes: Array<{ rl: RateLimiting; limiter: Limiter }>
  /** Every process syncs once (the timer's sync). */
  tick(): Promise<void>
  close(): Promise<void>
}

async function fleet(n: number, limit: number, options: Record<string, unknown> = {}, warm = true): Promise<Fleet> {
  const store = new MemoryStrategy()
  // on a window boundary, a minute ahead of the real time
  const clock = createFakeClock(Math.ceil(Date.now() / 60_000) * 60_000 + 60_000)
  const processes = Array.from({ length: n }, (_, i) => {
    const rl = RateLimiting.newInstance(`escrow-unit-${i}`)
    rl.new({
      windowSizes: [SIZE_S],
      syncRate: 1,
      strategy: store,
      escrow: true,
      clock: clock.now,
      autoSync: false,
      onError: () => {},
      ...options,
    })
    return { rl, limiter: rl.limiter({ limits: [{ limit, window: SIZE_S }] }) }
  })
  const f: Fleet = {
    store,
    clock,
    processes,
    async tick() {
      for (const p of processes)
        await p.rl
          .namespace('default')
          .sync(false)
          .catch(() => undefined)
    },
    async close() {
      for (const p of processes) await p.rl.close().catch(() => undefined)
    },
  }
  if (warm) {
    // the store's epoch begins with the first call; grants start once its learning period is over
    for (const p of processes) await p.rl.namespace('default').sync(true)
    await processes[0]?.limiter.hit('warm-up')
    clock.advance(LEARN_MS)
    await f.tick()
  }
  return f
}

const proc = (f: Fleet, i: number): Fleet['processes'][number] => f.processes[i] as Fleet['processes'][number]

const hit = async (l: Limiter, key: string, cost = 1): Promise<Decision> => await l.hit(key, cost)

describe('escrow', () => {
  it('admits on granted budget without a store call, and 8 processes together admit exactly the limit', async () => {
    const f = await fleet(8, 100)
    try {
      const before = f.store.calls.escrow
      let admitted = 0
      let waited = 0
      for (let i = 0; i < 1000; i++) {
        const d = proc(f, i % 8).limiter.hit('k')
        if (d instanceof Promise) waited++
        if ((await d).allowed) admitted++
      }
      assert.equal(admitted, 100)
      // chunks shrink near the limit: far fewer grants than hits, and no call per denial
      const calls = f.store.calls.escrow - before
      assert.equal(calls, waited)
      assert.ok(calls < 100, `${calls} grants for 1,000 hits`)
    } finally {
      await f.close()
    }
  })

  it('sends the grants of one event-loop turn in one call', async () => {
    const f = await fleet(1, 100)
    try {
      const before = f.store.calls.escrow
      const decisions = await Promise.all(Array.from({ length: 50 }, (_, i) => proc(f, 0).limiter.hit(`user-${i}`)))
      assert.ok(decisions.every((d) => d.allowed))
      assert.equal(f.store.calls.escrow - before, 1)
    } finally {
      await f.close()
    }
  })

  it('denies a refused key without a store call until the previous window has decayed enough for the hit', async () => {
    const f = await fleet(2, 4)
    try {
      const [a, b] = f.processes as [Fleet['processes'][number], Fleet['processes'][number]]
      for (let i = 0; i < 4; i++) assert.equal((await hit(i % 2 === 0 ? a.limiter : b.limiter, 'k')).allowed, true)
      const calls = f.store.calls.escrow
      const denied = await hit(a.limiter, 'k')
      assert.equal(denied.allowed, false)
      const afterRefusal = f.store.calls.escrow
      for (let i = 0; i < 20; i++) assert.equal((await hit(a.limiter, 'k')).allowed, false)
      assert.equal(f.store.calls.escrow, afterRefusal, 'denials cost no store call')
      assert.ok(afterRefusal - calls <= 1)
      // the next window: its previous window's weight decays; the refusal ends when a hit fits
      f.clock.advance(SIZE_S * 1000)
      await f.tick()
      f.clock.advance(SIZE_S * 1000)
      await f.tick()
      assert.equal((await hit(a.limiter, 'k')).allowed, true)
    } finally {
      await f.close()
    }
  })

  it('counts a hit the store refused in the store at once (countDenied), so another process sees the penalty before any sync', async () => {
    const f = await fleet(2, 4)
    try {
      const [a, b] = f.processes as [Fleet['processes'][number], Fleet['processes'][number]]
      for (let i = 0; i < 4; i++) assert.equal((await hit(a.limiter, 'k')).allowed, true)
      const now = f.clock.now()
      const stored = async () => (await f.store.getWindow('k', 'default', now - (now % (SIZE_S * 1000)), SIZE_S * 1000)).count
      const before = await stored()
      // b's grant is refused: the store counts the denied hit in the same call, no sync between
      assert.equal((await hit(b.limiter, 'k')).allowed, false)
      assert.equal(await stored(), before + 1, 'the refused hit is in the store')
      // and b's own count agrees, so its next sync has nothing of it to write
      const calls = f.store.calls.escrow
      await f.tick()
      assert.equal(await stored(), before + 1, 'not counted twice by the syncs')
      assert.ok(f.store.calls.escrow - calls <= 2)
      // without countDenied the refused hit counts nowhere
      const g = await fleet(2, 4, {}, true)
      try {
        const [c, d] = g.processes as [Fleet['processes'][number], Fleet['processes'][number]]
        const lenient = d.rl.limiter({ limits: [{ limit: 4, window: SIZE_S }], countDenied: false })
        for (let i = 0; i < 4; i++) assert.equal((await hit(c.limiter, 'k')).allowed, true)
        const t = g.clock.now()
        const read = async () => (await g.store.getWindow('k', 'default', t - (t % (SIZE_S * 1000)), SIZE_S * 1000)).count
        assert.equal((await hit(lenient, 'k')).allowed, false)
        await g.tick()
        assert.equal(await read(), 4)
      } finally {
        await g.close()
      }
    } finally {
      await f.close()
    }
  })

  it("gives unused budget back once the window closes: near the limit at the timer's sync, all of it at an explicit sync", async () => {
    const f = await fleet(1, 100)
    try {
      const limiter = proc(f, 0).limiter
      for (let i = 0; i < 3; i++) await hit(limiter, 'far')
      for (let i = 0; i < 60; i++) await hit(limiter, 'near')
      const start = Math.floor(f.clock.now() / 10_000) * 10_000
      const far = await f.store.getWindow('far', 'default', start, 10_000)
      assert.ok(far.count > 3, `a share is reserved: ${far.count}`)
      f.clock.advance(10_000)
      await f.tick()
      // the timer's sync: a key near its limit gets its previous window's register back to its hits;
      // one far below keeps it (that budget leaves room to spare, and a return is a store operation)
      assert.equal((await f.store.getWindow('near', 'default', start, 10_000)).count, 60)
      assert.equal((await f.store.getWindow('far', 'default', start, 10_000)).count, far.count)
      await proc(f, 0).rl.sync()
      assert.equal((await f.store.getWindow('far', 'default', start, 10_000)).count, 3)
    } finally {
      await f.close()
    }
  })

  it('admits as many hits of one key asking in one turn as fit, on two processes at once, and denies the rest', async () => {
    const f = await fleet(2, 20)
    try {
      const [a, b] = f.processes as [Fleet['processes'][number], Fleet['processes'][number]]
      const decisions = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? a : b).limiter.hit('k')))
      assert.equal(decisions.filter((d) => d.allowed).length, 20, 'a burst is granted hit by hit, not all or nothing')
      await f.tick()
      const start = Math.floor(f.clock.now() / 10_000) * 10_000
      // the 80 denied hits count (countDenied), once each
      assert.equal((await f.store.getWindow('k', 'default', start, 10_000)).count, 100)
    } finally {
      await f.close()
    }
  })

  it("takes a new epoch whose time is behind the one it held (the store restarted and its first caller's clock lags)", async () => {
    const store = new MemoryStrategy()
    let lag = 0
    const skewed: Strategy = {
      name: 'memory',
      supportsDecimals: true,
      supportsBlocks: true,
      pushDiffs: (batch) => store.pushDiffs(batch),
      getCounters: (...args) => store.getCounters(...args),
      resetKey: (...args) => store.resetKey(...args),
      close: () => store.close(),
      escrow: async (batch) => {
        const reply = await store.escrow(batch)
        return { ...reply, epochMs: reply.epochMs - lag }
      },
    }
    const f = await fleet(2, 10, { strategy: skewed, onStoreError: 'deny' })
    try {
      const [a, b] = f.processes as [Fleet['processes'][number], Fleet['processes'][number]]
      assert.equal((await hit(a.limiter, 'k')).allowed, true)
      store.restart()
      lag = 3_600_000
      await f.tick()
      f.clock.advance(LEARN_MS)
      await f.tick()
      let admitted = 0
      for (let i = 0; i < 20; i++) if ((await hit(i % 2 === 0 ? a.limiter : b.limiter, 'k')).allowed) admitted++
      assert.equal(admitted, 9, 'the new epoch is taken, its grants used: the limit less the hit written again')
    } finally {
      await f.close()
    }
  })

  it('asks the store again once the lease has run out (no answered call for learnMs)', async () => {
    const f = await fleet(1, 100)
    try {
      const limiter = proc(f, 0).limiter
      assert.equal((await hit(limiter, 'k')).allowed, true)
      assert.equal(limiter.hit('k') instanceof Promise, false, 'budget is spent locally')
      f.clock.advance(LEARN_MS)
      const d = limiter.hit('k')
      assert.ok(d instanceof Promise, 'the budget is not spent without a recent answer from the store')
      assert.equal((await d).allowed, true)
    } finally {
      await f.close()
    }
  })

  it('drops every budget when the store lost its reservations, writes the hits again, and grants nothing while it learns', async () => {
    const f = await fleet(2, 10, { onStoreError: 'deny' })
    try {
      const [a, b] = f.processes as [Fleet['processes'][number], Fleet['processes'][number]]
      for (let i = 0; i < 3; i++) assert.equal((await hit(a.limiter, 'k')).allowed, true)
      f.store.restart()
      await f.tick() // both see the new epoch; a writes its 3 hits again
      const start = Math.floor(f.clock.now() / 10_000) * 10_000
      assert.equal((await f.store.getWindow('k', 'default', start, 10_000)).count, 3)
      const learning = await hit(b.limiter, 'k')
      assert.equal(learning.allowed, false)
      assert.equal(learning.reason, 'store-error')
      f.clock.advance(LEARN_MS)
      await f.tick()
      let admitted = 0
      for (let i = 0; i < 20; i++) if ((await hit(i % 2 === 0 ? a.limiter : b.limiter, 'k')).allowed) admitted++
      // 3 before the restart, 1 counted while learning (countDenied), 6 more
      assert.equal(admitted, 6)
    } finally {
      await f.close()
    }
  })

  for (const [policy, expected] of [
    ['deny', [false, false, false]],
    ['allow', [true, true, true]],
    ['local', [true, true, false]],
    ['share', [true, false, false]],
  ] as const) {
    it(`onStoreError ${policy}: what a hit gets while no grant can be had`, async () => {
      // 2 processes seen, limit 2: share allows 1 each; local counts this process's hits only
      const f = await fleet(2, 2, { onStoreError: policy })
      try {
        await hit(proc(f, 1).limiter, 'other')
        await f.tick() // each process learns how many call the store
        f.store.down()
        const got: boolean[] = []
        for (let i = 0; i < 3; i++) {
          const d = await hit(proc(f, 0).limiter, 'k')
          got.push(d.allowed)
          assert.equal(d.reason, 'store-error')
        }
        assert.deepEqual(got, expected)
      } finally {
        f.store.up()
        await f.close()
      }
    })
  }

  it('onStoreError share: a process the store never answered denies (it does not know the fleet)', async () => {
    const f = await fleet(2, 10, { onStoreError: 'share' })
    try {
      f.store.down()
      const late = RateLimiting.newInstance('escrow-late')
      late.new({
        windowSizes: [SIZE_S],
        syncRate: 1,
        strategy: f.store,
        escrow: true,
        clock: f.clock.now,
        autoSync: false,
        onStoreError: 'share',
        onError: () => {},
      })
      const d = await late.limiter({ limits: [{ limit: 10, window: SIZE_S }] }).hit('k')
      assert.equal(d.allowed, false)
      assert.equal(d.reason, 'store-error')
      await late.close().catch(() => undefined)
    } finally {
      f.store.up()
      await f.close()
    }
  })

  it('refuses options that cannot work, naming them', () => {
    const rl = RateLimiting.newInstance('escrow-options')
    const store = new MemoryStrategy()
    assert.throws(
      () => rl.new({ namespace: 'a', windowSizes: [1], syncRate: 0, strategy: store, escrow: true }),
      /escrow needs a periodic namespace/,
    )
    const plain: Strategy = {
      name: 'plain',
      supportsDecimals: true,
      pushDiffs: store.pushDiffs.bind(store),
      getCounters: store.getCounters.bind(store),
      resetKey: store.resetKey.bind(store),
      close: async () => {},
    }
    assert.throws(
      () => rl.new({ namespace: 'b', windowSizes: [1], syncRate: 1, strategy: plain, escrow: true }),
      /plain strategy does not serve escrow/,
    )
    assert.throws(
      () => rl.new({ namespace: 'c', windowSizes: [1], syncRate: 1, strategy: 'memcached', escrow: true }),
      /memcached strategy does not serve escrow/,
    )
    assert.throws(
      () => rl.new({ namespace: 'd', windowSizes: [1], syncRate: 1, strategy: store, onStoreError: 'share' }),
      /"share" is for escrow/,
    )
    assert.throws(
      // removed: the error says what replaces it
      () => rl.new({ namespace: 'e', windowSizes: [1], syncRate: 1, strategy: store, predict: true } as never),
      /predict was removed.*escrow: true/,
    )
  })
})
