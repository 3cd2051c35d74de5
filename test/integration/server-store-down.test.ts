/**
 * The store fails: a redis-server of our own (never the shared one) is killed, frozen with
 * SIGSTOP and restarted under the service. Requests are answered as `on-store-error` says,
 * within the store timeout, and the service recovers when Redis is back.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { call, check, type OwnRedis, startOwnRedis, startTestService, type TestService, until } from './server-helpers.js'

function config(url: string, onStoreError: string): string {
  return `
rate-limiter: { use-algo: sliding-window-algo, max-requests: 100, window-size: 60, on-store-error: ${onStoreError} }
policies:
  fixed: { use-algo: fixed-window-algo }
  counter: { use-algo: sliding-window-counter-algo, sync-rate: 0.05 }
  counter-sync: { use-algo: sliding-window-counter-algo, sync-rate: 0 }
store: { type: redis, url: "${url}", timeout-ms: 300 }
`
}

async function timed<T>(work: () => Promise<T>): Promise<{ value: T; ms: number }> {
  const started = Date.now()
  const value = await work()
  return { value, ms: Date.now() - started }
}

describe('service with its store down', { timeout: 60_000 }, () => {
  let redis: OwnRedis
  let failing: TestService
  let open: TestService
  let closed: TestService
  before(async () => {
    redis = await startOwnRedis()
    failing = await startTestService(config(redis.url, 'error'))
    open = await startTestService(config(redis.url, 'allow'))
    closed = await startTestService(config(redis.url, 'deny'))
  })
  after(async () => {
    redis.thaw()
    await Promise.allSettled([failing?.close(), open?.close(), closed?.close()])
    await redis.kill()
  })

  it('decides normally while Redis is up', async () => {
    for (const policy of ['default', 'fixed', 'counter', 'counter-sync']) {
      assert.equal((await check(failing.url, { userId: 'up', policy })).status, 200, policy)
    }
  })

  it('runs scripts again after Redis forgot them (NOSCRIPT)', async () => {
    const admin = new Redis(redis.url)
    await admin.script('FLUSH')
    admin.disconnect()
    assert.equal((await check(failing.url, { userId: 'noscript' })).status, 200)
    assert.equal((await check(failing.url, { userId: 'noscript', policy: 'fixed' })).status, 200)
  })

  describe('when Redis is killed', () => {
    before(() => redis.kill())

    it('answers 503 at once with on-store-error: error', async () => {
      for (const policy of ['default', 'fixed', 'counter-sync']) {
        const { value: a, ms } = await timed(() => check(failing.url, { userId: 'down', policy }))
        assert.equal(a.status, 503, `${policy}: ${JSON.stringify(a.body)}`)
        assert.equal(a.body?.error, 'store_unavailable')
        assert.equal(a.headers.get('retry-after'), '1')
        assert.ok(ms < 1_000, `${policy} answered in ${ms} ms`)
      }
    })

    it('keeps deciding on local counts with the periodic counter algorithm', async () => {
      assert.equal((await check(failing.url, { userId: 'down', policy: 'counter' })).status, 200)
    })

    it('admits with on-store-error: allow and denies with deny, marked degraded', async () => {
      const a = await check(open.url, { userId: 'down' })
      assert.equal(a.status, 200)
      assert.equal(a.body?.degraded, true)
      assert.equal(a.body?.allowed, true)
      const d = await check(closed.url, { userId: 'down', policy: 'fixed' })
      assert.equal(d.status, 429)
      assert.equal(d.body?.degraded, true)
      assert.equal(d.headers.get('retry-after'), '1')
    })

    it('answers reads and resets with 503', async () => {
      assert.equal((await call(`${failing.url}/v1/users/down`)).status, 503)
      assert.equal((await call(`${failing.url}/v1/users/down`, { method: 'DELETE' })).status, 503)
    })

    it('reports not ready, and counts the store errors in /metrics', async () => {
      const ready = await call(`${failing.url}/readyz`)
      assert.equal(ready.status, 503)
      assert.equal(ready.body?.status, 'unavailable')
      const text = await (await fetch(`${failing.url}/metrics`)).text()
      assert.match(text, /ratelimiting_store_errors_total\{store="redis",operation="decide"\} [1-9]/)
      assert.match(text, /ratelimiting_decisions_total\{policy="default",algorithm="sliding-window-algo",outcome="store_error"\} [1-9]/)
      assert.match(
        (await (await fetch(`${open.url}/metrics`)).text()) as string,
        /ratelimiting_decisions_total\{policy="default",algorithm="sliding-window-algo",outcome="failed_open"\} 1/,
      )
    })

    it('starts anyway when Redis is down, not ready until it is back', async () => {
      const late = await startTestService(config(redis.url, 'error'))
      try {
        assert.equal((await call(`${late.url}/readyz`)).status, 503)
        // the errors of the start are the store's too
        const metrics = await (await fetch(`${late.url}/metrics`)).text()
        assert.match(metrics, /ratelimiting_store_errors_total\{store="redis",operation="connection"\} [1-9]/)
        assert.doesNotMatch(metrics, /store="unknown"/)
        await redis.start()
        await until(async () => (await call(`${late.url}/readyz`)).status === 200, 5_000, 'readiness after Redis restarted')
        assert.equal((await check(late.url, { userId: 'late' })).status, 200)
      } finally {
        await late.close()
      }
    })

    it('recovers once Redis is back', async () => {
      await until(async () => (await check(failing.url, { userId: 'back' })).status === 200, 5_000, 'decisions after Redis restarted')
      assert.equal((await call(`${failing.url}/readyz`)).status, 200)
    })
  })

  describe('when Redis hangs (SIGSTOP)', () => {
    before(() => redis.freeze())
    after(() => redis.thaw())

    it('answers within the store timeout instead of hanging', async () => {
      for (const policy of ['default', 'fixed']) {
        const { value: a, ms } = await timed(() => check(failing.url, { userId: 'hang', policy }))
        assert.equal(a.status, 503, policy)
        assert.ok(ms < 1_000, `${policy} answered in ${ms} ms with a 300 ms store timeout`)
      }
      const { value: ready, ms } = await timed(() => call(`${failing.url}/readyz`))
      assert.equal(ready.status, 503)
      assert.ok(ms < 1_000, `readyz answered in ${ms} ms`)
    })

    it('decides again once Redis resumes', async () => {
      redis.thaw()
      await until(async () => (await check(failing.url, { userId: 'thawed' })).status === 200, 5_000, 'decisions after SIGCONT')
    })
  })
})
