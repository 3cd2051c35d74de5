/**
 * A fleet of RateLimiting instances ("processes") hitting the same keys, with the exact truth
 * kept beside them: what the fault tests of every store share.
 */
import assert from 'node:assert/strict'
import type { RateLimiting } from '../core/rate-limiting.js'

export interface Fleet {
  readonly instances: RateLimiting[]
  /** The exact number of hits made per key. */
  readonly truth: Map<string, number>
  /** Every instance hits every key 1 to 3 times; a periodic increment must answer a number at once. */
  hitRound(round: number): void
  /** One sync of every instance, all at once. */
  syncAll(): Promise<PromiseSettledResult<void>[]>
  /** Syncs until every instance succeeds, then twice more so each sees the others' re-pushes. */
  recover(): Promise<void>
  /** Every instance sees the exact total of every key. */
  assertAgreement(label: string): void
}

/** A fleet over `keys` of one namespace and window size; push instances into `instances`. */
export function createFleet(namespace: string, windowSize: number, keys: readonly string[]): Fleet {
  const instances: RateLimiting[] = []
  const truth = new Map<string, number>()
  const syncAll = () => Promise.allSettled(instances.map((rl) => rl.sync(namespace)))
  return {
    instances,
    truth,
    hitRound(round) {
      for (const [i, rl] of instances.entries()) {
        for (const [k, key] of keys.entries()) {
          const n = 1 + ((round + i + k) % 3)
          for (let j = 0; j < n; j++)
            assert.equal(typeof rl.increment(key, windowSize, 1, namespace), 'number', 'a periodic increment never waits on the store')
          truth.set(key, (truth.get(key) ?? 0) + n)
        }
      }
    },
    syncAll,
    async recover() {
      for (let i = 0; i < 10; i++) if ((await syncAll()).every((r) => r.status === 'fulfilled')) break
      await syncAll()
      await syncAll()
    },
    assertAgreement(label) {
      for (const [i, rl] of instances.entries()) {
        for (const key of keys)
          assert.equal(
            rl.slidingWindow(key, windowSize, undefined, namespace),
            truth.get(key),
            `${label}: instance ${i} sees the exact total of ${key}`,
          )
      }
    },
  }
}
