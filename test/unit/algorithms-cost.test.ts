/**
 * Costs (docs/SERVICE.md, "Operating limits"): a cost above the limit is denied and never
 * counted, on every algorithm; the sliding log keeps one entry per request whatever its cost,
 * so the work and memory of a request do not depend on its cost; retry times stay exact.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { MemoryFixedWindow, MemorySlidingLog } from '../../src/algorithms/index.js'
import type { RateLimitAlgorithm } from '../../src/algorithms/types.js'
import { createFakeClock } from '../../src/core/clock.js'
import { CounterAlgorithm, CounterEngine } from '../../src/server/counter-algorithm.js'

const MINUTE = 1_699_999_980_000

function algorithms(limit: number, clock: () => number): Array<[string, RateLimitAlgorithm]> {
  const engine = new CounterEngine({
    namespace: 'cost',
    windowSize: 60,
    syncRate: -1,
    strategy: undefined,
    storeTimeoutMs: 1000,
    onStoreError: 'deny',
    onError: () => undefined,
    clock,
  })
  return [
    ['fixed window', new MemoryFixedWindow({ limit, windowMs: 60_000, clock })],
    ['fixed window (denied not counted)', new MemoryFixedWindow({ limit, windowMs: 60_000, clock, countDenied: false })],
    ['sliding log', new MemorySlidingLog({ limit, windowMs: 60_000, clock })],
    ['sliding-window counter', new CounterAlgorithm(engine, limit)],
  ]
}

describe('costs on the memory algorithms', () => {
  it('denies a cost above the limit without counting it, on every algorithm', async () => {
    const clock = createFakeClock(MINUTE + 1_000)
    for (const [name, algorithm] of algorithms(3, clock.now)) {
      await algorithm.check('u1')
      const r = await algorithm.check('u1', 4)
      assert.equal(r.allowed, false, name)
      assert.equal(r.retryAfterMs, Number.POSITIVE_INFINITY, `${name}: it can never be admitted`)
      assert.equal(r.count, 1, `${name}: the answer shows what is counted`)
      assert.equal((await algorithm.peek('u1')).count, 1, `${name}: nothing of the cost was counted`)
      assert.equal((await algorithm.check('u1', 2)).allowed, true, `${name}: the rest of the limit is still there`)
    }
  })

  it('logs one entry for a request of cost 1,000,000: memory does not grow with the cost', () => {
    const clock = createFakeClock(MINUTE)
    const log = new MemorySlidingLog({ limit: 1_000_000_000, windowMs: 60_000, clock: clock.now })
    const before = process.memoryUsage().heapUsed
    const started = performance.now()
    for (let i = 0; i < 20; i++) assert.equal(log.check(`big-${i}`, 1_000_000).allowed, true)
    const ms = performance.now() - started
    const grewMb = (process.memoryUsage().heapUsed - before) / 1e6
    // logging each unit would hold 20 million numbers (160 MB) and take seconds
    assert.ok(grewMb < 50, `the heap grew ${grewMb.toFixed(1)} MB for 20 requests`)
    assert.ok(ms < 1_000, `20 requests took ${ms.toFixed(0)} ms`)
    assert.equal(log.peek('big-0').count, 1_000_000)
  })

  it('survives a clock that steps back 1 s followed by a cost of 1,000,000', () => {
    const clock = createFakeClock(MINUTE + 5_000)
    const log = new MemorySlidingLog({ limit: 2_000_000, windowMs: 60_000, clock: clock.now })
    log.check('u1')
    clock.set(MINUTE + 4_000)
    const r = log.check('u1', 1_000_000)
    assert.equal(r.allowed, true)
    assert.equal(r.count, 1_000_001)
  })

  it('counts mixed costs and gives the exact wait: enough cost must leave the window', () => {
    const clock = createFakeClock(MINUTE)
    const log = new MemorySlidingLog({ limit: 10, windowMs: 10_000, clock: clock.now })
    log.check('u1', 3) // t0: 3
    clock.advance(1_000)
    log.check('u1', 1) // t0 + 1 s: 4
    clock.advance(1_000)
    log.check('u1', 5) // t0 + 2 s: 9
    assert.equal(log.peek('u1').count, 9)
    const r = log.check('u1', 4)
    assert.equal(r.allowed, false)
    // 3 must leave: the first entry (3) at t0 + 10 s, 8 s from now
    assert.equal(r.retryAfterMs, 8_000)
    const r5 = log.check('u1', 5)
    // 4 must leave: the first two (3 + 1) by t0 + 11 s, 9 s from now
    assert.equal(r5.retryAfterMs, 9_000)
    clock.advance(7_999)
    assert.equal(log.check('u1', 4).allowed, false, 'not a millisecond early')
    clock.advance(1)
    assert.equal(log.check('u1', 4).allowed, true, 'the first entry left at t0 + 10 s')
    assert.equal(log.peek('u1').count, 10)
  })

  it('prunes costly entries and keeps counting after many windows', () => {
    const clock = createFakeClock(MINUTE)
    const log = new MemorySlidingLog({ limit: 100, windowMs: 1_000, clock: clock.now })
    for (let i = 0; i < 5_000; i++) {
      const r = log.check('u1', 1 + (i % 7))
      assert.equal(r.allowed, true, `step ${i}`)
      assert.ok(r.count <= 100)
      clock.advance(250)
    }
    // 4 entries per window of 1 s: the last four requests' costs
    const costs = [4996, 4997, 4998, 4999].map((i) => 1 + (i % 7))
    assert.equal(log.peek('u1').count, costs.reduce((a, b) => a + b, 0) - (costs[0] as number))
  })
})
