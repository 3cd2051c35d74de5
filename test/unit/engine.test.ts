import assert from 'node:assert/strict'
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { describe, it, mock } from 'node:test'
import { ioTimers } from '../../src/core/io-timers.js'
import { newNodeId } from '../../src/core/namespace.js'
import * as ratelimiting from '../../src/index.js'
import { ConfigError, createFakeClock, type Decision, type DiffBatch, MemoryStrategy, RateLimiting, StoreError } from '../../src/index.js'

const MINUTE = 1_699_999_980_000

function instance(name = 'engine-test') {
  return RateLimiting.newInstance(name)
}

describe('namespaces and validation', () => {
  it('refuses to define a namespace twice in one instance', () => {
    const rl = instance()
    rl.new({ namespace: 'api', windowSizes: [60] })
    assert.throws(
      () => rl.new({ namespace: 'api', windowSizes: [1] }),
      (err: unknown) =>
        err instanceof ConfigError && err.code === 'DUPLICATE_NAMESPACE' && /namespace "api" is already defined/.test(err.message),
    )
  })

  it('keeps instances apart: the same namespace name in two instances does not interfere', () => {
    const clock = createFakeClock(MINUTE)
    const a = instance('a')
    const b = instance('b')
    a.new({ namespace: 'api', windowSizes: [60], clock: clock.now })
    b.new({ namespace: 'api', windowSizes: [60], clock: clock.now })
    a.increment('k', 60, 5, 'api')
    b.increment('k', 60, 1, 'api')
    assert.equal(a.slidingWindow('k', 60, undefined, 'api'), 5)
    assert.equal(b.slidingWindow('k', 60, undefined, 'api'), 1)
  })

  it('gives every namespace a random node id of 16 base64url characters unless one is set', async () => {
    const store = new MemoryStrategy()
    const ids: string[] = []
    const watched = Object.assign(Object.create(store) as MemoryStrategy, {
      pushDiffs(batch: DiffBatch) {
        ids.push(batch.nodeId)
        return store.pushDiffs(batch)
      },
    })
    const rl = instance('node-ids')
    for (const namespace of ['a', 'b']) rl.new({ namespace, windowSizes: [60], syncRate: 0, strategy: watched })
    rl.new({ namespace: 'named', windowSizes: [60], syncRate: 0, strategy: watched, nodeId: 'web-1' })
    for (const namespace of ['a', 'b', 'named']) await rl.limiter({ namespace, limits: [{ limit: 10, window: 60 }] }).hit('k')
    await rl.close()
    assert.match(ids[0] as string, /^[A-Za-z0-9_-]{16}$/)
    assert.match(ids[1] as string, /^[A-Za-z0-9_-]{16}$/)
    assert.notEqual(ids[0], ids[1])
    assert.equal(ids[2], 'web-1')
    const many = new Set(Array.from({ length: 10_000 }, () => newNodeId()))
    assert.equal(many.size, 10_000)
  })

  it('names the option and the value of every invalid option at new()', () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [
        { windowSizes: [0] },
        'INVALID_OPTION',
        /windowSizes must be whole milliseconds from 0\.001 s to .* s \(2\^54 ms, about 570,000 years\), got 0/,
      ],
      [{ windowSizes: [0.0005] }, 'INVALID_OPTION', /windowSizes must be whole milliseconds from 0\.001 s .*, got 0\.0005/],
      [{ windowSizes: [1e14] }, 'INVALID_OPTION', /windowSizes must be whole milliseconds .*, got 100000000000000/],
      [{ windowSizes: [Number.NaN] }, 'INVALID_OPTION', /windowSizes must be whole milliseconds .*, got NaN/],
      [{ windowSizes: ['60'] }, 'INVALID_OPTION', /windowSizes must be numbers of seconds, got "60"/],
      [{ windowSizes: [0.3, 0.1 + 0.2] }, 'INVALID_OPTION', /windowSizes must be without duplicates, got \[0\.3, 0\.30000000000000004\]/],
      [{ windowSizes: [] }, 'INVALID_OPTION', /windowSizes must be a non-empty array/],
      [{ windowSizes: [60, 60] }, 'INVALID_OPTION', /windowSizes must be without duplicates, got \[60, 60\]/],
      [{}, 'INVALID_OPTION', /windowSizes must be a non-empty array of seconds \(such as \[1, 60\] or \[0\.5\]\), got undefined/],
      [
        { windowSizes: [60], syncRate: 0.0005, strategy: 'memory' },
        'INVALID_OPTION',
        /syncRate must be 0 \(synchronous\), < 0 \(local\) or at least 0\.001 s, got 0\.0005/,
      ],
      [{ windowSizes: [60], syncRate: Number.NaN }, 'INVALID_OPTION', /syncRate must be a finite number of seconds, got NaN/],
      [{ windowSizes: [60], syncRate: 1 }, 'MISSING_STRATEGY', /syncRate 1 needs a strategy/],
      [{ windowSizes: [60], syncRate: 1, strategy: 'cassandra' }, 'UNKNOWN_STRATEGY', /strategy "cassandra" is not a known strategy name/],
      [
        { windowSizes: [60], syncRate: 1, strategy: { name: 'half' } },
        'INVALID_OPTION',
        /strategy must be a strategy name or an object with/,
      ],
      [{ windowSizes: [60], sync_rate: 1 }, 'INVALID_OPTION', /unknown option "sync_rate" \(options are camelCase here\)/],
      [{ windowSizes: [60], namespace: 'a|b' }, 'INVALID_OPTION', /namespace must be a non-empty string without "\|", got "a\|b"/],
      [{ windowSizes: [60], namespace: '' }, 'INVALID_OPTION', /namespace must be a non-empty string/],
      [{ windowSizes: [60], maxKeys: 0 }, 'INVALID_OPTION', /maxKeys must be a positive integer, got 0/],
      [{ windowSizes: [60], onStoreError: 'explode' }, 'INVALID_OPTION', /onStoreError must be "local", "allow" or "deny", got "explode"/],
      [{ windowSizes: [60], storeTimeoutMs: -5 }, 'INVALID_OPTION', /storeTimeoutMs must be a positive number of ms, got -5/],
      [{ windowSizes: [60], clock: 12 }, 'INVALID_OPTION', /clock must be a function returning epoch ms, got 12/],
      [{ windowSizes: [60], strategyOpts: 'redis://x' }, 'INVALID_OPTION', /strategyOpts must be an object/],
    ]
    for (const [options, code, message] of cases) {
      assert.throws(
        () => instance().new(options as never),
        (err: unknown) => err instanceof ConfigError && err.code === code && message.test(err.message),
        `${JSON.stringify(options)} should fail with ${code} ${message}`,
      )
    }
  })

  it('refuses a second maxKeys for a shared dict', () => {
    const rl = instance()
    rl.new({ namespace: 'a', dict: 'shared', maxKeys: 10, windowSizes: [60] })
    assert.throws(
      () => rl.new({ namespace: 'b', dict: 'shared', maxKeys: 20, windowSizes: [60] }),
      /maxKeys 20 conflicts with dict "shared"/,
    )
  })

  it('gives clear TypeError/RangeError for bad per-hit arguments, never a silent wrong count', () => {
    const rl = instance()
    rl.new({ namespace: 'api', windowSizes: [60] })
    const check = (fn: () => unknown, type: typeof TypeError | typeof RangeError, code: string, message: RegExp) =>
      assert.throws(
        fn,
        (err: unknown) => err instanceof type && (err as { code?: string }).code === code && message.test((err as Error).message),
      )
    check(() => rl.increment('k', 60, 1, 'nope'), RangeError, 'UNKNOWN_NAMESPACE', /namespace "nope" is not defined/)
    check(
      () => rl.increment('k', 30, 1, 'api'),
      RangeError,
      'UNKNOWN_WINDOW_SIZE',
      /window size 30 is not one of namespace "api"'s windowSizes \[60\]/,
    )
    check(() => rl.increment('k', 60, Number.NaN, 'api'), RangeError, 'INVALID_VALUE', /value must be finite, got NaN/)
    check(() => rl.increment('k', 60, Number.POSITIVE_INFINITY, 'api'), RangeError, 'INVALID_VALUE', /value must be finite, got Infinity/)
    check(() => rl.increment('k', 60, '1' as never, 'api'), TypeError, 'INVALID_VALUE', /value must be a number, got string/)
    check(() => rl.increment(42 as never, 60, 1, 'api'), TypeError, 'INVALID_KEY', /key must be a string, got number/)
    check(() => rl.slidingWindow(undefined as never, 60, undefined, 'api'), TypeError, 'INVALID_KEY', /key must be a string/)
    check(() => rl.slidingWindow('k', 60, Number.NaN, 'api'), RangeError, 'INVALID_VALUE', /curDiff must be a finite number/)
    assert.equal(rl.slidingWindow('k', 60, undefined, 'api'), 0, 'nothing was counted by the failed calls')
  })

  it('exports the default instance as module functions, as Kong does', async () => {
    const clock = createFakeClock(MINUTE)
    ratelimiting.new({ namespace: 'module-level', windowSizes: [60], clock: clock.now })
    try {
      assert.equal(ratelimiting.increment('k', 60, 2, 'module-level'), 2)
      assert.equal(ratelimiting.slidingWindow('k', 60, undefined, 'module-level'), 2)
      assert.equal(RateLimiting.default.slidingWindow('k', 60, undefined, 'module-level'), 2)
      const d = ratelimiting.limiter({ namespace: 'module-level', limits: [{ limit: 3, window: 60 }] }).hit('k')
      assert.equal((d as ratelimiting.Decision).remaining, 0)
    } finally {
      await ratelimiting.close()
    }
  })
})

describe('sync modes', () => {
  it('returns plain numbers synchronously in local and periodic namespaces, a Promise in synchronous ones', async () => {
    const store = new MemoryStrategy()
    const rl = instance()
    rl.new({ namespace: 'local', windowSizes: [60], syncRate: -1 })
    rl.new({ namespace: 'periodic', windowSizes: [60], syncRate: 0.5, strategy: store, autoSync: false })
    rl.new({ namespace: 'sync', windowSizes: [60], syncRate: 0, strategy: store })
    assert.equal(typeof rl.increment('k', 60, 1, 'local'), 'number')
    assert.equal(typeof rl.increment('k', 60, 1, 'periodic'), 'number')
    assert.equal(typeof rl.slidingWindow('k', 60, undefined, 'periodic'), 'number')
    const pending = rl.increment('k', 60, 1, 'sync')
    assert.ok(pending instanceof Promise)
    assert.equal(await pending, 1)
    assert.equal(await rl.increment('k', 60, 1, 'local'), 2, 'await works in every mode')
    await rl.close()
  })

  it("periodic mode: a process that only reads a key learns the fleet's count at its next sync", async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const [a, b] = [instance('reader-a'), instance('reader-b')]
    for (const rl of [a, b]) rl.new({ windowSizes: [60], syncRate: 1, strategy: store, autoSync: false, clock: clock.now })
    const limiter = (rl: RateLimiting) => rl.limiter({ limits: [{ limit: 5, window: 60 }] })
    for (let i = 0; i < 5; i++) limiter(a).hit('k')
    await a.sync()
    // b has never seen the key: its first reads answer locally, and hold the key for the sync
    assert.equal((limiter(b).peek('k') as Decision).remaining, 5)
    assert.equal(b.slidingWindow('other', 60), 0)
    await b.sync()
    assert.equal((limiter(b).peek('k') as Decision).remaining, 0, 'peek after the sync')
    assert.equal(b.slidingWindow('k', 60), 5, 'slidingWindow after the sync')
    assert.equal((limiter(b).hit('k') as Decision).allowed, false, "the fleet's limit holds for the reader's first hit")
  })

  it('local mode needs no strategy and never touches one', async () => {
    const store = new MemoryStrategy()
    const rl = instance()
    rl.new({ windowSizes: [60], strategy: store })
    rl.increment('k', 60)
    await rl.sync()
    await rl.close()
    assert.equal(store.calls.pushDiffs, 0)
  })

  it('synchronous mode applies every hit to the store and sees other processes at once', async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const a = instance('a')
    const b = instance('b')
    for (const rl of [a, b]) rl.new({ windowSizes: [60], syncRate: 0, strategy: store, clock: clock.now })
    assert.equal(await a.increment('k', 60, 2), 2)
    assert.equal(await b.increment('k', 60, 3), 5)
    assert.equal(await a.slidingWindow('k', 60), 5)
    assert.equal(store.calls.pushDiffs, 3)
    await Promise.all([a.close(), b.close()])
  })

  it('periodic mode counts locally and converges on sync', async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const [a, b] = [instance('a'), instance('b')]
    for (const rl of [a, b]) rl.new({ windowSizes: [60], syncRate: 1, strategy: store, clock: clock.now, autoSync: false })
    a.increment('k', 60, 4)
    b.increment('k', 60, 6)
    assert.equal(store.calls.pushDiffs, 0, 'no I/O on the hot path')
    await a.sync()
    await b.sync()
    await a.sync()
    assert.equal(a.slidingWindow('k', 60), 10)
    assert.equal(b.slidingWindow('k', 60), 10)
  })

  it('refreshes every held key on each sync, not only those it pushed', async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const [a, b] = [instance('a'), instance('b')]
    for (const rl of [a, b]) rl.new({ windowSizes: [60], syncRate: 1, strategy: store, clock: clock.now, autoSync: false })
    a.increment('k', 60, 1)
    await a.sync()
    b.increment('k', 60, 5)
    await b.sync()
    await a.sync() // a has nothing to push
    assert.equal(a.slidingWindow('k', 60), 6)
  })

  it('fetch warms up a new process with the whole namespace', async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE + 30_000)
    const a = instance('a')
    a.new({ windowSizes: [60], syncRate: 1, strategy: store, clock: clock.now, autoSync: false })
    a.increment('x', 60, 3)
    a.increment('y', 60, 4)
    await a.sync()
    const fresh = instance('fresh')
    fresh.new({ windowSizes: [60], syncRate: 1, strategy: store, clock: clock.now, autoSync: false })
    assert.equal(fresh.slidingWindow('x', 60), 0)
    await fresh.fetch('default')
    assert.equal(fresh.slidingWindow('x', 60), 3)
    assert.equal(fresh.slidingWindow('y', 60), 4)
    assert.equal(fresh.increment('y', 60, 1), 5)
  })

  it('runs one fetch at a time and bounds it with a timeout', async () => {
    const store = new MemoryStrategy()
    const rl = instance()
    rl.new({ windowSizes: [60], syncRate: 1, strategy: store, autoSync: false, onError: () => {} })
    await Promise.all([rl.fetch(), rl.fetch()])
    assert.equal(store.calls.getCounters, 1)
    store.hang()
    await assert.rejects(rl.fetch('default', undefined, 0.02), (err: unknown) => err instanceof StoreError && err.code === 'STORE_TIMEOUT')
    store.up()
  })

  it('never runs two syncs of a namespace at once', async () => {
    const store = new MemoryStrategy()
    const rl = instance()
    rl.new({ windowSizes: [60], syncRate: 1, strategy: store, autoSync: false, storeTimeoutMs: 5_000, onError: () => {} })
    rl.increment('k', 60)
    store.hang()
    const first = rl.sync()
    const second = rl.sync()
    const third = rl.sync()
    await new Promise((resolve) => setImmediate(resolve))
    assert.equal(store.calls.pushDiffs, 1, 'the second sync waits for the first')
    assert.equal(second, third, 'syncs asked for meanwhile run once')
    store.up()
    await assert.rejects(first)
    await second
    assert.equal(store.calls.pushDiffs, 2)
    assert.equal(rl.slidingWindow('k', 60), 1)
  })

  it('arms the periodic timer on new(), aligned to wall-clock multiples of the sync rate, and again after each sync', async () => {
    // the timer and Date under node:test's fake timers: the instants are exact, nothing sleeps.
    // The library paces I/O on node:timers' own timers, which fakes do not replace; the test
    // hands it the faked ones.
    mock.timers.enable({ apis: ['setTimeout', 'Date'], now: 1_000_007 })
    const real = { ...ioTimers }
    Object.assign(ioTimers, { setTimeout: globalThis.setTimeout, clearTimeout: globalThis.clearTimeout })
    const store = new MemoryStrategy()
    const rl = instance()
    const pushesAt: number[] = []
    const watched = Object.assign(Object.create(store) as MemoryStrategy, {
      pushDiffs(batch: DiffBatch) {
        pushesAt.push(Date.now())
        return store.pushDiffs(batch)
      },
    })
    const settle = () => new Promise((resolve) => setImmediate(resolve)) // real: not faked here
    try {
      rl.new({ namespace: 'timer', windowSizes: [60], syncRate: 0.02, strategy: watched, clock: () => Date.now() })
      rl.increment('k', 60, 1, 'timer')
      mock.timers.tick(12) // 1_000_019: not yet
      await settle()
      assert.deepEqual(pushesAt, [])
      mock.timers.tick(1) // 1_000_020, the next multiple of 20 ms: the write
      await settle()
      assert.deepEqual(pushesAt, [1_000_020])
      mock.timers.tick(1) // the settle time (20 ms / 20) then the read-back
      await settle()
      assert.deepEqual(pushesAt, [1_000_020, 1_000_021])
      rl.increment('k', 60, 1, 'timer')
      mock.timers.tick(18) // 1_000_039: the next timer aims at 1_000_040
      await settle()
      assert.equal(pushesAt.length, 2)
      mock.timers.tick(1)
      await settle()
      assert.deepEqual(pushesAt.slice(2), [1_000_040])
      mock.timers.tick(1)
      await settle()
    } finally {
      mock.timers.reset()
      Object.assign(ioTimers, real)
      await rl.close()
    }
  })

  it('flushes unsynced hits on close', async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const rl = instance()
    rl.new({ windowSizes: [60], syncRate: 10, strategy: store, clock: clock.now })
    rl.increment('k', 60, 7)
    await rl.close()
    assert.equal((await store.getWindow('k', 'default', MINUTE, 60_000)).count, 7)
  })

  it('reports store errors through onError and the store-error channel, never by printing', async () => {
    const store = new MemoryStrategy()
    const errors: Error[] = []
    const published: unknown[] = []
    const onPublish = (message: unknown) => published.push(message)
    subscribe('ratelimiting:store-error', onPublish)
    try {
      const rl = instance()
      rl.new({ windowSizes: [60], syncRate: 1, strategy: store, autoSync: false, onError: (e) => errors.push(e) })
      rl.increment('k', 60)
      store.down()
      await assert.rejects(rl.sync(), /store is down/)
      assert.equal(errors.length, 1)
      assert.equal((errors[0] as StoreError).code, 'STORE_UNAVAILABLE')
      assert.equal(published.length, 1)
      assert.equal(rl.stats().storeErrors, 1)
      store.up()
    } finally {
      unsubscribe('ratelimiting:store-error', onPublish)
    }
  })
})

describe('sync invariants under injected faults', () => {
  function pair() {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE + 1_000)
    const [a, b] = [instance('a'), instance('b')]
    for (const rl of [a, b])
      rl.new({ windowSizes: [60], syncRate: 1, strategy: store, clock: clock.now, autoSync: false, onError: () => {} })
    const syncAll = async () => {
      await a.sync()
      await b.sync()
      await a.sync()
    }
    return { store, clock, a, b, syncAll }
  }

  it('loses no hit when a push fails: they reach the store on the next sync', async () => {
    const { store, a, b, syncAll } = pair()
    a.increment('k', 60, 3)
    store.failNextPushes(1)
    await assert.rejects(a.sync())
    assert.equal(a.slidingWindow('k', 60), 3, 'still counted locally')
    b.increment('k', 60, 2)
    await syncAll()
    assert.equal(a.slidingWindow('k', 60), 5)
    assert.equal(b.slidingWindow('k', 60), 5)
  })

  it('counts nothing twice when a push landed but its reply was lost', async () => {
    const { store, a, b, syncAll } = pair()
    a.increment('k', 60, 3)
    store.loseNextReplies(1)
    await assert.rejects(a.sync())
    a.increment('k', 60, 1)
    await syncAll()
    await b.fetch() // b never saw k: warm it up from the store
    assert.equal(a.slidingWindow('k', 60), 4)
    assert.equal(b.slidingWindow('k', 60), 4)
    assert.equal((await store.getWindow('k', 'default', MINUTE, 60_000)).count, 4)
  })

  it('keeps limiting on local counts while the store is down, and catches up after', async () => {
    const { store, a, b, syncAll } = pair()
    const limiter = a.limiter({ limits: [{ limit: 5, window: 60 }] })
    b.increment('k', 60, 2)
    await syncAll()
    await a.fetch()
    store.down()
    const outcomes = Array.from({ length: 4 }, () => (limiter.hit('k') as ratelimiting.Decision).allowed)
    assert.deepEqual(outcomes, [true, true, true, false], 'last known total 2 + local hits')
    b.increment('k', 60, 1)
    await assert.rejects(a.sync())
    store.up()
    await syncAll()
    assert.equal(a.slidingWindow('k', 60), 7)
    assert.equal(b.slidingWindow('k', 60), 7)
  })

  it('restores exact totals after the store restarts and loses its data', async () => {
    const { store, a, b, syncAll } = pair()
    a.increment('k', 60, 3)
    b.increment('k', 60, 4)
    await syncAll()
    store.restart()
    a.increment('k', 60, 1)
    await syncAll()
    await syncAll()
    assert.equal(a.slidingWindow('k', 60), 8)
    assert.equal(b.slidingWindow('k', 60), 8)
  })

  it('resets a key across the fleet', async () => {
    const { a, b, syncAll } = pair()
    a.increment('k', 60, 3)
    b.increment('k', 60, 4)
    await syncAll()
    await a.limiter({ limits: [{ limit: 10, window: 60 }] }).reset('k')
    await syncAll()
    assert.equal(a.slidingWindow('k', 60), 0)
    assert.equal(b.slidingWindow('k', 60), 0)
    b.increment('k', 60, 1)
    await syncAll()
    assert.equal(a.slidingWindow('k', 60), 1)
  })
})

describe('the local counter dict', () => {
  it('keeps the current and previous window and drops older ones', () => {
    const clock = createFakeClock(MINUTE)
    const rl = instance()
    rl.new({ windowSizes: [60], clock: clock.now })
    rl.increment('k', 60, 10)
    clock.advance(60_000)
    rl.increment('k', 60, 1)
    assert.equal(rl.slidingWindow('k', 60), 11, 'previous window at weight 1')
    clock.advance(30_000)
    assert.equal(rl.slidingWindow('k', 60), 1 + 10 * 0.5)
    clock.advance(60_000)
    assert.equal(rl.slidingWindow('k', 60), 0.5, 'two windows later only the now-previous counts')
    clock.advance(60_000)
    assert.equal(rl.slidingWindow('k', 60), 0)
  })

  it('applies curDiff in place of the unsynced hits', async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const rl = instance()
    rl.new({ windowSizes: [60], syncRate: 1, strategy: store, clock: clock.now, autoSync: false })
    rl.increment('k', 60, 4)
    await rl.sync()
    rl.increment('k', 60, 2)
    assert.equal(rl.slidingWindow('k', 60), 6)
    assert.equal(rl.slidingWindow('k', 60, 0), 4, 'synced 4 + a diff of 0')
    assert.equal(rl.slidingWindow('k', 60, 10), 14)
  })

  it('stays within maxKeys under a key flood, evicting with CLOCK', () => {
    const clock = createFakeClock(MINUTE)
    const rl = instance()
    rl.new({ windowSizes: [60], clock: clock.now, maxKeys: 100 })
    const limiter = rl.limiter({ limits: [{ limit: 1000, window: 60 }] })
    for (let i = 0; i < 10_000; i++) {
      limiter.hit(`flood-${i}`)
      limiter.hit('hot') // hit on every round: the CLOCK bit keeps it
    }
    const stats = rl.stats()
    assert.ok(stats.dict.keys <= 100)
    assert.ok(stats.dict.capacity <= 100)
    assert.ok(stats.dict.evictions >= 9_900)
    assert.equal(rl.slidingWindow('hot', 60), 1000 + 9_000, 'a hot key survives the flood')
  })

  it('keeps a key hit now and then through a flood of keys each hit once (a flood cannot reset a victim)', () => {
    // a login limiter of 10 an hour: an attacker sends junk user names between tries of one
    for (const [maxKeys, every] of [
      [1_000, 50],
      [1_000, 500],
      [20_000, 5_000],
    ] as const) {
      const clock = createFakeClock(MINUTE)
      const rl = instance()
      rl.new({ windowSizes: [3600], clock: clock.now, maxKeys })
      const limiter = rl.limiter({ limits: [{ limit: 10, window: 3600 }] })
      let admitted = 0
      let junk = 0
      for (let i = 0; i < 200; i++) {
        if ((limiter.hit('victim') as Decision).allowed) admitted++
        for (let j = 0; j < every; j++) limiter.hit(`junk-${junk++}`)
      }
      assert.ok(rl.stats().dict.evictions > 0, 'the dict was full')
      assert.equal(admitted, 10, `maxKeys ${maxKeys}, a junk key flood of ${every} between tries`)
    }
  })

  it('prefers evicting keys whose hits are synced', async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const rl = instance()
    rl.new({ windowSizes: [60], syncRate: 1, strategy: store, clock: clock.now, autoSync: false, maxKeys: 10 })
    for (let i = 0; i < 5; i++) rl.increment(`synced-${i}`, 60)
    await rl.sync()
    for (let i = 0; i < 5; i++) rl.increment(`unsynced-${i}`, 60)
    for (let i = 0; i < 5; i++) rl.increment(`new-${i}`, 60)
    const stats = rl.stats()
    assert.equal(stats.dict.evictedUnsynced, 0)
    for (let i = 0; i < 5; i++) assert.equal(rl.slidingWindow(`unsynced-${i}`, 60), 1)
  })

  it('recycles stale keys as new ones arrive, without timers', () => {
    const clock = createFakeClock(MINUTE)
    const rl = instance()
    rl.new({ windowSizes: [1], clock: clock.now, maxKeys: 1_000_000 })
    for (let round = 0; round < 20; round++) {
      for (let i = 0; i < 1000; i++) rl.increment(`r${round}-${i}`, 1)
      clock.advance(2_000)
    }
    const { keys, expired } = rl.stats().dict
    assert.ok(keys < 4_000, `held ${keys} keys, only ~2 rounds are live`)
    assert.ok(expired > 10_000)
  })

  it('shares one dict between namespaces that name it, keeping their keys apart', () => {
    const rl = instance()
    rl.new({ namespace: 'a', dict: 'shared', windowSizes: [60] })
    rl.new({ namespace: 'b', dict: 'shared', windowSizes: [60] })
    rl.increment('k', 60, 1, 'a')
    rl.increment('k', 60, 2, 'b')
    assert.equal(rl.slidingWindow('k', 60, undefined, 'a'), 1)
    assert.equal(rl.slidingWindow('k', 60, undefined, 'b'), 2)
    assert.equal(rl.stats('a').dict.keys, 2, 'one dict holds both')
  })

  it('holds decimal values', () => {
    const rl = instance()
    rl.new({ windowSizes: [60] })
    rl.increment('k', 60, 0.5)
    assert.equal(rl.increment('k', 60, 0.25), 0.75)
  })
})

describe('decimal values and stores', () => {
  it('refuses a decimal value, naming the store, when the strategy cannot hold decimals', async () => {
    const integerOnly = Object.assign(new MemoryStrategy(), { supportsDecimals: false })
    const rl = instance()
    rl.new({ windowSizes: [60], syncRate: 1, strategy: integerOnly, autoSync: false })
    assert.throws(
      () => rl.increment('k', 60, 0.5),
      (err: unknown) =>
        err instanceof RangeError &&
        /value must be an integer: the memory strategy of namespace "default" cannot hold decimals, got 0\.5/.test(err.message),
    )
    assert.equal(rl.increment('k', 60, 2), 2)
    await rl.close()
  })

  it('knows a registered strategy cannot hold decimals before it is loaded', async () => {
    ratelimiting.registerStrategy('integer-memory', () => Object.assign(new MemoryStrategy(), { supportsDecimals: false }), {
      supportsDecimals: false,
    })
    const rl = instance()
    rl.new({ windowSizes: [60], syncRate: 1, strategy: 'integer-memory', autoSync: false })
    assert.throws(() => rl.increment('k', 60, 1.5), /cannot hold decimals/)
    await rl.close()
  })
})
