/**
 * Per-user limits over real HTTP: the config's `overrides` on every algorithm (memory and the
 * shared Redis), the runtime overrides of /v1/overrides shared by two instances through Redis
 * and PostgreSQL, admin auth, bad input, memcached's 501, a store that goes down, and a reload
 * that changes the config's overrides.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { createFakeClock } from '../../src/core/clock.js'
import { overridesKey } from '../../src/server/overrides-store.js'
import { createTestSchema, SHARED_POSTGRES_URL, type TestSchema } from '../support/postgres-server.js'
import { requireSharedMemcached } from '../support/memcached-server.js'
import {
  type Answer,
  call,
  check,
  deleteKeys,
  keysUnder,
  SHARED_REDIS_URL,
  startOwnRedis,
  startTestService,
  type TestService,
  uniquePrefix,
  until,
} from './server-helpers.js'

const ALGORITHMS = ['fixed-window-algo', 'sliding-window-algo', 'sliding-window-counter-algo'] as const
// 5 s into the current minute: a fixed clock, so no window ends mid-test (Redis keys expire on the real one)
const NOW = Math.floor(Date.now() / 60_000) * 60_000 + 5_000

function put(base: string, policy: string, userId: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  return call(`${base}/v1/overrides/${policy}/${encodeURIComponent(userId)}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
}

function remove(base: string, policy: string, userId: string, headers: Record<string, string> = {}): Promise<Answer> {
  return call(`${base}/v1/overrides/${policy}/${encodeURIComponent(userId)}`, { method: 'DELETE', headers })
}

/** The limit a read (no counting) shows for `userId`. */
async function limitOf(base: string, userId: string, policy = 'default'): Promise<number> {
  const a = await call(`${base}/v1/users/${encodeURIComponent(userId)}?policy=${policy}`)
  assert.equal(a.status, 200)
  return a.body?.limit as number
}

/** Checks `userId` until denied; the number admitted. */
async function admitted(base: string, userId: string, policy = 'default', most = 20): Promise<number> {
  for (let i = 0; i < most; i++) {
    const a = await check(base, { userId, policy })
    if (a.status === 429) return i
    assert.equal(a.status, 200)
  }
  return most
}

function yaml(algo: string, store: string, extra = ''): string {
  return [
    'rate-limiter:',
    `  use-algo: ${algo}`,
    '  max-requests: 3',
    '  window-size: 60',
    '  deny-list: [banned]',
    '  overrides:',
    '    vip: { max-requests: 6 }',
    '    trial: { max-requests: 1 }',
    '    banned: { max-requests: 100 }',
    '    big: { max-requests: 10 }',
    'policies:',
    '  login: { max-requests: 2 }',
    `  pro: { max-requests: 4, overrides: { vip: { max-requests: 5 } } }`,
    `store: ${store}`,
    extra,
  ].join('\n')
}

describe('per-user limit overrides', { timeout: 60_000 }, () => {
  let redis: Redis
  const prefixes: string[] = []
  before(() => {
    redis = new Redis(SHARED_REDIS_URL)
  })
  after(async () => {
    for (const prefix of prefixes) await deleteKeys(redis, prefix)
    redis.disconnect()
  })

  for (const store of ['memory', 'redis'] as const)
    for (const algo of ALGORITHMS)
      it(`config overrides apply on ${algo} over ${store}, in the body and the headers; lists win; not inherited`, async () => {
        const prefix = uniquePrefix()
        prefixes.push(prefix)
        const section = store === 'memory' ? '{ type: memory }' : `{ type: redis, url: "${SHARED_REDIS_URL}" }`
        const t = await startTestService(yaml(algo, section).replace('  window-size: 60', `  window-size: 60\n  key-prefix: ${prefix}`), {
          clock: createFakeClock(NOW).now,
        })
        try {
          const first = await check(t.url, { userId: 'vip' })
          assert.equal(first.status, 200)
          assert.equal(first.body?.limit, 6)
          assert.equal(first.body?.remaining, 5)
          assert.equal(first.headers.get('ratelimit-policy'), '"default";q=6;w=60')
          assert.match(first.headers.get('ratelimit') ?? '', /^"default";r=5;t=\d+$/)
          assert.equal(await admitted(t.url, 'vip'), 5, 'vip: 6 in all')
          assert.equal(await admitted(t.url, 'trial'), 1)
          assert.equal(await admitted(t.url, 'plain'), 3)
          const denied = await check(t.url, { userId: 'vip' })
          assert.equal(denied.status, 429)
          assert.equal(denied.body?.limit, 6)
          assert.equal(denied.headers.get('ratelimit-policy'), '"default";q=6;w=60')
          // a read shows the applied limit too
          assert.equal(await limitOf(t.url, 'vip'), 6)
          assert.equal(await limitOf(t.url, 'plain'), 3)
          // the deny list wins over an override
          const banned = await check(t.url, { userId: 'banned' })
          assert.equal(banned.status, 429)
          assert.equal(banned.body?.reason, 'denylist')
          // the default policy's overrides are its own; pro has its own vip override
          assert.equal(await admitted(t.url, 'vip', 'login'), 2)
          assert.equal(await admitted(t.url, 'vip', 'pro'), 5)
          assert.equal(await admitted(t.url, 'trial', 'pro'), 4)
          // a cost above the user's limit is denied and never admissible; one above max-requests but within it is admitted
          const costly = await check(t.url, { userId: 'big', cost: 11 })
          assert.equal(costly.status, 429)
          assert.equal(costly.body?.retryAfterMs, null)
          const big = await check(t.url, { userId: 'big', cost: 8 })
          assert.equal(big.status, 200)
          assert.equal(big.body?.remaining, 2)
        } finally {
          await t.close()
        }
        // the counter algorithm's periodic sync has flushed by now
        if (store === 'redis') assert.ok((await keysUnder(redis, prefix)).length > 0, 'the counters live in Redis')
      })

  it('forward-auth decides with the override too', async () => {
    const t = await startTestService(yaml('fixed-window-algo', '{ type: memory }', 'forward-auth: { key-header: x-user }'))
    try {
      let allowed = 0
      for (let i = 0; i < 8; i++) {
        const a = await call(`${t.url}/v1/forward-auth`, { headers: { 'x-user': 'vip' } })
        if (a.status === 200) allowed++
        else assert.equal(a.status, 403, 'forward-auth.denied-status')
      }
      assert.equal(allowed, 6)
    } finally {
      await t.close()
    }
  })

  it('two instances on one Redis: a PUT on one applies on the other within overrides-refresh; DELETE restores; runtime wins over config', async () => {
    const prefix = uniquePrefix()
    prefixes.push(prefix)
    const config = yaml('sliding-window-counter-algo', `{ type: redis, url: "${SHARED_REDIS_URL}" }`).replace(
      '  window-size: 60',
      `  window-size: 60\n  key-prefix: ${prefix}\n  overrides-refresh: 0.1`,
    )
    const a = await startTestService(config)
    const b = await startTestService(config)
    try {
      const set = await put(a.url, 'default', 'team/42', { maxRequests: 50 })
      assert.equal(set.status, 200)
      assert.deepEqual(set.body, { policy: 'default', userId: 'team/42', maxRequests: 50, source: 'runtime' })
      assert.equal(await limitOf(a.url, 'team/42'), 50, 'applied at once where it was set')
      await until(async () => (await limitOf(b.url, 'team/42')) === 50, 3000, 'the other instance to apply the override')
      // kept in one hash under the prefix, with its version
      assert.equal(await redis.type(overridesKey(prefix)), 'hash')
      assert.equal(await redis.hget(overridesKey(prefix), 'default:team/42'), '50')
      assert.match(
        (await redis.hget(overridesKey(prefix), '#version')) ?? '',
        /^\d{16,}$/,
        'the version: µs when the hash was made, plus one per write',
      )

      // a runtime override hides the config's, and GET marks both sources
      assert.equal((await put(b.url, 'default', 'vip', { maxRequests: 8 })).status, 200)
      await until(async () => (await limitOf(a.url, 'vip')) === 8, 3000, 'the runtime override to win on the first instance')
      const listed = await call(`${a.url}/v1/overrides/default`)
      assert.equal(listed.status, 200)
      assert.deepEqual(listed.body, {
        policy: 'default',
        limit: 3,
        overrides: [
          { userId: 'banned', maxRequests: 100, source: 'config' },
          { userId: 'big', maxRequests: 10, source: 'config' },
          { userId: 'team/42', maxRequests: 50, source: 'runtime' },
          { userId: 'trial', maxRequests: 1, source: 'config' },
          { userId: 'vip', maxRequests: 8, source: 'runtime', configMaxRequests: 6 },
        ],
      })
      const one = await call(`${b.url}/v1/overrides/default/vip`)
      assert.deepEqual(one.body, { policy: 'default', userId: 'vip', maxRequests: 8, source: 'runtime', configMaxRequests: 6 })
      const metrics = await (await fetch(`${a.url}/metrics`)).text()
      assert.match(metrics, /ratelimiting_overrides\{policy="default",source="config"\} 3/)
      assert.match(metrics, /ratelimiting_overrides\{policy="default",source="runtime"\} 2/)

      // DELETE restores: the default limit, or the config's override
      assert.equal((await remove(b.url, 'default', 'team/42')).status, 204)
      assert.equal((await remove(a.url, 'default', 'vip')).status, 204)
      await until(async () => (await limitOf(a.url, 'team/42')) === 3, 3000, 'the removal to reach the first instance')
      await until(async () => (await limitOf(b.url, 'vip')) === 6, 3000, 'the config override to apply again')
      const gone = await remove(a.url, 'default', 'vip')
      assert.equal(gone.status, 404)
      assert.equal(gone.body?.error, 'no_override')
      assert.match(gone.body?.message as string, /config override \(max-requests 6\) applies/)
      // a named policy's overrides are its own
      assert.equal((await put(a.url, 'login', 'team/42', { maxRequests: 9 })).status, 200)
      await until(async () => (await limitOf(b.url, 'team/42', 'login')) === 9, 3000, 'the login override')
      assert.equal(await limitOf(b.url, 'team/42'), 3)
    } finally {
      await Promise.all([a.close(), b.close()])
    }
  })

  it('admin auth: 401 without a token, 403 with a client token, admin tokens may list, set and remove', async () => {
    const t = await startTestService(
      yaml('fixed-window-algo', '{ type: memory }', 'auth: { tokens: [client-token-1], admin-tokens: [admin-token-1] }'),
    )
    const client = { authorization: 'Bearer client-token-1' }
    const admin = { authorization: 'Bearer admin-token-1' }
    try {
      assert.equal((await put(t.url, 'default', 'u1', { maxRequests: 5 })).status, 401)
      const forbidden = await put(t.url, 'default', 'u1', { maxRequests: 5 }, client)
      assert.equal(forbidden.status, 403)
      assert.equal(forbidden.body?.error, 'forbidden')
      assert.equal((await call(`${t.url}/v1/overrides/default`, { headers: client })).status, 403)
      assert.equal((await remove(t.url, 'default', 'u1', client)).status, 403)
      assert.equal((await put(t.url, 'default', 'u1', { maxRequests: 5 }, admin)).status, 200)
      assert.equal((await check(t.url, { userId: 'u1' }, client)).body?.limit, 5)
      assert.equal((await call(`${t.url}/v1/overrides/default`, { headers: admin })).status, 200)
      assert.equal((await remove(t.url, 'default', 'u1', admin)).status, 204)
    } finally {
      await t.close()
    }
  })

  it('bad input: unknown policy 404, maxRequests out of bounds 400 naming it, user ids checked as /v1/check checks them', async () => {
    const t = await startTestService(
      yaml('fixed-window-algo', '{ type: memory }').replace('store:', 'server: { max-user-id-length: 8 }\nstore:'),
    )
    try {
      const unknown = await put(t.url, 'nope', 'u1', { maxRequests: 5 })
      assert.equal(unknown.status, 404)
      assert.equal(unknown.body?.error, 'unknown_policy')
      assert.equal((await call(`${t.url}/v1/overrides/nope`)).status, 404)
      for (const bad of [0, -1, 1.5, '10', null, 1_000_000_001, true]) {
        const a = await put(t.url, 'default', 'u1', { maxRequests: bad })
        assert.equal(a.status, 400, `maxRequests ${JSON.stringify(bad)}`)
        assert.match(a.body?.message as string, /^maxRequests must be an integer from 1 to 1000000000, got /)
      }
      assert.match((await put(t.url, 'default', 'u1', {})).body?.message as string, /maxRequests .* got nothing/)
      assert.match((await put(t.url, 'default', 'u1', { maxRequests: 5, max: 1 })).body?.message as string, /unknown field "max"/)
      assert.equal((await put(t.url, 'default', 'u1', [5])).status, 400)
      assert.equal((await put(t.url, 'default', 'u1', '{"maxRequests":')).body?.error, 'invalid_json')
      const noType = await call(`${t.url}/v1/overrides/default/u1`, { method: 'PUT', body: '{"maxRequests":5}' })
      assert.equal(noType.status, 415)
      const tooLong = await put(t.url, 'default', 'user-123456', { maxRequests: 5 })
      assert.equal(tooLong.status, 400)
      assert.match(tooLong.body?.message as string, /userId must be at most 8 characters/)
      assert.equal((await put(t.url, 'default', 'a\u0001b', { maxRequests: 5 })).status, 400)
      assert.equal((await call(`${t.url}/v1/overrides/default/%E0%A4%A`, { method: 'DELETE' })).status, 400)
      assert.equal((await call(`${t.url}/v1/overrides/default/a/b`, { method: 'DELETE' })).status, 404)
      assert.equal((await call(`${t.url}/v1/overrides/`)).status, 404)
      const wrong = await call(`${t.url}/v1/overrides/default`, { method: 'POST' })
      assert.equal(wrong.status, 405)
      assert.equal(wrong.headers.get('allow'), 'GET')
      assert.equal((await call(`${t.url}/v1/overrides/default/u1`, { method: 'POST' })).headers.get('allow'), 'GET, PUT, DELETE')
      assert.equal((await remove(t.url, 'default', 'u1')).status, 404)
      // nothing was set by any of it
      assert.equal(((await call(`${t.url}/v1/overrides/default`)).body?.overrides as unknown[]).length, 4)
      assert.equal(await limitOf(t.url, 'u1'), 3)
    } finally {
      await t.close()
    }
  })

  it('memcached cannot hold runtime overrides: 501, while the config overrides apply', async () => {
    const server = await requireSharedMemcached()
    const t = await startTestService(
      yaml('sliding-window-counter-algo', `{ type: memcached, servers: ["${server}"] }`).replace(
        '  window-size: 60',
        `  window-size: 60\n  key-prefix: ${uniquePrefix()}`,
      ),
    )
    try {
      const a = await put(t.url, 'default', 'u1', { maxRequests: 5 })
      assert.equal(a.status, 501)
      assert.equal(a.body?.error, 'not_implemented')
      assert.match(a.body?.message as string, /store type memcached cannot hold runtime overrides/)
      assert.equal((await remove(t.url, 'default', 'u1')).status, 501)
      assert.equal((await call(`${t.url}/v1/overrides/default`)).status, 200)
      assert.equal(await limitOf(t.url, 'vip'), 6)
    } finally {
      await t.close()
    }
  })

  it('a Redis that goes down: the routes answer 503 at once, decisions keep the last overrides read, and it recovers', async () => {
    const own = await startOwnRedis()
    const config = yaml('sliding-window-counter-algo', `{ type: redis, url: "${own.url}", timeout-ms: 300 }`).replace(
      '  window-size: 60',
      '  window-size: 60\n  overrides-refresh: 0.05',
    )
    const t = await startTestService(config)
    try {
      assert.equal((await put(t.url, 'default', 'u1', { maxRequests: 7 })).status, 200)
      await own.kill()
      const started = Date.now()
      const down = await put(t.url, 'default', 'u2', { maxRequests: 7 })
      assert.equal(down.status, 503)
      assert.equal(down.body?.error, 'store_unavailable')
      assert.equal(down.headers.get('retry-after'), '1')
      assert.equal((await remove(t.url, 'default', 'u1')).status, 503)
      assert.equal((await call(`${t.url}/v1/overrides/default`)).status, 503)
      assert.ok(Date.now() - started < 2000, 'nothing hangs')
      // the counter with a periodic sync decides on local counts, with the override last read
      const d = await check(t.url, { userId: 'u1' })
      assert.equal(d.status, 200)
      assert.equal(d.body?.limit, 7)
      const metrics = await (await fetch(`${t.url}/metrics`)).text()
      assert.match(metrics, /ratelimiting_store_errors_total\{store="redis",operation="overrides"\} [1-9]/)
      await own.start()
      await until(async () => (await put(t.url, 'default', 'u2', { maxRequests: 4 })).status === 200, 5000, 'the store to come back')
      // the restarted Redis lost the hash: the poll reads what it now holds (u2 only)
      assert.equal(await limitOf(t.url, 'u2'), 4)
      await until(async () => (await limitOf(t.url, 'u1')) === 3, 3000, 'the lost override to go')
    } finally {
      await t.close()
      await own.kill()
    }
  })

  it('a reload that changes the config overrides applies them and keeps the counts', async () => {
    const t = await startTestService(yaml('sliding-window-algo', '{ type: memory }'))
    try {
      assert.equal(await admitted(t.url, 'vip'), 6)
      t.write(yaml('sliding-window-algo', '{ type: memory }').replace('vip: { max-requests: 6 }', 'vip: { max-requests: 10 }'))
      assert.equal(await t.service.reload(), true)
      assert.equal(await admitted(t.url, 'vip'), 4, 'the 6 counted before the reload still count')
      assert.equal(await limitOf(t.url, 'vip'), 10)
      // a runtime override made before a reload survives it (same store)
      assert.equal((await put(t.url, 'default', 'r1', { maxRequests: 2 })).status, 200)
      t.write(yaml('sliding-window-algo', '{ type: memory }').replace('    vip: { max-requests: 6 }\n', ''))
      assert.equal(await t.service.reload(), true)
      assert.equal(await limitOf(t.url, 'vip'), 3, 'a removed config override no longer applies')
      assert.equal(await limitOf(t.url, 'r1'), 2)
      // a bad override is rejected with its place, and the running config stays
      t.write(yaml('sliding-window-algo', '{ type: memory }').replace('trial: { max-requests: 1 }', 'trial: { max-requests: 0 }'))
      assert.equal(await t.service.reload(), false)
      const rejected = t.logs.find((l) => l.msg === 'config reload rejected; the running config stays')
      assert.match(JSON.stringify(rejected?.issues), /rate-limiter\.overrides\.trial\.max-requests: must be >= 1/)
      assert.equal(await limitOf(t.url, 'trial'), 1)
    } finally {
      await t.close()
    }
  })
})

describe('runtime overrides on PostgreSQL', { timeout: 60_000 }, () => {
  let schema: TestSchema
  before(async () => {
    schema = await createTestSchema('rl_overrides')
  })
  after(async () => {
    await schema.drop()
  })

  it('a table created when missing; a PUT on one instance applies on the other; DELETE restores', async () => {
    const config = yaml(
      'sliding-window-counter-algo',
      `{ type: postgres, url: "${SHARED_POSTGRES_URL}", schema: ${schema.schema} }`,
    ).replace('  window-size: 60', '  window-size: 60\n  overrides-refresh: 0.1')
    const a = await startTestService(config)
    const b = await startTestService(config)
    let services: TestService[] = [a, b]
    try {
      assert.equal((await put(a.url, 'pro', 'org:7', { maxRequests: 40 })).status, 200)
      assert.equal(await limitOf(a.url, 'org:7', 'pro'), 40)
      await until(async () => (await limitOf(b.url, 'org:7', 'pro')) === 40, 3000, 'the other instance to apply the override')
      const rows = await schema.pool.query(
        `SELECT scope, policy, user_id, max_requests::int AS max FROM "${schema.schema}".ratelimiting_overrides`,
      )
      assert.deepEqual(rows.rows, [{ scope: 'rlaas:rate_limit', policy: 'pro', user_id: 'org:7', max: 40 }])
      assert.equal((await put(b.url, 'pro', 'org:7', { maxRequests: 41 })).status, 200)
      await until(async () => (await limitOf(a.url, 'org:7', 'pro')) === 41, 3000, 'the replaced value')
      assert.equal((await remove(a.url, 'pro', 'org:7')).status, 204)
      await until(async () => (await limitOf(b.url, 'org:7', 'pro')) === 4, 3000, 'the removal')
      assert.equal((await remove(a.url, 'pro', 'org:7')).status, 404)
      // a restarted instance reads them at start
      assert.equal((await put(a.url, 'default', 'u9', { maxRequests: 12 })).status, 200)
      await b.close()
      services = [a]
      const c = await startTestService(config)
      services.push(c)
      assert.equal(await limitOf(c.url, 'u9'), 12)
    } finally {
      await Promise.all(services.map((s) => s.close()))
    }
  })
})
