/**
 * The escrow invariants (docs/ARCHITECTURE.md, "Escrow") against an exact model: for any
 * interleaving of hits on N processes sharing one store, grants made one by one and in bursts of
 * one event-loop turn, syncs (returns of budget), failed calls, lost replies (a grant or a return
 * applied, its answer lost, the call retried later), outages and store restarts that lose every
 * reservation:
 *
 * - **the bound**: at every admission, the fleet's admitted hits, by the engine's formula
 *   (`current + previous × weight`), are within the limit;
 * - **nothing applied twice**: once the windows have closed and every process has synced, each
 *   window's stored total is exactly what the processes counted there (admitted hits and the
 *   denied ones counted, `countDenied`): no retried grant or return left a reservation behind or
 *   took one away twice.
 *
 * Every process syncs at every `syncRate` tick of the fake clock, as the timer does: the premise
 * under which a store restart keeps the bound (every process reaches the store within its
 * learning period). `onStoreError: deny`, the policy that never admits without a grant.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { createFakeClock, type Decision, type Limiter, MemoryStrategy, RateLimiting } from '../../src/index.js'
import { previousWeight, windowStartMs } from '../../src/core/window.js'

const SIZE_MS = 10_000
const SYNC_MS = 1_000
const KEYS = ['a', 'b']
const startTime = (): number => Math.ceil(Date.now() / 60_000) * 60_000 + 60_000

type Op =
  | { op: 'hit'; at: number; key: string; cost: number }
  | { op: 'burst'; at: number; key: string; hits: number }
  | { op: 'advance'; ms: number }
  | { op: 'failNext' }
  | { op: 'loseNextReply' }
  | { op: 'down' }
  | { op: 'up' }
  | { op: 'restart' }

function opArb(processes: number): fc.Arbitrary<Op> {
  const at = fc.integer({ min: 0, max: processes - 1 })
  const key = fc.constantFrom(...KEYS)
  return fc.oneof(
    { weight: 10, arbitrary: fc.record({ op: fc.constant('hit' as const), at, key, cost: fc.integer({ min: 1, max: 3 }) }) },
    { weight: 3, arbitrary: fc.record({ op: fc.constant('burst' as const), at, key, hits: fc.integer({ min: 2, max: 6 }) }) },
    { weight: 5, arbitrary: fc.record({ op: fc.constant('advance' as const), ms: fc.integer({ min: 0, max: 2_500 }) }) },
    { weight: 1, arbitrary: fc.constant({ op: 'failNext' as const }) },
    { weight: 1, arbitrary: fc.constant({ op: 'loseNextReply' as const }) },
    { weight: 1, arbitrary: fc.constant({ op: 'down' as const }) },
    { weight: 1, arbitrary: fc.constant({ op: 'up' as const }) },
    { weight: 1, arbitrary: fc.constant({ op: 'restart' as const }) },
  )
}

/** The exact model: hits per key and window start, admitted and counted apart. */
class Model {
  readonly admitted = new Map<string, number>()
  readonly counted = new Map<string, number>()
  add(map: Map<string, number>, key: string, nowMs: number, cost: number): void {
    const id = `${key}@${windowStartMs(nowMs, SIZE_MS)}`
    map.set(id, (map.get(id) ?? 0) + cost)
  }
  /** The admitted rate of `key` at `nowMs`, by the engine's formula. */
  rate(key: string, nowMs: number): number {
    const start = windowStartMs(nowMs, SIZE_MS)
    const cur = this.admitted.get(`${key}@${start}`) ?? 0
    const prev = this.admitted.get(`${key}@${start - SIZE_MS}`) ?? 0
    return cur + prev * previousWeight(nowMs, SIZE_MS)
  }
}

async function run(processes: number, limit: number, ops: Op[]): Promise<void> {
  const clock = createFakeClock(startTime())
  const store = new MemoryStrategy()
  const model = new Model()
  const fleet = Array.from({ length: processes }, (_, i) => {
    const rl = RateLimiting.newInstance(`escrow-${i}`)
    rl.new({
      windowSizes: [SIZE_MS / 1000],
      syncRate: SYNC_MS / 1000,
      strategy: store,
      escrow: true,
      clock: clock.now,
      autoSync: false,
      onStoreError: 'deny',
      onError: () => {},
    })
    return { rl, limiter: rl.limiter({ limits: [{ limit, window: SIZE_MS / 1000 }] }) as Limiter }
  })
  const tick = async () => {
    for (const p of fleet)
      await p.rl
        .namespace('default')
        .sync(false)
        .catch(() => undefined)
  }
  const record = (d: Decision, key: string, cost: number, nowMs: number) => {
    if (d.allowed) {
      model.add(model.admitted, key, nowMs, cost)
      const rate = model.rate(key, nowMs)
      assert.ok(rate <= limit + 1e-9, `the fleet admitted a rate of ${rate} > ${limit} for ${key} at ${nowMs}`)
    }
    if (d.allowed || cost <= limit) model.add(model.counted, key, nowMs, cost)
  }
  for (const op of ops) {
    switch (op.op) {
      case 'hit': {
        const nowMs = clock.now()
        record(await (fleet[op.at] as (typeof fleet)[number]).limiter.hit(op.key, op.cost), op.key, op.cost, nowMs)
        break
      }
      case 'burst': {
        // one event-loop turn: the grants these need go out as one call
        const nowMs = clock.now()
        const decisions = await Promise.all(
          Array.from({ length: op.hits }, () => (fleet[op.at] as (typeof fleet)[number]).limiter.hit(op.key, 1)),
        )
        for (const d of decisions) record(d, op.key, 1, nowMs)
        break
      }
      case 'advance': {
        // the timer: every process syncs at every syncRate boundary it crosses
        let left = op.ms
        while (left > 0) {
          const step = Math.min(left, SYNC_MS - (clock.now() % SYNC_MS))
          clock.advance(step)
          left -= step
          if (clock.now() % SYNC_MS === 0) await tick()
        }
        break
      }
      case 'failNext':
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
    }
  }
  // Recovery: the store comes back, the window in use closes, and every process syncs (the
  // return of each closed window's register) until a whole round succeeds (each failed call
  // uses up one injected fault, so this ends).
  store.up()
  const closed = windowStartMs(clock.now(), SIZE_MS)
  clock.advance(closed + SIZE_MS + 1 - clock.now())
  // two rounds in a row without a failure: a process that learns in one that the store lost its
  // data writes its hits again in the next
  for (let round = 0, clean = 0; round < 100 && clean < 2; round++) {
    let failed = false
    // explicit syncs: they return every unused budget of a closed window (a timer's only near the limit)
    for (const p of fleet)
      await p.rl.sync().catch(() => {
        failed = true
      })
    clean = failed ? 0 : clean + 1
  }
  for (const key of KEYS) {
    const id = `${key}@${closed}`
    const row = await store.getWindow(key, 'default', closed, SIZE_MS)
    assert.equal(
      row.count,
      model.counted.get(id) ?? 0,
      `${id}: the store holds ${row.count}, the processes counted ${model.counted.get(id) ?? 0}`,
    )
  }
  for (const p of fleet) await p.rl.close().catch(() => undefined)
}

describe('escrow invariants against the exact model', { timeout: 300_000 }, () => {
  it('never admits past the limit, by the formula, under failures, lost replies and outages; nothing applied twice', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 8 }),
        fc.integer({ min: 1, max: 30 }),
        fc.array(opArb(8), { maxLength: 80 }).map((ops) => ops.filter((o) => o.op !== 'restart')),
        async (processes, limit, ops) =>
          run(
            processes,
            limit,
            ops.map((o) => ('at' in o ? { ...o, at: o.at % processes } : o)),
          ),
      ),
      { numRuns: 300 },
    )
  })

  it('never admits past the limit across store restarts that lose every reservation', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 2, max: 8 }),
        fc.integer({ min: 1, max: 30 }),
        fc.array(opArb(8), { maxLength: 80 }),
        async (processes, limit, ops) =>
          run(
            processes,
            limit,
            ops.map((o) => ('at' in o ? { ...o, at: o.at % processes } : o)),
          ),
      ),
      { numRuns: 300 },
    )
  })
})
