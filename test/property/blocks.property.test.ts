/**
 * Blocks against a reference (docs/ARCHITECTURE.md, "Blocks"): for any interleaving of
 * `block`, `unblock`, hits and peeks on several instances sharing one store, syncs, failed
 * pushes, lost replies and outages, once the store is back and every instance has synced and
 * asked again:
 *
 * - nothing is lost: each instance's last op on each key reached the store after it was made,
 *   and no op is left waiting;
 * - the store holds what replaying the ops it applied, in their order, gives (the later end
 *   kept, a lift removing the block): a retried op changed nothing;
 * - every instance's view of every key's block is the store's.
 *
 * Periodic and synchronous, on the memory store and on a real Redis (fewer runs there).
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, describe, it } from 'node:test'
import fc from 'fast-check'
import { Redis } from 'ioredis'
import { createFakeClock, type Limiter, MemoryStrategy, RateLimiting, type Strategy } from '../../src/index.js'
import type { CounterRow, DiffBatch } from '../../src/core/strategy.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { FaultyStrategy } from '../../src/testing/faulty-strategy.js'
import { sharedRedisUrl } from '../support/redis-server.js'

const SIZE = 10
const KEYS = ['a', 'b', 'c']
const INSTANCES = 3
const startTime = (): number => Math.ceil(Date.now() / 60_000) * 60_000 + 60_000

type Faulty = Strategy & { failNextPushes(n?: number): void; loseNextReplies(n?: number): void; down(): void; up(): void }

const redis = new Redis(await sharedRedisUrl(), { lazyConnect: true })
const runPrefix = `test:blocks-prop-${randomUUID().slice(0, 8)}`
after(async () => {
  let cursor = '0'
  do {
    const [next, names] = await redis.scan(cursor, 'MATCH', `${runPrefix}*`, 'COUNT', 1000)
    cursor = next
    if (names.length > 0) await redis.unlink(...names)
  } while (cursor !== '0')
  await redis.quit()
})

const STORES: Array<{ name: string; runs: number; make: () => Faulty }> = [
  { name: 'memory', runs: 150, make: () => new MemoryStrategy() },
  {
    name: 'redis',
    runs: 25,
    make: () => new FaultyStrategy(new RedisStrategy({ client: redis, prefix: `${runPrefix}-${randomUUID().slice(0, 8)}` })),
  },
]

/** One op the store applied, in the order it applied them. */
interface Applied {
  readonly nodeId: string
  readonly key: string
  readonly untilMs: number
  readonly index: number
}

// Records the block ops a store applied: those of a push that succeeded, or whose reply was lost
// after the store applied it.
class Recorder implements Strategy {
  readonly name: string
  readonly supportsDecimals = true
  readonly supportsBlocks = true
  readonly applied: Applied[] = []
  clock = 0

  constructor(private readonly inner: Strategy) {
    this.name = inner.name
  }

  async pushDiffs(batch: DiffBatch): Promise<CounterRow[]> {
    const record = () => {
      for (const b of batch.blocks ?? []) this.applied.push({ nodeId: batch.nodeId, key: b.key, untilMs: b.untilMs, index: ++this.clock })
    }
    try {
      const rows = await this.inner.pushDiffs(batch)
      record()
      return rows
    } catch (err) {
      if ((err as { code?: string }).code === 'STORE_REPLY_LOST') record()
      throw err
    }
  }
  getCounters = (...args: Parameters<Strategy['getCounters']>) => this.inner.getCounters(...args)
  resetKey = (...args: Parameters<Strategy['resetKey']>) => this.inner.resetKey(...args)
  close = async () => {}
}

type Op =
  | { op: 'block'; at: number; key: string; ms: number }
  | { op: 'unblock'; at: number; key: string }
  | { op: 'hit'; at: number; key: string }
  | { op: 'peek'; at: number; key: string }
  | { op: 'sync'; at: number }
  | { op: 'failNextPush' }
  | { op: 'loseNextReply' }
  | { op: 'down' }
  | { op: 'up' }
  | { op: 'advance'; ms: number }

const at = fc.integer({ min: 0, max: INSTANCES - 1 })
const key = fc.constantFrom(...KEYS)
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 4, arbitrary: fc.record({ op: fc.constant('block' as const), at, key, ms: fc.integer({ min: 1, max: 20_000 }) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('unblock' as const), at, key }) },
  { weight: 3, arbitrary: fc.record({ op: fc.constant('hit' as const), at, key }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('peek' as const), at, key }) },
  { weight: 4, arbitrary: fc.record({ op: fc.constant('sync' as const), at }) },
  { weight: 1, arbitrary: fc.constant({ op: 'failNextPush' as const }) },
  { weight: 1, arbitrary: fc.constant({ op: 'loseNextReply' as const }) },
  { weight: 1, arbitrary: fc.constant({ op: 'down' as const }) },
  { weight: 1, arbitrary: fc.constant({ op: 'up' as const }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 7_000 }) }) },
)

async function run(make: () => Faulty, syncRate: number, ops: Op[]): Promise<void> {
  const clock = createFakeClock(startTime())
  const faulty = make()
  const store = new Recorder(faulty)
  const nodes = Array.from({ length: INSTANCES }, (_, i) => {
    const rl = RateLimiting.newInstance(`blocks-prop-${i}`)
    rl.new({ windowSizes: [SIZE], syncRate, strategy: store, clock: clock.now, autoSync: false, onError: () => {}, blocking: true })
    const limiter = rl.limiter({ limits: [{ limit: 3, window: SIZE }] })
    return { rl, limiter, nodeId: limiter.namespace.nodeId }
  })
  // each instance's last op per key, and when it was made (in the recorder's order)
  const last = new Map<string, { untilMs: number; madeAt: number }>()
  const quiet = <T>(p: Promise<T> | T) => Promise.resolve(p).catch(() => undefined)
  try {
    for (const o of ops) {
      const n = 'at' in o ? nodes[o.at] : undefined
      switch (o.op) {
        case 'block': {
          const madeAt = store.clock
          const end = (n as (typeof nodes)[0]).limiter.block(o.key, o.ms)
          // the op is queued when block() returns; a synchronous one is pushed before it resolves
          const untilMs = await end
          last.set(`${o.at}/${o.key}`, { untilMs, madeAt })
          // it holds here at once, store down or not
          assert.ok(((n as (typeof nodes)[0]).limiter.namespace.blocks?.endOf(o.key, clock.now()) ?? 0) >= untilMs)
          break
        }
        case 'unblock':
          last.set(`${o.at}/${o.key}`, { untilMs: 0, madeAt: store.clock })
          await (n as (typeof nodes)[0]).limiter.unblock(o.key)
          break
        case 'hit':
          await quiet((n as (typeof nodes)[0]).limiter.hit(o.key))
          break
        case 'peek':
          await quiet((n as (typeof nodes)[0]).limiter.peek(o.key))
          break
        case 'sync':
          await quiet((n as (typeof nodes)[0]).rl.sync())
          break
        case 'failNextPush':
          faulty.failNextPushes(1)
          break
        case 'loseNextReply':
          faulty.loseNextReplies(1)
          break
        case 'down':
          faulty.down()
          break
        case 'up':
          faulty.up()
          break
        case 'advance':
          clock.advance(o.ms)
          break
      }
    }
    // the store is back; every instance pushes what waits, looks at every key, and syncs again
    faulty.up()
    for (let round = 0; round < 3; round++) {
      for (const n of nodes) {
        await quiet(n.rl.sync())
        for (const k of KEYS) await quiet(n.limiter.peek(k))
        await quiet(n.rl.sync())
      }
    }
    const now = clock.now()
    // nothing lost: each last op reached the store after it was made, and nothing waits
    for (const [id, op] of last) {
      const [i, k] = id.split('/') as [string, string]
      const node = nodes[Number(i)] as (typeof nodes)[0]
      const reached = store.applied.some((a) => a.nodeId === node.nodeId && a.key === k && a.untilMs === op.untilMs && a.index > op.madeAt)
      assert.ok(reached, `instance ${i}'s last op on ${k} (${op.untilMs}) reached the store`)
    }
    for (const n of nodes) assert.equal(n.limiter.namespace.blocks?.pendingCount, 0, 'no op left waiting')
    // the store is the replay of what it applied; every view is the store's
    const replay = new Map<string, number>()
    for (const a of store.applied) {
      if (a.untilMs === 0) replay.delete(a.key)
      else replay.set(a.key, Math.max(replay.get(a.key) ?? 0, a.untilMs))
    }
    const rows = await faulty.pushDiffs({
      namespace: 'default',
      nodeId: 'reader',
      seq: 1,
      nowMs: now,
      windows: [],
      refresh: KEYS.map((k) => ({ key: k, windowStartMs: now - (now % (SIZE * 1000)), windowSizeMs: SIZE * 1000 })),
      readBlocks: true,
    })
    for (const k of KEYS) {
      const expected = (replay.get(k) ?? 0) > now ? (replay.get(k) as number) : 0
      const stored = rows.find((r) => r.key === k)?.blockedUntilMs
      assert.equal(stored, expected, `the store's block of ${k} is the replay of the ops it applied`)
      for (const [i, n] of nodes.entries()) {
        assert.equal(n.limiter.namespace.blocks?.endOf(k, now) ?? 0, expected, `instance ${i} sees the store's block of ${k}`)
        const d = await (n.limiter as Limiter).peek(k)
        assert.equal(d.reason === 'blocked', expected !== 0, `instance ${i} decides ${k} by it`)
      }
    }
  } finally {
    for (const n of nodes) await n.rl.close().catch(() => undefined)
  }
}

for (const store of STORES) {
  for (const [mode, syncRate] of [
    ['periodic', 1],
    ['synchronous', 0],
  ] as const) {
    describe(`blocks: the property on ${store.name}, ${mode}`, { timeout: 300_000 }, () => {
      it('nothing lost, nothing applied twice, every view converges to the store', async () => {
        await fc.assert(
          fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 40 }), (ops) => run(store.make, syncRate, ops)),
          { numRuns: store.runs },
        )
      })
    })
  }
}
