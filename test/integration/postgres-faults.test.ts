/**
 * The sync invariants (DESIGN.md §3) on PostgreSQL under real faults: a private server on a free
 * port behind a TCP proxy, that swallows replies after the write landed, cuts connections mid-run,
 * and is killed and restarted. Three RateLimiting instances (three "processes", each with its own
 * strategy and pool) hit the same keys; after recovery and final syncs they agree on exact totals.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import pg from 'pg'
import { createFakeClock } from '../../src/core/clock.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { windowStartSec } from '../../src/core/window.js'
import { PostgresStrategy } from '../../src/strategies/postgres/index.js'
import { type PrivatePostgres, startPrivatePostgres } from '../support/postgres-server.js'
import { createFleet } from '../support/fleet.js'
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js'

const NS = 'api'
const SIZE = 60
const KEYS = ['a', 'b', 'c', 'd']

describe('postgres strategy under real faults', () => {
  let server: PrivatePostgres
  let proxy: TcpProxy
  let direct: pg.Pool
  const clock = createFakeClock(windowStartSec(Date.now(), SIZE) * 1000 + 5_000)
  const strategies: PostgresStrategy[] = []
  const { instances, truth, hitRound, syncAll, assertAgreement } = createFleet(NS, SIZE, KEYS)

  before(async () => {
    server = await startPrivatePostgres()
    proxy = await startTcpProxy(server.port)
    direct = new pg.Pool({ connectionString: server.url, max: 2 })
    direct.on('error', () => undefined) // idle clients die when the server is killed
    for (let i = 0; i < 3; i++) {
      const strategy = new PostgresStrategy({
        connectionString: `postgres://postgres@127.0.0.1:${proxy.port}/postgres`,
        queryTimeoutMs: 300,
        poolSize: 2,
        purgeIntervalMs: 0,
      })
      if (i === 0) await strategy.migrate()
      const rl = RateLimiting.newInstance(`pg-fault-${i}`)
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
    await direct?.end().catch(() => undefined)
    await proxy?.close()
    await server?.destroy()
  })

  async function storeTotals(): Promise<Map<string, number>> {
    const { rows } = await direct.query(
      'SELECT key, sum(count)::text AS total FROM ratelimiting_counters WHERE namespace = $1 GROUP BY key',
      [NS],
    )
    return new Map(rows.map((r: { key: string; total: string }) => [r.key, Number(r.total)]))
  }

  it('converges with a healthy store', async () => {
    hitRound(0)
    assert.ok((await syncAll()).every((r) => r.status === 'fulfilled'))
    await syncAll()
    assertAgreement('healthy')
    assert.deepEqual(await storeTotals(), truth)
  })

  it('does not count twice a push whose reply was swallowed after the write landed', async () => {
    hitRound(1)
    proxy.mode = 'swallow-replies'
    const lost = await instances[0]?.sync(NS).then(
      () => undefined,
      (err: unknown) => err,
    )
    assert.ok(lost instanceof Error, 'the sync fails: no reply came back')
    proxy.mode = 'pass'
    // the write did land: instance 0's new hits are in the table already
    const landed = await storeTotals()
    assert.ok([...landed.values()].reduce((a, b) => a + b, 0) > 0)
    // the retry carries the same cumulative counts: nothing is added twice
    await syncAll()
    await syncAll()
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
    await syncAll()
    await syncAll()
    assertAgreement('after cut connections')
    assert.deepEqual(await storeTotals(), truth)
  })

  it('keeps limiting locally while the server is down, and agrees on exact totals after a restart', async () => {
    hitRound(6)
    await server.kill()
    hitRound(7)
    const failed = await syncAll()
    assert.ok(
      failed.every((r) => r.status === 'rejected'),
      'syncs fail while the server is down',
    )
    hitRound(8)
    // local views keep this process's own hits while the store is away
    for (const key of KEYS) assert.ok((instances[0]?.slidingWindow(key, SIZE, undefined, NS) as number) > 0)
    await server.start()
    hitRound(9)
    // recovery: the first syncs may still meet dead pooled connections; keep syncing until all pass
    for (let i = 0; i < 10; i++) {
      const results = await syncAll()
      if (results.every((r) => r.status === 'fulfilled')) break
    }
    await syncAll()
    assertAgreement('after a restart')
    assert.deepEqual(await storeTotals(), truth)
  })
})
