/**
 * The case every adapter test runs: two app instances (two engines, as two processes would have)
 * share one store, on memory and on the shared Redis, and together admit exactly one limit.
 */
import assert from 'node:assert/strict'
import { it } from 'node:test'
import { type Clock, createFakeClock, MemoryStrategy, type Strategy } from '../../src/index.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'

/** What an adapter test builds for the shared-store case. */
export interface SharedApps {
  /** Sends one request for the key "shared" to app `index` (0 or 1); resolves with its status. */
  send(index: number): Promise<number>
  /** Closes the apps and whatever the adapter opened (not the strategy). */
  close(): Promise<void>
}

/** How an adapter builds two apps over one strategy and namespace, each admitting `limit` per minute. */
export type StartSharedApps = (setup: { strategy: Strategy; namespace: string; clock: Clock; limit: number }) => Promise<SharedApps>

const STORES: Array<[string, () => Strategy]> = [
  ['memory', () => new MemoryStrategy()],
  ['redis', () => new RedisStrategy({ url: 'redis://127.0.0.1:6379', prefix: 'adapters-test' })],
]

/** Defines the case for each store, inside the caller's describe(). */
export function sharedStoreCases(framework: string, start: StartSharedApps): void {
  for (const [name, makeStrategy] of STORES) {
    it(`keeps two app instances sharing one ${name} store within one limit`, async () => {
      const strategy = makeStrategy()
      // near the real time: stores that expire keys by the clock see sane times
      const clock = createFakeClock(Math.ceil(Date.now() / 60_000) * 60_000 + 5_000)
      const namespace = `${framework}-shared-${process.pid}-${Date.now()}`
      const apps = await start({ strategy, namespace, clock: clock.now, limit: 7 })
      try {
        const codes = await Promise.all(Array.from({ length: 20 }, (_, i) => apps.send(i % 2)))
        assert.equal(codes.filter((s) => s === 200).length, 7, `exactly the limit passes: ${codes.join(' ')}`)
        assert.equal(codes.filter((s) => s === 429).length, 13)
      } finally {
        await apps.close()
        await strategy.close()
      }
    })
  }
}
