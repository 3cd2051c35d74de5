/**
 * Bounded memory of the memory algorithms: at most `maxKeys` users, the one stored longest ago
 * forgotten first, and an eviction that costs O(1) however many came before (a flood of new ids
 * must not slow the service down as it goes).
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { MemoryFixedWindow, MemorySlidingLog } from '../../src/algorithms/index.js'
import { createFakeClock } from '../../src/core/clock.js'

const MINUTE = 1_699_999_980_000

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[sorted.length >> 1] as number
}

const makers = {
  'sliding log': (maxKeys: number, clock: () => number) => new MemorySlidingLog({ limit: 10, windowMs: 3_600_000, maxKeys, clock }),
  'fixed window': (maxKeys: number, clock: () => number) => new MemoryFixedWindow({ limit: 10, windowMs: 3_600_000, maxKeys, clock }),
}

describe('eviction in the memory algorithms', () => {
  for (const [name, make] of Object.entries(makers)) {
    it(`${name}: forgets the user stored longest ago, one per new user`, () => {
      const clock = createFakeClock(MINUTE)
      const a = make(3, clock.now)
      for (const id of ['a', 'b', 'c']) a.check(id)
      a.check('b')
      a.check('d') // evicts a
      assert.equal(a.peek('a').count, 0)
      assert.deepEqual(
        ['b', 'c', 'd'].map((id) => a.peek(id).count),
        [2, 1, 1],
      )
      a.reset('c')
      a.check('e') // room left by the reset: nobody evicted
      assert.deepEqual(
        ['b', 'd', 'e'].map((id) => a.peek(id).count),
        [2, 1, 1],
      )
      a.check('f') // evicts b, the oldest left
      assert.deepEqual(
        ['b', 'd', 'e', 'f'].map((id) => a.peek(id).count),
        [0, 1, 1, 1],
      )
    })

    it(`${name}: an eviction costs the same after 150,000 evictions as storing a user without one`, () => {
      // Timing, but as a ratio within one run with a wide margin: with a Map's first key found by
      // walking past deleted entries, the evicting phases were 30 to 300 times slower.
      const clock = createFakeClock(MINUTE)
      const maxKeys = 50_000
      const a = make(maxKeys, clock.now)
      let n = 0
      const phase = () => {
        const started = performance.now()
        for (let i = 0; i < 10_000; i++) a.check(`user-${n++}`)
        return performance.now() - started
      }
      phase()
      phase()
      const filling = [phase(), phase()] // 20,000 to 40,000 users: no eviction yet
      phase() // full at 50,000
      const evicting: number[] = []
      for (let i = 0; i < 15; i++) evicting.push(phase())
      const base = Math.min(...filling)
      assert.ok(
        median(evicting) < 5 * base + 50,
        `10,000 new users: ${base.toFixed(1)} ms while filling, median ${median(evicting).toFixed(1)} ms while evicting (${evicting.map((v) => v.toFixed(0)).join(' ')})`,
      )
    })
  }
})
