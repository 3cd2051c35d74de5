/**
 * sliding-window-counter-algo through the service on every central store: Redis (shared, unique
 * prefix), PostgreSQL (shared `test` database, unique policy names, rows deleted after) and a
 * memcached of our own on a free port. Periodic and synchronous sync, reads, resets, readiness.
 */
import { readWindow } from '../../src/testing/read-window.js'
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import pg from 'pg'
import {
  call,
  check,
  deleteKeys,
  freePort,
  SHARED_REDIS_URL,
  startTestService,
  type TestService,
  uniquePrefix,
  until,
} from './server-helpers.js'

const POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test'

function counterConfig(store: string, prefix: string, periodic: string, synchronous: string): string {
  return `
rate-limiter: { use-algo: sliding-window-counter-algo, max-requests: 4, window-size: 60, sync-rate: 0.05, key-prefix: "${prefix}" }
policies:
  ${periodic}: { max-requests: 3 }
  ${synchronous}: { max-requests: 3, sync-rate: 0 }
store: ${store}
`
}

/** The same checks on each store: both sync modes decide, share state through the store, reset. */
function behavesLikeAStore(
  name: string,
  open: () => Promise<{
    t: TestService
    periodic: string
    synchronous: string
  }>,
) {
  describe(`counter algorithm on ${name}`, () => {
    let t: TestService
    let periodic: string
    let synchronous: string
    before(async () => {
      ;({ t, periodic, synchronous } = await open())
    })
    after(() => t?.close())

    it('decides in periodic mode', async () => {
      const statuses: number[] = []
      for (let i = 0; i < 4; i++) statuses.push((await check(t.url, { userId: 'p1', policy: periodic })).status)
      assert.deepEqual(statuses, [200, 200, 200, 429])
    })

    it('decides in synchronous mode, every hit written through', async () => {
      const statuses: number[] = []
      for (let i = 0; i < 4; i++) statuses.push((await check(t.url, { userId: 's1', policy: synchronous })).status)
      assert.deepEqual(statuses, [200, 200, 200, 429])
      const strategy = await t.service.runtime().store.strategy()
      const windowStart = Math.floor(Date.now() / 60_000) * 60_000
      const row = await readWindow(strategy, { namespace: synchronous, key: 's1', windowStartMs: windowStart, windowSizeMs: 60_000 })
      assert.ok(row.count >= 3, `the store holds the hits (${row.count})`)
    })

    it('syncs periodic counts to the store', async () => {
      await check(t.url, { userId: 'p2', policy: periodic })
      await check(t.url, { userId: 'p2', policy: periodic })
      const strategy = await t.service.runtime().store.strategy()
      const windowStart = Math.floor(Date.now() / 60_000) * 60_000
      const read = () => readWindow(strategy, { namespace: periodic, key: 'p2', windowStartMs: windowStart, windowSizeMs: 60_000 })
      await until(async () => (await read()).count === 2, 3000, 'the periodic sync')
    })

    it('reads and resets a user across the store', async () => {
      assert.equal((await call(`${t.url}/v1/users/s1?policy=${synchronous}`)).body?.remaining, 0)
      assert.equal(
        (
          await call(`${t.url}/v1/users/s1?policy=${synchronous}`, {
            method: 'DELETE',
          })
        ).status,
        204,
      )
      assert.equal((await call(`${t.url}/v1/users/s1?policy=${synchronous}`)).body?.remaining, 3)
      assert.equal((await check(t.url, { userId: 's1', policy: synchronous })).status, 200)
    })

    it(`is ready while ${name} answers`, async () => {
      const ready = await call(`${t.url}/readyz`)
      assert.equal(ready.status, 200, JSON.stringify(ready.body))
    })
  })
}

describe('counter algorithm on the central stores', { timeout: 60_000 }, () => {
  const prefix = uniquePrefix()
  const suffix = randomUUID().slice(0, 8)
  // a schema of this run's own: the shared database's public table may be another branch's layout
  const schema = `rl_service_${suffix.replace(/-/g, '_')}`
  let redis: Redis
  let memcached: ChildProcess | undefined
  let memcachedPort = 0
  let pool: pg.Pool
  before(async () => {
    redis = new Redis(SHARED_REDIS_URL)
    pool = new pg.Pool({ connectionString: POSTGRES_URL, max: 1 })
    memcachedPort = await freePort()
    memcached = spawn('memcached', ['-p', String(memcachedPort), '-l', '127.0.0.1', '-U', '0', '-u', 'root', '-m', '16'], {
      stdio: 'ignore',
    })
    await until(
      async () => {
        try {
          const { connect } = await import('node:net')
          return await new Promise<boolean>((resolve) => {
            const s = connect(memcachedPort, '127.0.0.1', () => {
              s.destroy()
              resolve(true)
            })
            s.on('error', () => resolve(false))
          })
        } catch {
          return false
        }
      },
      5000,
      'memcached to start (apt-get install -y memcached if it is missing)',
    )
  })
  after(async () => {
    await deleteKeys(redis, prefix)
    redis.disconnect()
    await pool.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined)
    await pool.end()
    memcached?.kill('SIGKILL')
  })

  behavesLikeAStore('Redis', async () => {
    const periodic = `periodic-${suffix}`
    const synchronous = `sync-${suffix}`
    const t = await startTestService(counterConfig(`{ type: redis, url: "${SHARED_REDIS_URL}" }`, prefix, periodic, synchronous))
    return { t, periodic, synchronous }
  })

  behavesLikeAStore('PostgreSQL', async () => {
    const periodic = `periodic-${suffix}`
    const synchronous = `sync-${suffix}`
    const t = await startTestService(
      counterConfig(`{ type: postgres, url: "${POSTGRES_URL}", schema: ${schema} }`, prefix, periodic, synchronous),
    )
    return { t, periodic, synchronous }
  })

  behavesLikeAStore('memcached', async () => {
    const periodic = `periodic-${suffix}`
    const synchronous = `sync-${suffix}`
    const t = await startTestService(
      counterConfig(`{ type: memcached, servers: ["127.0.0.1:${memcachedPort}"] }`, prefix, periodic, synchronous),
    )
    return { t, periodic, synchronous }
  })
})
