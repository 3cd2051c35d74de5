/**
 * The forward-auth route (`/v1/forward-auth[/<policy>]`) over real HTTP, straight to the service
 * (test/integration/server-nginx.test.ts puts a real nginx in front): the key header and its
 * entry, both ways to name a policy, the denied status, shadow mode, auth, bad keys, and the
 * answers to a failed store.
 */
import assert from 'node:assert/strict'
import http from 'node:http'
import { after, before, describe, it } from 'node:test'
import { keyEntryOf } from '../../src/server/forward-auth.js'
import { type Answer, call, type OwnRedis, startOwnRedis, startTestService, type TestService } from './server-helpers.js'

const CONFIG = `
rate-limiter: { use-algo: sliding-window-algo, max-requests: 2, window-size: 60 }
policies:
  login: { max-requests: 1 }
  watch: { max-requests: 1, shadow-mode: true }
store: { type: memory }
`

function ask(base: string, route: string, headers: Record<string, string> = {}, method = 'GET'): Promise<Answer> {
  return call(`${base}${route}`, { method, headers })
}

describe('keyEntryOf', () => {
  it('picks the last, the first or the whole of a comma-separated value', () => {
    assert.equal(keyEntryOf('203.0.113.9, 10.0.0.1', 'last'), '10.0.0.1')
    assert.equal(keyEntryOf('203.0.113.9 ,10.0.0.1', 'first'), '203.0.113.9')
    assert.equal(keyEntryOf('a, b', 'whole'), 'a, b')
    assert.equal(keyEntryOf('10.0.0.1', 'last'), '10.0.0.1')
    assert.equal(keyEntryOf('10.0.0.1', 'first'), '10.0.0.1')
    assert.equal(keyEntryOf('10.0.0.1,', 'last'), '')
  })
})

describe('forward-auth route (memory store)', { timeout: 60_000 }, () => {
  let t: TestService
  let base: string
  before(async () => {
    t = await startTestService(CONFIG)
    base = t.url
  })
  after(() => t.close())

  it('allows with 200 and the RateLimit headers, keyed on X-Real-IP, whatever the method', async () => {
    const get = await ask(base, '/v1/forward-auth', { 'x-real-ip': '192.0.2.1' })
    assert.equal(get.status, 200)
    assert.equal(get.headers.get('ratelimit'), '"default";r=1;t=60')
    assert.equal(get.headers.get('ratelimit-policy'), '"default";q=2;w=60')
    assert.equal(get.headers.get('retry-after'), null)
    assert.deepEqual(get.body, { allowed: true, count: 1, limit: 2, remaining: 1, resetMs: 60000, retryAfterMs: 0, reason: 'limit' })
    // nginx, Traefik and Caddy send GET, but a gateway may forward the client's method; a body is never read
    const post = await call(`${base}/v1/forward-auth`, { method: 'POST', headers: { 'x-real-ip': '192.0.2.1' }, body: 'ignored' })
    assert.equal(post.status, 200)
    assert.equal(post.headers.get('ratelimit'), '"default";r=0;t=60')
  })

  it('denies with 403 (the default denied-status), Retry-After and the RateLimit headers', async () => {
    const a = await ask(base, '/v1/forward-auth', { 'x-real-ip': '192.0.2.1' }, 'DELETE')
    assert.equal(a.status, 403)
    assert.ok(Number(a.headers.get('retry-after')) >= 1, `Retry-After ${a.headers.get('retry-after')}`)
    assert.match(a.headers.get('ratelimit') ?? '', /^"default";r=0;t=\d+$/)
    assert.equal(a.headers.get('ratelimit-policy'), '"default";q=2;w=60')
    assert.equal(a.body?.allowed, false)
    const head = await ask(base, '/v1/forward-auth', { 'x-real-ip': '192.0.2.1' }, 'HEAD')
    assert.equal(head.status, 403)
    assert.equal(head.body, undefined)
  })

  it('counts each key on its own', async () => {
    assert.equal((await ask(base, '/v1/forward-auth', { 'x-real-ip': '192.0.2.2' })).status, 200)
  })

  it('names the policy in the path or in ?policy=, one count for both', async () => {
    assert.equal((await ask(base, '/v1/forward-auth/login', { 'x-real-ip': '192.0.2.3' })).status, 200)
    const again = await ask(base, '/v1/forward-auth?policy=login', { 'x-real-ip': '192.0.2.3' })
    assert.equal(again.status, 403)
    assert.equal(again.headers.get('ratelimit-policy'), '"login";q=1;w=60')
    assert.equal((await ask(base, '/v1/forward-auth/default', { 'x-real-ip': '192.0.2.3' })).status, 200)
  })

  it('reads no query on the path form, so a forwarded client query cannot pick a policy', async () => {
    assert.equal((await ask(base, '/v1/forward-auth/login?policy=default', { 'x-real-ip': '192.0.2.4' })).status, 200)
    const a = await ask(base, '/v1/forward-auth/login?policy=default', { 'x-real-ip': '192.0.2.4' })
    assert.equal(a.status, 403)
    assert.equal(a.headers.get('ratelimit-policy'), '"login";q=1;w=60')
    // other parameters of the query form are ignored
    assert.equal((await ask(base, '/v1/forward-auth?page=2', { 'x-real-ip': '192.0.2.4' })).status, 200)
  })

  it('answers 404 for an unknown policy, in the path or the query, and for other paths', async () => {
    for (const route of ['/v1/forward-auth/nope', '/v1/forward-auth?policy=nope', '/v1/forward-auth/', '/v1/forward-auth/login/x']) {
      const a = await ask(base, route, { 'x-real-ip': '192.0.2.5' })
      assert.equal(a.status, 404, route)
      assert.equal(a.body?.error, 'unknown_policy', route)
    }
    const other = await ask(base, '/v1/forward-authz', { 'x-real-ip': '192.0.2.5' })
    assert.equal(other.status, 404)
    assert.equal(other.body?.error, 'not_found')
  })

  it('answers a missing, empty, over-long or control-character key with a 400 that names the header', async () => {
    const missing = await ask(base, '/v1/forward-auth')
    assert.equal(missing.status, 400)
    assert.equal(missing.body?.error, 'invalid_key')
    assert.match(String(missing.body?.message), /x-real-ip header is missing/)
    const cases: Array<[string, RegExp]> = [
      ['', /the key must not be empty \(read from the x-real-ip header, key-entry last\)/],
      ['192.0.2.6,', /the key must not be empty/],
      ['a'.repeat(257), /the key must be at most 256 characters, got 257/],
      ['a\tb', /the key must not contain control characters/],
    ]
    for (const [value, message] of cases) {
      const a = await ask(base, '/v1/forward-auth', { 'x-real-ip': value })
      assert.equal(a.status, 400, JSON.stringify(value))
      assert.equal(a.body?.error, 'invalid_key')
      assert.match(String(a.body?.message), message)
    }
    // a C1 control character, sent as the Latin-1 byte 0x85 that Node decodes header values from
    const c1 = await new Promise<number>((resolve, reject) => {
      const { port } = new URL(base)
      const req = http.request({ host: '127.0.0.1', port, path: '/v1/forward-auth', headers: { 'x-real-ip': 'a\u0085b' } }, (res) => {
        res.resume()
        resolve(res.statusCode ?? 0)
      })
      req.on('error', reject)
      req.end()
    })
    assert.equal(c1, 400)
  })

  it('answers a shadow-mode denial 200 with x-ratelimit-shadow: denied and no Retry-After', async () => {
    assert.equal((await ask(base, '/v1/forward-auth/watch', { 'x-real-ip': '192.0.2.7' })).status, 200)
    const a = await ask(base, '/v1/forward-auth/watch', { 'x-real-ip': '192.0.2.7' })
    assert.equal(a.status, 200)
    assert.equal(a.headers.get('x-ratelimit-shadow'), 'denied')
    assert.equal(a.headers.get('retry-after'), null)
    assert.match(a.headers.get('ratelimit') ?? '', /^"watch";r=0;t=\d+$/)
    assert.equal(a.body?.shadowDenied, true)
  })

  it('counts its decisions in /metrics as /v1/check does', async () => {
    const text = await (await fetch(`${base}/metrics`)).text()
    assert.match(text, /ratelimiting_decisions_total\{policy="login",algorithm="sliding-window-algo",outcome="denied"\} 2/)
    assert.match(text, /ratelimiting_decisions_total\{policy="watch",algorithm="sliding-window-algo",outcome="shadow_denied"\} 1/)
  })
})

describe('forward-auth with its config keys set', { timeout: 60_000 }, () => {
  let t: TestService
  before(async () => {
    t = await startTestService(`${CONFIG}forward-auth: { key-header: X-Forwarded-For, denied-status: 429 }\n`)
  })
  after(() => t.close())

  it('keys on the last X-Forwarded-For entry and denies with the configured status', async () => {
    // what nginx's $proxy_add_x_forwarded_for sends: the client's own list, then the address nginx saw
    const first = await ask(t.url, '/v1/forward-auth', { 'x-forwarded-for': '203.0.113.1, 192.0.2.10' })
    assert.equal(first.status, 200)
    assert.equal((await ask(t.url, '/v1/forward-auth', { 'x-forwarded-for': '203.0.113.2, 192.0.2.10' })).status, 200)
    const denied = await ask(t.url, '/v1/forward-auth', { 'x-forwarded-for': '198.51.100.3, 192.0.2.10' })
    assert.equal(denied.status, 429)
    assert.ok(Number(denied.headers.get('retry-after')) >= 1)
    assert.equal((await ask(t.url, '/v1/forward-auth', { 'x-forwarded-for': '192.0.2.11' })).status, 200)
  })

  it('takes the first entry or the whole value when key-entry says so', async () => {
    const first = await startTestService(`${CONFIG}forward-auth: { key-header: x-forwarded-for, key-entry: first }\n`)
    const whole = await startTestService(`${CONFIG}forward-auth: { key-header: x-client, key-entry: whole }\n`)
    try {
      // behind an edge proxy that replaces X-Forwarded-For, and proxies that append to it
      assert.equal((await ask(first.url, '/v1/forward-auth/login', { 'x-forwarded-for': '192.0.2.20, 10.0.0.1' })).status, 200)
      assert.equal((await ask(first.url, '/v1/forward-auth/login', { 'x-forwarded-for': '192.0.2.20, 10.0.0.2' })).status, 403)
      assert.equal((await ask(whole.url, '/v1/forward-auth/login', { 'x-client': 'a, b' })).status, 200)
      assert.equal((await ask(whole.url, '/v1/forward-auth/login', { 'x-client': 'b' })).status, 200)
      assert.equal((await ask(whole.url, '/v1/forward-auth/login', { 'x-client': 'a, b' })).status, 403)
    } finally {
      await Promise.allSettled([first.close(), whole.close()])
    }
  })
})

describe('forward-auth with bearer tokens', { timeout: 60_000 }, () => {
  let t: TestService
  before(async () => {
    t = await startTestService(`${CONFIG}auth: { tokens: [client-token-123], admin-tokens: [admin-token-456] }\n`)
  })
  after(() => t.close())

  it('needs a client or admin token, as /v1/check does', async () => {
    const none = await ask(t.url, '/v1/forward-auth', { 'x-real-ip': '192.0.2.30' })
    assert.equal(none.status, 401)
    assert.equal(none.body?.error, 'unauthorized')
    assert.equal(none.headers.get('www-authenticate'), 'Bearer realm="ratelimiting"')
    const wrong = await ask(t.url, '/v1/forward-auth', { 'x-real-ip': '192.0.2.30', authorization: 'Bearer not-a-token' })
    assert.equal(wrong.status, 401)
    const client = await ask(t.url, '/v1/forward-auth', { 'x-real-ip': '192.0.2.30', authorization: 'Bearer client-token-123' })
    assert.equal(client.status, 200)
    const admin = await ask(t.url, '/v1/forward-auth/login', { 'x-real-ip': '192.0.2.30', authorization: 'Bearer admin-token-456' })
    assert.equal(admin.status, 200)
  })

  it('checks the token before anything else of the request', async () => {
    assert.equal((await ask(t.url, '/v1/forward-auth/nope')).status, 401)
    assert.equal((await ask(t.url, '/v1/forward-auth')).status, 401)
  })
})

describe('forward-auth when the store fails', { timeout: 60_000 }, () => {
  let redis: OwnRedis
  let failing: TestService
  let closed: TestService
  let open: TestService
  before(async () => {
    redis = await startOwnRedis()
    const config = (mode: string) =>
      `rate-limiter: { use-algo: sliding-window-algo, max-requests: 5, window-size: 60, on-store-error: ${mode} }\n` +
      `store: { type: redis, url: "${redis.url}", timeout-ms: 300 }\n`
    failing = await startTestService(config('error'))
    closed = await startTestService(config('deny'))
    open = await startTestService(config('allow'))
    assert.equal((await ask(closed.url, '/v1/forward-auth', { 'x-real-ip': '192.0.2.40' })).status, 200)
    await redis.kill()
  })
  after(async () => {
    await Promise.allSettled([failing?.close(), closed?.close(), open?.close()])
    await redis?.kill()
  })

  it('answers as on-store-error says: 503 for error, denied-status for deny, 200 for allow', async () => {
    const error = await ask(failing.url, '/v1/forward-auth', { 'x-real-ip': '192.0.2.40' })
    assert.equal(error.status, 503)
    assert.equal(error.body?.error, 'store_unavailable')
    const deny = await ask(closed.url, '/v1/forward-auth', { 'x-real-ip': '192.0.2.40' })
    assert.equal(deny.status, 403)
    assert.equal(deny.headers.get('retry-after'), '1')
    assert.equal(deny.body?.degraded, true)
    const allow = await ask(open.url, '/v1/forward-auth', { 'x-real-ip': '192.0.2.40' })
    assert.equal(allow.status, 200)
    assert.equal(allow.body?.degraded, true)
  })
})
