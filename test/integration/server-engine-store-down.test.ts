/**
 * The service's counter algorithm when its store dies: a private memcached or PostgreSQL (never
 * the shared ones) is killed under the service and started again. Synchronous policies answer as
 * `on-store-error` says within the store timeout; periodic ones keep deciding on local counts;
 * all recover when the store is back.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import pg from 'pg'
import { startPrivateMemcached } from '../support/memcached-server.js'
import { startPrivatePostgres } from '../support/postgres-server.js'
import { check, startTestService, type TestService, until } from './server-helpers.js'

interface KillableStore {
  kill(): Promise<void>
  start(): Promise<void>
  /** Stops it for good and removes what it left. */
  dispose(): Promise<void>
}

function config(store: string, onStoreError: string): string {
  return `
rate-limiter: { use-algo: sliding-window-counter-algo, sync-rate: 0, max-requests: 100, window-size: 60, on-store-error: ${onStoreError} }
policies:
  periodic: { use-algo: sliding-window-counter-algo, sync-rate: 0.05 }
store: ${store}
`
}

function storeDownSuite(name: string, start: () => Promise<{ store: KillableStore; yaml: string }>): void {
  describe(`service with ${name} down`, { timeout: 60_000 }, () => {
    let store: KillableStore
    let failing: TestService
    let closed: TestService
    before(async () => {
      const started = await start()
      store = started.store
      failing = await startTestService(config(started.yaml, 'error'))
      closed = await startTestService(config(started.yaml, 'deny'))
    })
    after(async () => {
      await Promise.allSettled([failing?.close(), closed?.close()])
      await store?.dispose()
    })

    it(`decides while ${name} is up`, async () => {
      for (const policy of ['default', 'periodic']) assert.equal((await check(failing.url, { userId: 'up', policy })).status, 200, policy)
    })

    it(`answers 503 (or denies) within the timeout when ${name} is killed, and keeps periodic policies deciding`, async () => {
      await store.kill()
      const startedAt = Date.now()
      const down = await check(failing.url, { userId: 'down' })
      const ms = Date.now() - startedAt
      assert.equal(down.status, 503, JSON.stringify(down.body))
      assert.equal(down.body?.error, 'store_unavailable')
      assert.ok(ms < 1_500, `answered in ${ms} ms`)
      const denied = await check(closed.url, { userId: 'down' })
      assert.equal(denied.status, 429)
      assert.equal(denied.body?.allowed, false)
      assert.equal((await check(failing.url, { userId: 'down', policy: 'periodic' })).status, 200, 'periodic mode decides locally')
    })

    it(`recovers when ${name} is back`, async () => {
      await store.start()
      await until(async () => (await check(failing.url, { userId: 'back' })).status === 200, 10_000, `a 200 after ${name} restarted`)
      assert.equal((await fetch(`${failing.url}/readyz`)).status, 200)
    })
  })
}

storeDownSuite('memcached', async () => {
  const memcached = await startPrivateMemcached()
  return {
    store: { kill: () => memcached.kill(), start: () => memcached.start(), dispose: () => memcached.kill() },
    yaml: `{ type: memcached, servers: ["${memcached.server}"], timeout-ms: 300 }`,
  }
})

storeDownSuite('PostgreSQL', async () => {
  const postgres = await startPrivatePostgres()
  // The private server runs with synchronous_commit off for speed: a checkpoint first makes the
  // crash keep what was committed (the counters table the service migrated), as a real one would.
  const checkpoint = async () => {
    const client = new pg.Client({ connectionString: postgres.url })
    await client.connect()
    await client.query('CHECKPOINT')
    await client.end()
  }
  return {
    store: {
      kill: async () => {
        await checkpoint()
        await postgres.kill()
      },
      start: () => postgres.start(),
      dispose: () => postgres.destroy(),
    },
    yaml: `{ type: postgres, url: "${postgres.url}", timeout-ms: 300 }`,
  }
})
