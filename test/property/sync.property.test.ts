/**
 * The sync invariants against a reference model: for any interleaving of hits on several
 * instances sharing one store, syncs, failed pushes, lost replies, outages and store restarts,
 * after a final sync every instance's rate for every key equals the exact total — nothing lost,
 * nothing counted twice. The same holds when every sync is a timer-driven one, which visits only
 * the keys in use plus a slice of the idle ones (docs/ARCHITECTURE.md, "One sync"). Each property
 * runs on the memory store and on a real Redis (faults injected by FaultyStrategy, a restart
 * deleting the run's keys), fewer runs there.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { previousWeight, windowStartMs } from '../../src/core/window.js'
import { randomUUID } from 'node:crypto'
import { after } from 'node:test'
import { Redis } from 'ioredis'
import { createFakeClock, MemoryStrategy, RateLimiting, type Strategy } from '../../src/index.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { FaultyStrategy } from '../../src/testing/faulty-strategy.js'
import { readWindow } from '../../src/testing/read-window.js'
import { sharedRedisUrl } from '../support/redis-server.js'

const SIZE = 10
const KEYS = ['a', 'b', 'c']
const INSTANCES = 3
// Each run starts at a fake time on a minute boundary at least a minute ahead of the real one:
// Redis expires windows at absolute times (a window of 10 s lives 30 s past its start), which must
// not be in the past when the run writes them, however long the suite has been running.
const startTime = (): number => Math.ceil(Date.now() / 60_000) * 60_000 + 60_000

/** A store with injected faults, fresh for one run. */
type FaultyStore = Strategy & {
  failNextPushes(n?: number): void
  loseNextReplies(n?: number): void
  down(): void
  up(): void
  restart(): void | Promise<void>
}

interface StoreUnderTest {
  readonly name: string
  readonly runs: { readonly faults: number; readonly timerSyncs: number; readonly calm: number }
  make(): FaultyStore
}

const memory: StoreUnderTest = { name: 'memory', runs: { faults: 300, timerSyncs: 100, calm: 100 }, make: () => new MemoryStrategy() }

const redis = new Redis(await sharedRedisUrl(), { lazyConnect: true })
const runPrefix = `test:prop-${randomUUID().slice(0, 8)}`
async function deleteKeys(prefix: string): Promise<void> {
  let cursor = '0'
  do {
    const [next, names] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000)
    cursor = next
    if (names.length > 0) await redis.unlink(...names)
  } while (cursor !== '0')
}
after(async () => {
  await deleteKeys(runPrefix)
  await redis.quit()
})
const onRedis: StoreUnderTest = {
  name: 'redis',
  runs: { faults: 60, timerSyncs: 15, calm: 25 },
  make() {
    const prefix = `${runPrefix}-${randomUUID().slice(0, 8)}`
    // one script call per sync (a single server): the runs stay quick
    const inner = new RedisStrategy({ client: redis, prefix, batchAcrossSlots: true })
    return new FaultyStrategy(inner, { restart: () => deleteKeys(prefix) })
  },
}

type Op =
  | { op: 'hit'; at: number; key: string; cost: number }
  | { op: 'sync'; at: number }
  | { op: 'syncWhileHitting'; at: number; key: string }
  | { op: 'failNextPush' }
  | { op: 'loseNextReply' }
  | { op: 'down' }
  | { op: 'up' }
  | { op: 'restart' }
  | { op: 'advance'; ms: number }

const instanceIndex = fc.integer({ min: 0, max: INSTANCES - 1 })
const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      op: fc.constant('hit' as const),
      at: instanceIndex,
      key: fc.constantFrom(...KEYS),
      cost: fc.integer({ min: 1, max: 5 }),
    }),
  },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('sync' as const), at: instanceIndex }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('syncWhileHitting' as const), at: instanceIndex, key: fc.constantFrom(...KEYS) }) },
  { weight: 1, arbitrary: fc.constant({ op: 'failNextPush' as const }) },
  { weight: 1, arbitrary: fc.constant({ op: 'loseNextReply' as const }) },
  { weight: 1, arbitrary: fc.constant({ op: 'down' as const }) },
  { weight: 1, arbitrary: fc.constant({ op: 'up' as const }) },
  { weight: 1, arbitrary: fc.constant({ op: 'restart' as const }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 7_000 }) }) },
)

/** The model: exact hits per key and window start. */
class Model {
  private readonly hits = new Map<string, number>()
  add(key: string, windowStart: number, cost: number): void {
    const id = `${key}@${windowStart}`
    this.hits.set(id, (this.hits.get(id) ?? 0) + cost)
  }
  rate(key: string, nowMs: number): number {
    const start = windowStartMs(nowMs, SIZE * 1000)
    const cur = this.hits.get(`${key}@${start}`) ?? 0
    const prev = this.hits.get(`${key}@${start - SIZE * 1000}`) ?? 0
    return cur + prev * previousWeight(nowMs, SIZE * 1000)
  }
}

// Idle keys every instance holds in the timer-driven variant: more than one sync refreshes.
const IDLE_KEYS = Array.from({ length: 600 }, (_, i) => `idle-${i}`)

/**
 * Runs `ops`. With `timerSyncs`, every sync is what the timer runs (keys in use, near their
 * limit or whose push failed, plus a slice of the idle keys), and the instances hold 600 idle
 * keys, so no sync sees everything.
 */
async function run(under: StoreUnderTest, ops: Op[], timerSyncs = false): Promise<void> {
  const clock = createFakeClock(startTime())
  const store = under.make()
  const model = new Model()
  const instances = Array.from({ length: INSTANCES }, (_, i) => {
    const rl = RateLimiting.newInstance(`node-${i}`)
    rl.new({ windowSizes: [SIZE], syncRate: 1, strategy: store, clock: clock.now, autoSync: false, onError: () => {} })
    return rl
  })
  const sync = (rl: RateLimiting) => (timerSyncs ? rl.namespace('default').sync(false) : rl.sync())
  const hit = (at: number, key: string, cost: number) => {
    ;(instances[at] as RateLimiting).increment(key, SIZE, cost)
    model.add(key, windowStartMs(clock.now(), SIZE * 1000), cost)
  }
  const keys = timerSyncs ? [...KEYS, ...IDLE_KEYS] : KEYS
  if (timerSyncs) {
    // every instance holds every key (a process refreshes only the keys it holds)
    for (let at = 0; at < INSTANCES; at++) for (const key of keys) hit(at, key, 1)
    for (const rl of instances) await rl.sync()
  }
  for (const op of ops) {
    switch (op.op) {
      case 'hit':
        hit(op.at, op.key, op.cost)
        break
      case 'sync':
        await sync(instances[op.at] as RateLimiting).catch(() => undefined)
        break
      case 'syncWhileHitting': {
        const pending = sync(instances[op.at] as RateLimiting).catch(() => undefined)
        hit(op.at, op.key, 1) // lands while the push is in flight
        await pending
        break
      }
      case 'failNextPush':
        store.failNextPushes(1)
        break
      case 'loseNextReply':
        store.loseNextReplies(1)
        break
      case 'down':
        store.down()
        break
      case 'up':
        store.up()
        break
      case 'restart':
        await store.restart()
        break
      case 'advance':
        clock.advance(op.ms)
        break
    }
  }
  // Recovery: the store comes back, and every instance syncs until a sync succeeds (each failed
  // one uses up one injected fault, so this ends), three times round: after a store lost its
  // data, the first sync that succeeds finds it out and the next one writes the counts back.
  store.up()
  const syncUntilDone = async (rl: RateLimiting) => {
    for (let attempt = 0; attempt < 200; attempt++) {
      if (
        await sync(rl).then(
          () => true,
          () => false,
        )
      )
        return
    }
  }
  for (let round = 0; round < 3; round++) for (const rl of instances) await syncUntilDone(rl)
  if (timerSyncs) {
    // injected faults no sync used up (an instance whose windows all ended has nothing to push)
    // would fail the reads below: a read of an unused key uses each up
    const probe = { namespace: 'default', key: 'probe', windowSizeMs: SIZE * 1000, windowStartMs: 0, nowMs: clock.now() }
    for (let left = ops.length; left > 0; left--)
      if (
        await readWindow(store, probe).then(
          () => true,
          () => false,
        )
      )
        break
    const assertStoreExact = async () => {
      const start = windowStartMs(clock.now(), SIZE * 1000)
      const weight = previousWeight(clock.now(), SIZE * 1000)
      for (const key of keys) {
        const at = { namespace: 'default', key, windowSizeMs: SIZE * 1000, nowMs: clock.now() }
        const cur = await readWindow(store, { ...at, windowStartMs: start })
        const prev = await readWindow(store, { ...at, windowStartMs: start - SIZE * 1000 })
        assert.equal(cur.count + prev.count * weight, model.rate(key, clock.now()), `store, key ${key}`)
      }
    }
    // Unless the store lost its data, every write is in it now, with no sync that saw every key:
    // a sync never skips unsynced hits. (After a restart, an idle key's hits go back when the
    // idle slices reach it and the store answers a lower count than the process holds.)
    if (!ops.some((o) => o.op === 'restart')) await assertStoreExact()
    // enough timer syncs for the idle slices to go round (603 keys, 256 a sync): every key an
    // instance still holds converges without a fetch (a key it released, empty in both its
    // windows, it does not hold: like a key it never saw, it needs a hit or a fetch)
    for (let round = 0; round < 8; round++) for (const rl of instances) await syncUntilDone(rl)
    await assertStoreExact()
    const now = clock.now()
    for (const [i, rl] of instances.entries()) {
      const held = rl.namespace('default').table(SIZE).slots
      for (const key of keys) {
        if (held.has(key)) assert.equal(rl.slidingWindow(key, SIZE), model.rate(key, now), `instance ${i}, held key ${key}`)
      }
    }
  }
  for (const rl of instances) await rl.fetch()
  const now = clock.now()
  for (const [i, rl] of instances.entries()) {
    for (const key of keys) {
      assert.equal(rl.slidingWindow(key, SIZE), model.rate(key, now), `instance ${i}, key ${key}`)
    }
  }
}

for (const under of [memory, onRedis]) {
  describe(`sync invariants (property), ${under.name}`, () => {
    it('every instance agrees with the exact model after recovery, whatever the faults', async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 60 }), (ops) => run(under, ops)),
        { numRuns: under.runs.faults },
      )
    })

    it('every instance agrees with the model when every sync is a timer-driven one, whatever the faults', async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 60 }), (ops) => run(under, ops, true)),
        { numRuns: under.runs.timerSyncs },
      )
    })

    it('agrees with the model with no faults at all, on long runs', async () => {
      const calm = fc.oneof(
        {
          weight: 8,
          arbitrary: fc.record({
            op: fc.constant('hit' as const),
            at: instanceIndex,
            key: fc.constantFrom(...KEYS),
            cost: fc.integer({ min: 1, max: 5 }),
          }),
        },
        { weight: 3, arbitrary: fc.record({ op: fc.constant('sync' as const), at: instanceIndex }) },
        { weight: 2, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 4_000 }) }) },
      )
      await fc.assert(
        fc.asyncProperty(fc.array(calm, { minLength: 1, maxLength: 200 }), (ops) => run(under, ops)),
        { numRuns: under.runs.calm },
      )
    })
  })
}
