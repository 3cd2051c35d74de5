/**
 * Blocking (docs/ARCHITECTURE.md, "Blocks"): a limit's `blockMs`, `limiter.block()` and
 * `unblock()`, in every sync mode on MemoryStrategy with an injected clock: what a blocked
 * decision says, that it counts nothing, when it ends, how it reaches another process (next
 * sync, next call), and that store faults lose no block.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import FakeTimers from '@sinonjs/fake-timers'
import {
  createFakeClock,
  type Decision,
  type Limiter,
  type LimiterOptions,
  MemoryStrategy,
  RateLimiting,
  type Strategy,
} from '../../src/index.js'

const MINUTE = 60_000
// a whole minute, so windows start where the test says
const T0 = 1_800_000_000_000 - (1_800_000_000_000 % MINUTE)

let run = 0
function engine(
  syncRate: number | undefined,
  strategy?: Strategy,
  clock = createFakeClock(T0 + 1000),
  extra: Record<string, unknown> = {},
) {
  const rl = RateLimiting.newInstance(`blocking-${++run}`)
  rl.new({
    namespace: 'login',
    windowSizes: [60, 900],
    clock: clock.now,
    ...(syncRate === undefined ? {} : { syncRate, strategy, autoSync: false, onError: () => {} }),
    ...extra,
  })
  return { rl, clock }
}

const LOGIN: LimiterOptions = { namespace: 'login', limits: [{ limit: 3, window: 60, blockMs: 15 * MINUTE }] }

const decide = async (l: Limiter, key = 'alice', cost = 1): Promise<Decision> => await l.hit(key, cost)

describe('blocking on one process (local mode)', () => {
  it('blocks a key denied by a limit with blockMs, for exactly blockMs, counting nothing meanwhile', async () => {
    const { rl, clock } = engine(undefined)
    const l = rl.limiter(LOGIN)
    for (let i = 0; i < 3; i++) assert.equal((await decide(l)).allowed, true)
    const denied = await decide(l)
    assert.equal(denied.allowed, false)
    assert.equal(denied.reason, 'limit', 'the limit denied this one')
    assert.equal(denied.blocked, true, 'and it blocked the key')
    assert.equal(denied.retryAfterMs, 15 * MINUTE)
    clock.advance(2 * MINUTE) // the window has moved on: the counts alone would admit
    const blocked = await decide(l)
    assert.deepEqual(
      { allowed: blocked.allowed, reason: blocked.reason, blocked: blocked.blocked, retryAfterMs: blocked.retryAfterMs },
      { allowed: false, reason: 'blocked', blocked: true, retryAfterMs: 13 * MINUTE },
    )
    assert.equal(l.counts('alice')[0]?.current, 0, 'a blocked hit counts nothing')
    assert.equal((await l.peek('alice')).reason, 'blocked', 'peek sees the block')
    assert.equal(l.allow('alice'), false, 'allow() too')
    assert.equal((await decide(l, 'bob')).allowed, true, 'another key is free')
    clock.advance(13 * MINUTE - 1)
    assert.equal((await decide(l)).reason, 'blocked', '1 ms before the end')
    assert.equal((await decide(l)).retryAfterMs, 1)
    clock.advance(1)
    const free = await decide(l)
    assert.deepEqual(
      { allowed: free.allowed, reason: free.reason, blocked: free.blocked },
      { allowed: true, reason: 'limit', blocked: undefined },
    )
    await rl.close()
  })

  it('says the wait of the counts when they deny past the block', async () => {
    const { rl, clock } = engine(undefined)
    const l = rl.limiter({ namespace: 'login', limits: [{ limit: 2, window: 900, blockMs: 1000 }] })
    await decide(l)
    await decide(l)
    const denied = await decide(l)
    assert.equal(denied.blocked, true)
    assert.ok(denied.retryAfterMs > 1000, `the 15-minute window decides the wait: ${denied.retryAfterMs}`)
    clock.advance(1000)
    const after = await decide(l)
    assert.equal(after.reason, 'limit', 'the block is over; the limit still denies (and blocks again)')
    await rl.close()
  })

  it('with several limits, blocks for the longest blockMs of the limits that denied', async () => {
    const { rl } = engine(undefined)
    const l = rl.limiter({
      namespace: 'login',
      limits: [
        { limit: 2, window: 60, blockMs: 5 * MINUTE },
        { limit: 10, window: 900, blockMs: 60 * MINUTE },
      ],
    })
    await decide(l)
    await decide(l)
    const denied = await decide(l)
    assert.equal(denied.blocked, true)
    assert.equal(denied.retryAfterMs, 5 * MINUTE, 'only the 1-minute limit denied: its blockMs')
    await rl.close()
  })

  it('does not block on a limit without blockMs, nor when allowed', async () => {
    const { rl } = engine(undefined)
    const l = rl.limiter({ namespace: 'login', limits: [{ limit: 1, window: 60 }] })
    await decide(l)
    const denied = await decide(l)
    assert.equal(denied.allowed, false)
    assert.equal(denied.blocked, undefined)
    await rl.close()
  })

  it('block() and unblock() by hand; a block is never shortened; reset lifts it', async () => {
    const { rl, clock } = engine(undefined)
    const l = rl.limiter({ namespace: 'login', limits: [{ limit: 100, window: 60 }] })
    const other = rl.limiter({ namespace: 'login', limits: [{ limit: 5, window: 900 }] })
    assert.equal(await l.block('mallory', 10 * MINUTE), clock.now() + 10 * MINUTE)
    assert.equal((await decide(l, 'mallory')).reason, 'blocked')
    assert.equal((await decide(other, 'mallory')).reason, 'blocked', 'every limiter of the namespace honours the block')
    assert.equal(await l.block('mallory', MINUTE), clock.now() + 10 * MINUTE, 'a shorter block does not shorten it')
    await l.unblock('mallory')
    assert.equal((await decide(l, 'mallory')).allowed, true)
    await l.block('mallory', MINUTE)
    assert.equal((await decide(l, 'mallory')).retryAfterMs, MINUTE, 'after a lift, a short block holds')
    await l.reset('mallory')
    assert.equal((await decide(l, 'mallory')).allowed, true, 'reset lifts the block')
    await rl.close()
  })

  it('acquire() waits a block out, and its denied tries never block the key', async () => {
    // setTimeout and the namespace's clock move together (@sinonjs/fake-timers); nothing sleeps
    const timers = FakeTimers.install({ now: T0 + 1000, toFake: ['setTimeout', 'clearTimeout'] })
    try {
      const rl = RateLimiting.newInstance(`blocking-${++run}`)
      rl.new({ namespace: 'login', windowSizes: [60], clock: () => timers.now })
      const l = rl.limiter({ namespace: 'login', limits: [{ limit: 1, window: 60, blockMs: 10 * MINUTE }] })
      await l.acquire('job')
      const second = l.acquire('job')
      await timers.tickAsync(0)
      assert.notEqual((await l.peek('job')).reason, 'blocked', 'a denied try is a wait, not a violation')
      await timers.tickAsync(2 * MINUTE)
      assert.equal((await second).allowed, true, 'admitted once the window let it')
      await l.block('job', 5 * MINUTE)
      const started = timers.now
      const third = l.acquire('job')
      await assert.rejects(l.acquire('job', 1, { maxWaitMs: 1000 }), { code: 'ACQUIRE_TIMEOUT' })
      await timers.tickAsync(5 * MINUTE)
      const d = await third
      assert.equal(d.allowed, true)
      assert.equal(timers.now - started, 5 * MINUTE, 'admitted when the block ended, not before')
      await rl.close()
    } finally {
      timers.uninstall()
    }
  })

  it('refuses bad input, naming it', async () => {
    const { rl } = engine(undefined)
    for (const blockMs of [0, -1, Number.NaN, Number.POSITIVE_INFINITY, '5', 1e15 + 1, 1e19])
      assert.throws(
        () => rl.limiter({ namespace: 'login', limits: [{ limit: 1, window: 60, blockMs: blockMs as number }] }),
        /limits\[0\]\.blockMs must be a positive number of ms/,
      )
    const l = rl.limiter({ namespace: 'login', limits: [{ limit: 1, window: 60 }] })
    for (const ms of [0, -5, Number.NaN, Number.POSITIVE_INFINITY, 1e15 + 1, Number.MAX_VALUE])
      assert.throws(
        () => l.block('k', ms),
        /block duration must be a positive number of ms up to 1000000000000000 \(about 31,700 years\), got/,
      )
    assert.ok((await l.block('k', 1e15)) > 1e15, 'the longest block is taken')
    assert.throws(() => l.block(42 as unknown as string, 1000), /key must be a string/)
    assert.throws(() => rl.new({ namespace: 'x', windowSizes: [60], blocking: 'yes' as unknown as boolean }), /blocking must be a boolean/)
    await rl.close()
  })

  it('holds at most maxKeys blocks: a flood of blocked keys keeps memory bounded', async () => {
    const { rl, clock } = engine(undefined, undefined, createFakeClock(T0 + 1000), { maxKeys: 1000 })
    const l = rl.limiter({ namespace: 'login', limits: [{ limit: 1, window: 60, blockMs: MINUTE }] })
    for (let i = 0; i < 5000; i++) {
      l.hit(`ip-${i}`)
      l.hit(`ip-${i}`)
    }
    const blocks = rl.limiter(LOGIN).namespace.blocks
    assert.ok(blocks !== undefined && blocks.size <= 1000, `held ${blocks?.size}`)
    assert.equal((await decide(l, 'ip-4999')).reason, 'blocked', 'the latest blocks are kept')
    clock.advance(2 * MINUTE) // the block has ended, and the counts have slid out
    assert.equal((await decide(l, 'ip-4999')).allowed, true)
    await rl.close()
  })
})

const SYNCED = [
  ['periodic', 0.5],
  ['synchronous', 0],
] as const

for (const [mode, syncRate] of SYNCED) {
  describe(`blocking across two processes on MemoryStrategy, ${mode}`, () => {
    const pair = (extraB: Record<string, unknown> = {}) => {
      const store = new MemoryStrategy()
      const clock = createFakeClock(T0 + 1000)
      const a = engine(syncRate, store, clock)
      const b = engine(syncRate, store, clock, extraB)
      return { store, clock, a, b, la: a.rl.limiter(LOGIN), lb: b.rl.limiter(LOGIN) }
    }
    const settle = async (...rls: RateLimiting[]) => {
      if (syncRate > 0) for (const rl of rls) await rl.sync('login')
    }

    // periodic: a process reads a key's block, as its counts, at the first sync after it sees the key
    const learn = async (rl: RateLimiting, l: Limiter, key: string) => {
      if (syncRate === 0) return
      await decide(l, key)
      await rl.sync('login')
    }

    it("a block made by one process's denial reaches the other", async () => {
      const { a, b, la, lb } = pair()
      for (let i = 0; i < 4; i++) await decide(la)
      await settle(a.rl)
      await learn(b.rl, lb, 'alice')
      const seen = await decide(lb)
      assert.deepEqual(
        { allowed: seen.allowed, reason: seen.reason, blocked: seen.blocked },
        { allowed: false, reason: 'blocked', blocked: true },
      )
      assert.ok(seen.retryAfterMs > 14 * MINUTE && seen.retryAfterMs <= 15 * MINUTE, `${seen.retryAfterMs}`)
      await a.rl.close()
      await b.rl.close()
    })

    it('a process that honours blocks without limiting with blockMs learns of them (blocking: true)', async () => {
      const { a, b, la } = pair({ blocking: true })
      const plain = b.rl.limiter({ namespace: 'login', limits: [{ limit: 100, window: 60 }] })
      await la.block('mallory', 5 * MINUTE)
      await settle(a.rl)
      await learn(b.rl, plain, 'mallory')
      assert.equal((await decide(plain, 'mallory')).reason, 'blocked')
      await a.rl.close()
      await b.rl.close()
    })

    it('unblock() on one process lifts the block on the other', async () => {
      const { a, b, la, lb } = pair()
      await la.block('mallory', 5 * MINUTE)
      await settle(a.rl)
      await learn(b.rl, lb, 'mallory')
      assert.equal((await decide(lb, 'mallory')).reason, 'blocked')
      await la.unblock('mallory')
      await settle(a.rl, b.rl)
      assert.equal((await decide(lb, 'mallory')).allowed, true, 'the lift reached the other process')
      await a.rl.close()
      await b.rl.close()
    })

    it('a blocked hit is counted nowhere', async () => {
      const { store, clock, a, b, la, lb } = pair()
      await la.block('mallory', 5 * MINUTE)
      await settle(a.rl)
      await learn(b.rl, lb, 'mallory')
      const start = clock.now() - (clock.now() % MINUTE)
      const before = (await store.getWindow('mallory', 'login', start, MINUTE)).count
      for (let i = 0; i < 5; i++) assert.equal((await decide(lb, 'mallory')).reason, 'blocked')
      await settle(a.rl, b.rl)
      assert.equal((await store.getWindow('mallory', 'login', start, MINUTE)).count, before)
      assert.ok(before <= 1, `at most the hit that learned the block: ${before}`)
      await a.rl.close()
      await b.rl.close()
    })

    it('a block made while the store is down is stored once it is back (nothing lost)', async () => {
      const { store, a, b, la, lb } = pair()
      store.down()
      await la.block('mallory', 5 * MINUTE)
      await assert.rejects(a.rl.sync('login')).catch(() => undefined)
      assert.equal((await decide(la, 'mallory')).reason, 'blocked', 'it holds here meanwhile')
      store.up()
      await a.rl.sync('login')
      await learn(b.rl, lb, 'mallory')
      assert.equal((await decide(lb, 'mallory')).reason, 'blocked')
      await a.rl.close()
      await b.rl.close()
    })

    it('a lost reply loses no block and a retried push blocks nothing twice', async () => {
      const { store, a, b, la, lb } = pair()
      store.loseNextReplies(1)
      await la.block('mallory', 5 * MINUTE)
      if (syncRate > 0) await a.rl.sync('login').catch(() => undefined)
      await a.rl.sync('login') // the pending op goes again: the store keeps the later end, the same one
      assert.equal(store.blockCount, 1)
      await learn(b.rl, lb, 'mallory')
      assert.equal((await decide(lb, 'mallory')).reason, 'blocked')
      await a.rl.close()
      await b.rl.close()
    })
  })
}

describe('blocking and stores', () => {
  it('refuses blocking on a synced namespace whose store does not keep blocks', async () => {
    const memory = new MemoryStrategy()
    const plain: Strategy = {
      name: 'plain',
      supportsDecimals: true,
      pushDiffs: (b) => memory.pushDiffs(b),
      getCounters: (...args) => memory.getCounters(...args),
      resetKey: (...args) => memory.resetKey(...args),
      close: async () => {},
    }
    const { rl } = engine(0.5, plain)
    assert.throws(() => rl.limiter(LOGIN), /limits\[0\]\.blockMs: the plain strategy of namespace "login" does not keep blocks/)
    const l = rl.limiter({ namespace: 'login', limits: [{ limit: 1, window: 60 }] })
    assert.throws(() => l.block('k', 1000), /limiter\.block\(\): the plain strategy/)
    await rl.close()
  })

  it('costs a namespace without blocking nothing: no block field in its pushes', async () => {
    const store = new MemoryStrategy()
    const seen: unknown[] = []
    const spy: Strategy = {
      ...store,
      name: 'memory',
      supportsDecimals: true,
      supportsBlocks: true,
      pushDiffs: (b) => (seen.push(b), store.pushDiffs(b)),
      getCounters: (...a) => store.getCounters(...a),
      resetKey: (...a) => store.resetKey(...a),
      close: async () => {},
    }
    const { rl } = engine(0, spy)
    const l = rl.limiter({ namespace: 'login', limits: [{ limit: 1, window: 60 }] })
    await l.hit('k')
    assert.equal(seen.length, 1)
    assert.deepEqual(Object.keys(seen[0] as object).sort(), ['namespace', 'nodeId', 'nowMs', 'refresh', 'seq', 'windows'])
    await rl.close()
  })
})
