import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { describe, it } from 'node:test'
import { promisify } from 'node:util'
import { createExpressApp } from '../../examples/express-rate-limit-store.js'
import { buildFastifyApp } from '../../examples/fastify-store.js'
import { createHonoApp } from '../../examples/hono-middleware.js'
import { createRefundsApp } from '../../examples/refunds.js'
import { createFakeClock, MemoryStrategy } from '../../src/index.js'
import { SHARED_MYSQL_URL } from '../support/mariadb-server.js'

const run = promisify(execFile)

describe('examples', () => {
  it('express-rate-limit-store: two app instances share one store and one limit over real HTTP', async () => {
    const strategy = new MemoryStrategy()
    const servers = [createExpressApp({ limit: 3, strategy }), createExpressApp({ limit: 3, strategy })].map((app) =>
      app.listen(0, '127.0.0.1'),
    )
    try {
      await Promise.all(servers.map((s) => once(s, 'listening')))
      const urls = servers.map((s) => `http://127.0.0.1:${(s.address() as AddressInfo).port}/`)
      const codes: number[] = []
      for (let i = 0; i < 5; i++) {
        const res = await fetch(urls[i % 2] as string)
        codes.push(res.status)
        if (i === 0) {
          assert.deepEqual(await res.json(), { hello: 'world' })
          assert.match(res.headers.get('ratelimit') ?? '', /^"3-in-1min"; r=2; t=\d+$/)
        } else await res.arrayBuffer()
      }
      assert.deepEqual(codes, [200, 200, 200, 429, 429])
    } finally {
      for (const s of servers) {
        s.closeAllConnections()
        s.close()
      }
      await strategy.close()
    }
  })

  it('refunds: the failed calls to a flaky upstream (and the 429s) give their hit back, over real HTTP', async () => {
    const app = createRefundsApp({ limit: 3, clock: createFakeClock(1_699_999_980_000).now })
    const server = app.listen(0, '127.0.0.1')
    try {
      await once(server, 'listening')
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/flaky`
      const codes: number[] = []
      for (let i = 0; i < 7; i++) {
        const res = await fetch(url)
        await res.arrayBuffer()
        codes.push(res.status)
        await new Promise((resolve) => setImmediate(resolve)) // the response's 'finish' listeners have run
      }
      assert.deepEqual(codes, [200, 502, 200, 502, 200, 429, 429], 'three successes use up the limit of 3')
    } finally {
      server.closeAllConnections()
      server.close()
      await app.close()
    }
  })

  it('fastify-store: the app limits / and counts the login route apart', async () => {
    const app = await buildFastifyApp({ max: 2 })
    try {
      const get = () => app.inject({ method: 'GET', url: '/' })
      assert.deepEqual([(await get()).statusCode, (await get()).statusCode, (await get()).statusCode], [200, 200, 429])
      const login = await app.inject({ method: 'POST', url: '/login' })
      assert.equal(login.statusCode, 200)
      assert.equal(login.headers['x-ratelimit-limit'], '5')
      assert.equal(login.headers['x-ratelimit-remaining'], '4')
    } finally {
      await app.close()
    }
  })

  it('hono-middleware: burst and steady limits, POST costs 2, health is skipped', async () => {
    const clock = createFakeClock(1_699_999_980_000)
    const app = createHonoApp({ clock: clock.now })
    const call = (method: string, path: string) => app.request(path, { method, headers: { 'x-api-key': 'key-1' } })
    const first = await call('POST', '/api/things')
    assert.equal(first.status, 201)
    assert.equal(first.headers.get('ratelimit'), '"burst";r=3;t=1, "steady";r=98;t=60')
    assert.equal((await call('POST', '/api/things')).status, 201)
    assert.equal((await call('GET', '/api/hello')).status, 200, '4 + 1 = 5 still fits the burst')
    const over = await call('GET', '/api/hello')
    assert.equal(over.status, 429)
    // 6 hits (the denied one counts) weigh 5 - 1 = 4 a third of the way through the next second
    assert.deepEqual(await over.json(), { error: 'rate limited', policy: 'burst', retryAfterMs: 1334 })
    assert.equal((await call('GET', '/api/health')).status, 200)
  })

  it('acquire: 3 workers throttle their calls to an API through Redis, none refused, 10 per second at most', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'examples/acquire.ts'], { timeout: 30_000 })
    const [calls, api, took] = stdout.trim().split('\n')
    assert.equal(calls, 'calls: 24 of 24 succeeded, none refused')
    // the busiest clock second: 10 when the first burst fits in one second; fewer when the burst
    // straddles a second boundary (the next second then weighs what the last one admitted)
    const busiest = /^api: at most (\d+) calls let through in one clock second \(limit 10\)$/.exec(api ?? '')
    assert.ok(busiest !== null, `unexpected line: ${api}`)
    // 24 calls at 10 per second span at most four clock seconds: the busiest holds 6 or more
    assert.ok(Number(busiest[1]) >= 6 && Number(busiest[1]) <= 10, `${busiest[1]} calls in the busiest clock second, limit 10`)
    assert.equal(took, 'took: more than one second (the rest waited their turn)')
  })

  it('simple: runs to completion and prints what the limiter decided', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'examples/simple.ts'], { timeout: 30_000 })
    const lines = stdout.trim().split('\n')
    assert.equal(lines[0], 'local: allow allow allow allow allow deny deny')
    const stats = JSON.parse((lines[1] as string).replace(/^stats: /, '')) as Record<string, unknown>
    assert.deepEqual(Object.keys(stats), [
      'FormattedWindowTime',
      'CurrentWindowIndex',
      'CurrentCounter',
      'PreviousWindowIndex',
      'PreviousWindowUsedPercent',
      'PreviousWindowUseCount',
      'RollingCounter',
      'Allow',
    ])
    assert.equal(stats.Allow, false)
    assert.equal(lines[2], 'shared: 5 of 20 concurrent calls allowed')
  })

  it('lists: deny and allow lists decide before the limit, deny wins, nothing listed is counted', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'examples/lists.ts'], { timeout: 30_000 })
    assert.deepEqual(stdout.trim().split('\n'), [
      'user-1: allowed reason=limit remaining=1 retryAfterMs=0',
      'user-1: allowed reason=limit remaining=0 retryAfterMs=0',
      'user-1: denied reason=limit remaining=0 retryAfterMs=100000',
      '203.0.113.5: denied reason=denylist remaining=0 retryAfterMs=Infinity',
      '::ffff:203.0.113.9: denied reason=denylist remaining=0 retryAfterMs=Infinity',
      'scraper-key: denied reason=denylist remaining=0 retryAfterMs=Infinity',
      '2001:db8::42: allowed reason=allowlist remaining=2 retryAfterMs=0',
      '2001:db8::42: allowed reason=allowlist remaining=2 retryAfterMs=0',
      '2001:db8::42: allowed reason=allowlist remaining=2 retryAfterMs=0',
      '2001:db8::42 counted: 0',
    ])
  })

  it('login-protection: failed logins block the user and the IP; a blocked key is turned away before the password check', async () => {
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'examples/login-protection.ts'], { timeout: 30_000 })
    assert.deepEqual(stdout.trim().split('\n'), [
      ...Array.from({ length: 5 }, () => 'alice from 198.51.100.7: wrong password'),
      // the 6th failure goes over 5 in 15 min: blocked; the counts deny for 20 min, past the 15-min block
      'alice from 198.51.100.7: blocked for 1200 s',
      'alice from 203.0.113.20: blocked for 1200 s',
      'alice from 203.0.113.20: ok',
      'bob from 192.0.2.66: blocked for 3600 s',
      'bob from 192.0.2.99: wrong password',
      'carol from 198.51.100.8: blocked for 1200 s',
      'carol from 198.51.100.8: wrong password',
    ])
  })

  it('mysql-store: two processes share one limit through MariaDB, periodic and synchronous', async () => {
    // the example makes (and drops) a table named after its process id in RL_MYSQL_URL's database
    const { stdout } = await run(process.execPath, ['--import', 'tsx', 'examples/mysql-store.ts'], {
      timeout: 30_000,
      env: { ...process.env, RL_MYSQL_URL: SHARED_MYSQL_URL },
    })
    assert.deepEqual(stdout.trim().split('\n'), [
      'periodic: 8 of 8 hits allowed; both processes now count 8 and 8',
      'synchronous: 10 allowed, 4 denied; both count 14 and 14',
    ])
  })
})
