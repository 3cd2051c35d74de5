/**
 * The sync invariants (DESIGN.md §3) on memcached under real faults: a private server on a free
 * port behind a TCP proxy, that swallows replies after the writes landed, cuts connections
 * mid-run, and is killed (losing every item) and restarted. Three RateLimiting instances (three
 * "processes", each with its own strategy and connection) hit the same keys; after recovery and
 * final syncs they agree on exact totals, which the engine's re-push of cumulative counts restores.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { createFakeClock } from '../../src/core/clock.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { windowStartSec } from '../../src/core/window.js'
import { MemcachedStrategy } from '../../src/strategies/memcached/index.js'
import { type PrivateMemcached, startPrivateMemcached } from '../support/memcached-server.js'
import { createFleet } from '../support/fleet.js'
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js'

const NS = 'api'
const SIZE = 60
const KEYS = ['a', 'b', 'c', 'd']

describe('memcached strategy under real faults', () => {
  let server: PrivateMemcached
  let proxy: TcpProxy
  let direct: MemcachedStrategy
  const clock = createFakeClock(windowStartSec(Date.now(), SIZE) * 1000 + 5_000)
  const strategies: MemcachedStrategy[] = []
  const { instances, truth, hitRound, syncAll, assertAgreement, recover } = createFleet(NS, SIZE, KEYS)

  before(async () => {
    server = await startPrivateMemcached()
    proxy = await startTcpProxy(server.port)
    direct = new MemcachedStrategy({
      servers: [server.server],
      timeoutMs: 300,
    })
    for (let i = 0; i < 3; i++) {
      const strategy = new MemcachedStrategy({
        servers: [`127.0.0.1:${proxy.port}`],
        timeoutMs: 300,
      })
      const rl = RateLimiting.newInstance(`mc-fault-${i}`)
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
    for (const s of strategies) await s.close()
    await direct?.close()
    await proxy?.close()
    await server?.kill()
  })

  async function storeTotals(): Promise<Map<string, number>> {
    const start = windowStartSec(clock.now(), SIZE)
    const out = new Map<string, number>()
    for (const key of KEYS) out.set(key, (await direct.getWindow(key, NS, start, SIZE)).count)
    return out
  }

  it('converges with a healthy store', async () => {
    hitRound(0)
    assert.ok((await syncAll()).every((r) => r.status === 'fulfilled'))
    await syncAll()
    assertAgreement('healthy')
    assert.deepEqual(await storeTotals(), truth)
  })

  it('does not count twice a push whose reply was swallowed after the writes landed', async () => {
    hitRound(1)
    proxy.mode = 'swallow-replies'
    const lost = await instances[0]?.sync(NS).then(
      () => undefined,
      (err: unknown) => err,
    )
    assert.ok(lost instanceof Error, 'the sync fails: no reply came back')
    proxy.mode = 'pass'
    await recover()
    assertAgreement('after a swallowed reply')
    assert.deepEqual(await storeTotals(), truth)
  })

  it('loses no hit when connections are cut mid-sync', async () => {
    let failures = 0
    for (let round = 2; round < 6; round++) {
      hitRound(round)
      const syncing = syncAll()
      setImmediate(() => proxy.cutConnections())
      failures += (await syncing).filter((r) => r.status === 'rejected').length
    }
    assert.ok(failures > 0, 'some syncs were cut')
    await recover()
    assertAgreement('after cut connections')
    assert.deepEqual(await storeTotals(), truth)
  })

  it('keeps limiting locally while memcached is down, and restores exact totals after a restart that lost everything', async () => {
    hitRound(6)
    await syncAll()
    await server.kill()
    hitRound(7)
    const failed = await syncAll()
    assert.ok(
      failed.every((r) => r.status === 'rejected'),
      'syncs fail while the server is down',
    )
    hitRound(8)
    await server.start()
    assert.deepEqual(await storeTotals(), new Map(KEYS.map((k) => [k, 0])), 'the restarted server holds nothing')
    hitRound(9)
    await recover()
    assertAgreement('after a restart')
    assert.deepEqual(await storeTotals(), truth)
    // the index came back with the re-pushes: a new process warms up with every key
    const fresh = RateLimiting.newInstance('mc-fault-fresh')
    fresh.new({
      namespace: NS,
      windowSizes: [SIZE],
      syncRate: 1,
      autoSync: false,
      clock: clock.now,
      strategy: direct,
    })
    await fresh.fetch(NS)
    for (const key of KEYS) assert.equal(fresh.slidingWindow(key, SIZE, undefined, NS), truth.get(key))
    await fresh.close()
  })
})
