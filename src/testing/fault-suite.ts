/**
 * The sync invariants (docs/ARCHITECTURE.md, "How the sync invariants are kept") on a real store
 * under real faults: one suite every store runs. A private server on a free loopback port sits
 * behind a TCP proxy that swallows replies after the writes landed and cuts connections mid-sync,
 * and the server is killed and restarted. Three RateLimiting instances (three "processes", each
 * with its own strategy) hit the same keys; after recovery they agree on the exact totals, and so
 * does the store.
 *
 *   runFaultSuite({ name: 'redis', losesData: true, start: ..., strategy: (port) => ... })
 *
 * The store is read through the engine's own contract (a refresh-only push from an observer
 * node), so the suite needs nothing of a store beyond what the engine calls.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createFakeClock } from '../core/clock.js'
import { RateLimiting } from '../core/rate-limiting.js'
import type { Strategy } from '../core/strategy.js'
import { windowStartMs } from '../core/window.js'
import { createFleet } from './fleet.js'
import { startTcpProxy, type TcpProxy } from './tcp-proxy.js'

/** A server of the test's own that the suite may kill. */
export interface FaultServer {
  readonly port: number
  /** Stops it at once, as a crash would. */
  kill(): Promise<void>
  /** Starts it again on the same port. */
  start(): Promise<void>
  /** Stops it for good and removes its files. */
  stop(): Promise<void>
}

export interface FaultSuiteOptions {
  /** Shown in test names. */
  readonly name: string
  /** Starts a private server on a free loopback port. */
  start(): Promise<FaultServer>
  /** A strategy connected to 127.0.0.1:`port`, with timeouts well under 400 ms. */
  strategy(port: number): Strategy | Promise<Strategy>
  /** Run once with a strategy connected straight to the server, e.g. to create a table. */
  prepare?(strategy: Strategy): Promise<void>
  /** Whether a killed server comes back empty (Redis without persistence, memcached). */
  readonly losesData: boolean
}

const NS = 'api'
const SIZE = 60
const SIZE_MS = SIZE * 1000
const KEYS = ['a', 'b', 'c', 'd']

/** Registers the fault tests for one store. */
export function runFaultSuite(options: FaultSuiteOptions): void {
  describe(`${options.name}: the sync invariants under real faults`, () => {
    let server: FaultServer
    let proxy: TcpProxy
    let observer: Strategy
    let observed = 0
    const clock = createFakeClock(windowStartMs(Date.now(), SIZE_MS) + 5_000)
    const strategies: Strategy[] = []
    const { instances, truth, hitRound, syncAll, assertAgreement, recover } = createFleet(NS, SIZE, KEYS)

    before(async () => {
      server = await options.start()
      proxy = await startTcpProxy(server.port)
      observer = await options.strategy(server.port)
      await options.prepare?.(observer)
      for (let i = 0; i < 3; i++) {
        const strategy = await options.strategy(proxy.port)
        const rl = RateLimiting.newInstance(`${options.name}-fault-${i}`)
        rl.new({
          namespace: NS,
          windowSizes: [SIZE],
          syncRate: 1,
          autoSync: false,
          storeTimeoutMs: 400,
          clock: clock.now,
          strategy,
          onError: () => undefined,
        })
        instances.push(rl)
        strategies.push(strategy)
      }
    })

    after(async () => {
      for (const rl of instances) await rl.close().catch(() => undefined)
      for (const s of strategies) await s.close().catch(() => undefined)
      await observer?.close().catch(() => undefined)
      await proxy?.close()
      await server?.stop()
    })

    // The observer's own connection may have died with a killed server: a few tries.
    async function retry<T>(call: () => Promise<T>): Promise<T> {
      let lastError: unknown
      for (let attempt = 0; attempt < 20; attempt++) {
        try {
          return await call()
        } catch (err) {
          lastError = err
          await new Promise((resolve) => setTimeout(resolve, 50))
        }
      }
      throw lastError
    }

    // What the store holds for each key (current window), read as a node that never writes.
    async function storeTotals(): Promise<Map<string, number>> {
      const nowMs = clock.now()
      const windowStart = windowStartMs(nowMs, SIZE_MS)
      const refresh = KEYS.map((key) => ({ key, windowStartMs: windowStart, windowSizeMs: SIZE_MS }))
      const rows = await retry(() =>
        observer.pushDiffs({ namespace: NS, nodeId: 'observer', seq: ++observed, nowMs, windows: [], refresh }),
      )
      return new Map(rows.map((r) => [r.key, r.count]))
    }

    it('converges with a healthy store', async () => {
      hitRound(0)
      assert.ok((await syncAll()).every((r) => r.status === 'fulfilled'))
      await syncAll()
      assertAgreement('healthy')
      assert.deepEqual(await storeTotals(), truth)
    })

    it('does not count twice a push whose reply was swallowed after the write landed', async () => {
      const before = await storeTotals()
      hitRound(1)
      proxy.mode = 'swallow-replies'
      const lost = await instances[0]?.sync(NS).then(
        () => undefined,
        (err: unknown) => err,
      )
      assert.ok(lost instanceof Error, 'the sync fails: no reply came back')
      proxy.mode = 'pass'
      // the write did land: instance 0's new hits are in the store already
      const landed = await storeTotals()
      assert.ok(
        KEYS.some((k) => (landed.get(k) ?? 0) > (before.get(k) ?? 0)),
        'the swallowed push was applied',
      )
      // every client starts afresh; the retry carries the same cumulative counts
      proxy.cutConnections()
      await recover()
      assertAgreement('after a swallowed reply')
      assert.deepEqual(await storeTotals(), truth)
    })

    it('loses no hit when connections are cut mid-sync', async () => {
      // the pushes are written before the cut; a client fails the sync, or reconnects and
      // sends again (ioredis does), so a push may land twice: neither may change a total
      let cut = 0
      for (let round = 2; round < 6; round++) {
        hitRound(round)
        const syncing = syncAll()
        setImmediate(() => {
          cut += proxy.cutConnections()
        })
        await syncing
      }
      assert.ok(cut > 0, 'connections were cut while syncs were in flight')
      await recover()
      assertAgreement('after cut connections')
      assert.deepEqual(await storeTotals(), truth)
    })

    it('keeps limiting locally while the server is down, and agrees on exact totals after a restart', async () => {
      hitRound(6)
      await syncAll()
      // a probe no instance writes: whether the restart lost the data (the instances' clients may
      // write again as soon as the server is back, ioredis from its offline queue)
      const probe = {
        namespace: `${NS}-probe`,
        nodeId: 'observer',
        windows: [{ key: 'p', windowStartMs: windowStartMs(clock.now(), SIZE_MS), windowSizeMs: SIZE_MS, count: 1, diff: 1 }],
        refresh: [],
      }
      await observer.pushDiffs({ ...probe, seq: ++observed, nowMs: clock.now() })
      await server.kill()
      hitRound(7)
      const failed = await syncAll()
      assert.ok(
        failed.every((r) => r.status === 'rejected'),
        'syncs fail while the server is down',
      )
      hitRound(8)
      // each process keeps its own hits while the store is away
      for (const key of KEYS) assert.ok((instances[0]?.slidingWindow(key, SIZE, undefined, NS) as number) > 0)
      await server.start()
      if (options.losesData) {
        await options.prepare?.(observer)
        const [probed] = await retry(() =>
          observer.pushDiffs({ ...probe, windows: [], refresh: probe.windows, seq: ++observed, nowMs: clock.now() }),
        )
        assert.equal(probed?.count, 0, 'the restart lost the data')
      }
      // (a store that keeps its data may still lose its last writes in a crash: PostgreSQL with
      // synchronous_commit off, as the test server runs; recovery handles both)
      hitRound(9)
      // a store that lost its data: the first sync finds it out, the next ones write it back
      await recover()
      assertAgreement('after a restart')
      assert.deepEqual(await storeTotals(), truth)
    })

    it('warms a new process up with every key after recovery', async () => {
      const fresh = RateLimiting.newInstance(`${options.name}-fault-fresh`)
      fresh.new({ namespace: NS, windowSizes: [SIZE], syncRate: 1, autoSync: false, clock: clock.now, strategy: observer })
      await fresh.fetch(NS)
      for (const key of KEYS) assert.equal(fresh.slidingWindow(key, SIZE, undefined, NS), truth.get(key), key)
      await fresh.close()
    })
  })
}
