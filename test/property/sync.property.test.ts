/**
 * The sync invariants against a reference model: for any interleaving of hits on several
 * instances sharing one store, syncs, failed pushes, lost replies, outages and store restarts,
 * after a final sync every instance's rate for every key equals the exact total — nothing lost,
 * nothing counted twice.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { previousWeight, windowStartSec } from '../../src/core/window.js'
import { createFakeClock, MemoryStrategy, RateLimiting } from '../../src/index.js'

const SIZE = 10
const KEYS = ['a', 'b', 'c']
const INSTANCES = 3
const T0 = 1_699_999_980_000

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
    const start = windowStartSec(nowMs, SIZE)
    const cur = this.hits.get(`${key}@${start}`) ?? 0
    const prev = this.hits.get(`${key}@${start - SIZE}`) ?? 0
    return cur + prev * previousWeight(nowMs, SIZE * 1000)
  }
}

async function run(ops: Op[]): Promise<void> {
  const clock = createFakeClock(T0)
  const store = new MemoryStrategy()
  const model = new Model()
  const instances = Array.from({ length: INSTANCES }, (_, i) => {
    const rl = RateLimiting.newInstance(`node-${i}`)
    rl.new({ windowSizes: [SIZE], syncRate: 1, strategy: store, clock: clock.now, autoSync: false, onError: () => {} })
    return rl
  })
  const hit = (at: number, key: string, cost: number) => {
    ;(instances[at] as RateLimiting).increment(key, SIZE, cost)
    model.add(key, windowStartSec(clock.now(), SIZE), cost)
  }
  for (const op of ops) {
    switch (op.op) {
      case 'hit':
        hit(op.at, op.key, op.cost)
        break
      case 'sync':
        await (instances[op.at] as RateLimiting).sync().catch(() => undefined)
        break
      case 'syncWhileHitting': {
        const pending = (instances[op.at] as RateLimiting).sync().catch(() => undefined)
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
        store.restart()
        break
      case 'advance':
        clock.advance(op.ms)
        break
    }
  }
  // recovery: the store comes back and every instance syncs until it succeeds, twice round
  store.up()
  for (let round = 0; round < 2; round++) {
    for (const rl of instances) {
      for (let attempt = 0; attempt < 5; attempt++) {
        if (
          await rl.sync().then(
            () => true,
            () => false,
          )
        )
          break
      }
    }
  }
  for (const rl of instances) await rl.fetch()
  const now = clock.now()
  for (const [i, rl] of instances.entries()) {
    for (const key of KEYS) {
      assert.equal(rl.slidingWindow(key, SIZE), model.rate(key, now), `instance ${i}, key ${key}`)
    }
  }
}

describe('sync invariants (property)', () => {
  it('every instance agrees with the exact model after recovery, whatever the faults', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 60 }), (ops) => run(ops)),
      { numRuns: 300 },
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
      fc.asyncProperty(fc.array(calm, { minLength: 1, maxLength: 200 }), (ops) => run(ops)),
      { numRuns: 100 },
    )
  })
})
