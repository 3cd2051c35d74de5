/**
 * The service's HTTP API over real HTTP, on the memory store: every endpoint, the three
 * algorithms, auth, and every kind of bad input.
 */
import assert from 'node:assert/strict'
import { request as httpRequest } from 'node:http'
import { connect } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { ConfigFileError } from '../../src/server/config.js'
import { type Answer, call, check, startTestService, type TestService } from './server-helpers.js'

const CLIENT = 'client-token-123'
const ADMIN = 'admin-token-456'

const CONFIG = `
server: { host: 127.0.0.1, port: 0, max-body-bytes: 1024, max-user-id-length: 64 }
rate-limiter: { use-algo: sliding-window-algo, max-requests: 3, window-size: 60 }
policies:
  fixed: { use-algo: fixed-window-algo, max-requests: 2, window-size: 60 }
  counter: { use-algo: sliding-window-counter-algo, max-requests: 2, window-size: 60 }
  synced: { use-algo: sliding-window-counter-algo, max-requests: 5, window-size: 60, sync-rate: 0.05 }
store: { type: memory }
`

/** A raw HTTP exchange, for requests fetch refuses to send. */
function raw(base: string, text: string): Promise<string> {
  const { hostname, port } = new URL(base)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let out = ''
    socket.on('data', (d) => {
      out += d.toString()
    })
    socket.on('end', () => resolve(out))
    socket.on('error', (err) => (out === '' ? reject(err) : resolve(out)))
    socket.write(text)
    setTimeout(() => socket.end(), 300)
  })
}

function errorCode(a: Answer): unknown {
  return a.body?.error
}

describe('service HTTP API (memory store)', { timeout: 60_000 }, () => {
  let t: TestService
  let base: string
  before(async () => {
    t = await startTestService(CONFIG)
    base = t.url
  })
  after(() => t.close())

  it('answers POST /v1/check with the decision and the standard headers', async () => {
    const a = await check(base, { userId: 'check-1' })
    assert.equal(a.status, 200)
    assert.deepEqual(a.body, {
      allowed: true,
      count: 1,
      limit: 3,
      remaining: 2,
      resetMs: 60_000,
      retryAfterMs: 0,
      reason: 'limit',
    })
    assert.equal(a.headers.get('ratelimit-policy'), '"default";q=3;w=60')
    assert.equal(a.headers.get('ratelimit'), '"default";r=2;t=60')
    assert.equal(a.headers.get('content-type'), 'application/json')
  })

  it('answers 429 with Retry-After once the limit is used', async () => {
    for (let i = 0; i < 3; i++) assert.equal((await check(base, { userId: 'check-2' })).status, 200)
    const a = await check(base, { userId: 'check-2' })
    assert.equal(a.status, 429)
    assert.equal(a.body?.allowed, false)
    assert.equal(a.body?.remaining, 0)
    assert.ok((a.body?.retryAfterMs as number) > 59_000)
    assert.equal(a.headers.get('retry-after'), '60')
  })

  it('counts a cost, and says null retryAfterMs for a cost above the limit', async () => {
    const a = await check(base, { userId: 'cost-1', cost: 2 })
    assert.equal(a.body?.remaining, 1)
    const never = await check(base, { userId: 'cost-2', cost: 4 })
    assert.equal(never.status, 429)
    assert.equal(never.body?.retryAfterMs, null)
    assert.equal(never.headers.get('retry-after'), null)
  })

  it('decides each named policy with its own algorithm and limit', async () => {
    const fixed = [await check(base, { userId: 'p', policy: 'fixed' }), await check(base, { userId: 'p', policy: 'fixed' })]
    assert.deepEqual(
      fixed.map((a) => a.status),
      [200, 200],
    )
    const third = await check(base, { userId: 'p', policy: 'fixed' })
    assert.equal(third.status, 429)
    assert.equal(third.body?.count, 3, 'the fixed window counts denied requests')
    assert.equal(third.headers.get('ratelimit-policy'), '"fixed";q=2;w=60')
    const counter = [await check(base, { userId: 'p', policy: 'counter' }), await check(base, { userId: 'p', policy: 'counter' })]
    assert.deepEqual(
      counter.map((a) => a.body?.count),
      [1, 2],
    )
    assert.equal((await check(base, { userId: 'p', policy: 'counter' })).status, 429)
    assert.equal((await check(base, { userId: 'p' })).status, 200, 'the default policy counts apart')
  })

  it('reads usage without consuming: GET /v1/users/{userId}', async () => {
    await check(base, { userId: 'reader' })
    const a = await call(`${base}/v1/users/reader`)
    assert.equal(a.status, 200)
    assert.equal(a.body?.count, 1)
    assert.equal(a.body?.remaining, 2)
    assert.equal((await call(`${base}/v1/users/reader`)).body?.count, 1)
    const fixed = await call(`${base}/v1/users/reader?policy=fixed`)
    assert.equal(fixed.body?.count, 0)
    assert.equal(fixed.body?.limit, 2)
  })

  it('decodes percent-encoded user ids in the path', async () => {
    await check(base, { userId: 'a/b c' })
    assert.equal((await call(`${base}/v1/users/${encodeURIComponent('a/b c')}`)).body?.count, 1)
  })

  it('resets a user: DELETE /v1/users/{userId}', async () => {
    for (let i = 0; i < 3; i++) await check(base, { userId: 'resettable' })
    assert.equal((await check(base, { userId: 'resettable' })).status, 429)
    const del = await call(`${base}/v1/users/resettable`, { method: 'DELETE' })
    assert.equal(del.status, 204)
    assert.equal((await check(base, { userId: 'resettable' })).status, 200)
  })

  it('resets a user of one policy only', async () => {
    await check(base, { userId: 'r2', policy: 'counter' })
    await check(base, { userId: 'r2', policy: 'counter' })
    await check(base, { userId: 'r2' })
    assert.equal((await call(`${base}/v1/users/r2?policy=counter`, { method: 'DELETE' })).status, 204)
    assert.equal((await call(`${base}/v1/users/r2?policy=counter`)).body?.count, 0)
    assert.equal((await call(`${base}/v1/users/r2`)).body?.count, 1)
  })

  it('answers /healthz and /readyz', async () => {
    assert.deepEqual((await call(`${base}/healthz`)).body, { status: 'ok' })
    const ready = await call(`${base}/readyz`)
    assert.equal(ready.status, 200)
    assert.deepEqual(ready.body, { status: 'ready', store: 'memory' })
  })

  it('exposes Prometheus metrics: decisions, latency, sync lag and pending diffs', async () => {
    await check(base, { userId: 'm1', policy: 'synced' })
    const res = await fetch(`${base}/metrics`)
    assert.equal(res.status, 200)
    assert.match(res.headers.get('content-type') ?? '', /^text\/plain/)
    const text = await res.text()
    assert.match(text, /ratelimiting_decisions_total\{policy="default",algorithm="sliding-window-algo",outcome="allowed"\} \d+/)
    assert.match(text, /ratelimiting_decisions_total\{policy="default",algorithm="sliding-window-algo",outcome="denied"\} \d+/)
    assert.match(text, /ratelimiting_decision_duration_seconds_bucket\{le="0.001",policy="fixed",algorithm="fixed-window-algo"\} \d+/)
    assert.match(text, /ratelimiting_sync_lag_seconds\{policy="synced"\} [\d.e-]+/)
    assert.match(text, /ratelimiting_sync_pending_hits\{policy="synced"\} \d+/)
    assert.match(text, /ratelimiting_sync_pending_windows\{policy="synced"\} \d+/)
    assert.match(text, /ratelimiting_syncs_total\{policy="synced"\} \d+/)
    assert.match(text, /ratelimiting_open_connections [1-9]/)
    assert.match(text, /ratelimiting_connections_refused_total 0/)
    assert.match(
      text,
      /ratelimiting_policy_info\{policy="counter",algorithm="sliding-window-counter-algo",limit="2",window="60",store="memory"\} 1/,
    )
    assert.doesNotMatch(text, /ratelimiting_sync_lag_seconds\{policy="counter"\}/, 'a local-only counter has no sync')
    const count = Number(
      /ratelimiting_decision_duration_seconds_count\{policy="fixed",algorithm="fixed-window-algo"\} (\d+)/.exec(text)?.[1],
    )
    const inf = Number(
      /ratelimiting_decision_duration_seconds_bucket\{le="\+Inf",policy="fixed",algorithm="fixed-window-algo"\} (\d+)/.exec(text)?.[1],
    )
    const decided = /ratelimiting_decisions_total\{policy="fixed",algorithm="fixed-window-algo",outcome="(?:allowed|denied)"\} (\d+)/g
    const total = [...text.matchAll(decided)].reduce((sum, m) => sum + Number(m[1]), 0)
    assert.ok(count >= 3, `the histogram counted the fixed-window decisions (${count})`)
    assert.equal(inf, count)
    assert.equal(total, count)
  })

  it('answers 404 for unknown routes and policies, 405 for wrong methods', async () => {
    assert.equal((await call(`${base}/v2/check`)).status, 404)
    const unknown = await check(base, { userId: 'u', policy: 'nope' })
    assert.equal(unknown.status, 404)
    assert.equal(errorCode(unknown), 'unknown_policy')
    assert.equal((await call(`${base}/v1/users/u?policy=nope`)).status, 404)
    const get = await call(`${base}/v1/check`)
    assert.equal(get.status, 405)
    assert.equal(get.headers.get('allow'), 'POST')
    assert.equal((await call(`${base}/v1/users/u`, { method: 'PUT' })).status, 405)
    assert.equal((await call(`${base}/healthz`, { method: 'POST' })).status, 405)
    assert.equal((await call(`${base}/v1/users/a/b`)).status, 404)
  })

  describe('bad input never crashes it nor counts', () => {
    const cases: Array<[string, string, RegExp]> = [
      ['malformed JSON', '{"userId": "u1"', /body must be JSON/],
      ['an empty body', '', /body must be JSON/],
      ['a JSON array', '["u1"]', /must be a JSON object/],
      ['JSON null', 'null', /must be a JSON object/],
      ['a missing userId', '{}', /userId is required/],
      ['a numeric userId', '{"userId": 42}', /userId must be a string, got number/],
      ['a null userId', '{"userId": null}', /userId must be a string, got null/],
      ['an empty userId', '{"userId": ""}', /userId must not be empty/],
      ['an over-long userId', JSON.stringify({ userId: 'x'.repeat(65) }), /at most 64 characters, got 65/],
      ['a control character in userId', '{"userId": "a\\u0000b"}', /control characters/],
      ['a string cost', '{"userId": "bad", "cost": "1"}', /cost must be an integer/],
      ['a zero cost', '{"userId": "bad", "cost": 0}', /cost must be an integer/],
      ['a fractional cost', '{"userId": "bad", "cost": 1.5}', /cost must be an integer/],
      ['a negative cost', '{"userId": "bad", "cost": -3}', /cost must be an integer/],
      ['a huge cost', '{"userId": "bad", "cost": 1e300}', /cost must be an integer/],
      ['a cost beyond a double', '{"userId": "bad", "cost": 1e400}', /cost must be an integer from 1 to 1000000, got a number too large$/],
      ['a cost below a double', '{"userId": "bad", "cost": -1e400}', /cost must be an integer from 1 to 1000000, got a number too small$/],
      ['a numeric policy', '{"userId": "bad", "policy": 7}', /policy must be a string/],
      // a misspelt policy field would check the default policy instead of the one meant
      ['a misspelt field', '{"userId": "bad", "Policy": "login"}', /unknown field "Policy"; the fields are userId, policy and cost$/],
    ]
    for (const [what, body, message] of cases) {
      it(`answers 400 to ${what}`, async () => {
        const a = await check(base, body)
        assert.equal(a.status, 400, JSON.stringify(a.body))
        assert.match(String(a.body?.message), message)
        assert.ok(errorCode(a) === 'invalid_json' || errorCode(a) === 'invalid_request')
      })
    }

    it('counted nothing for the refused requests', async () => {
      assert.equal((await call(`${base}/v1/users/bad`)).body?.count, 0)
    })

    it('answers 400 to a bad user id in the path', async () => {
      assert.equal((await call(`${base}/v1/users/%E0%A4%A`)).status, 400)
      assert.equal((await call(`${base}/v1/users/${'y'.repeat(65)}`)).status, 400)
      assert.equal((await call(`${base}/v1/users/a%00b`)).status, 400)
    })

    it('answers 413 to a body over max-body-bytes, declared or streamed', async () => {
      const big = JSON.stringify({ userId: 'big', pad: 'x'.repeat(2000) })
      const declared = await check(base, big)
      assert.equal(declared.status, 413)
      assert.equal(errorCode(declared), 'payload_too_large')
      // chunked: no Content-Length, the limit is found while reading
      const streamed = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(
          `${base}/v1/check`,
          { method: 'POST', headers: { 'transfer-encoding': 'chunked', 'content-type': 'application/json' } },
          (res) => {
            res.resume()
            resolve(res.statusCode ?? 0)
          },
        )
        req.on('error', reject)
        for (let i = 0; i < 4; i++) req.write('x'.repeat(500))
        req.end()
      })
      assert.equal(streamed, 413)
    })

    it('answers 415 to a body that is not sent as JSON, and counts nothing', async () => {
      for (const type of [undefined, 'text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=latin1']) {
        const headers: Record<string, string> = type === undefined ? {} : { 'content-type': type }
        const a = await call(`${base}/v1/check`, { method: 'POST', headers, body: JSON.stringify({ userId: 'typed' }) })
        assert.equal(a.status, 415, String(type))
        assert.equal(errorCode(a), 'unsupported_media_type')
        assert.match(String(a.body?.message), /the body must be JSON, sent with Content-Type: application\/json/)
      }
      assert.equal((await call(`${base}/v1/users/typed`)).body?.count, 0)
      for (const type of ['application/json; charset=utf-8', 'Application/JSON', 'application/json;charset="UTF-8"']) {
        const a = await call(`${base}/v1/check`, {
          method: 'POST',
          headers: { 'content-type': type },
          body: JSON.stringify({ userId: 'typed' }),
        })
        assert.equal(a.status, 200, type)
      }
    })

    it('survives garbage that is not HTTP', async () => {
      const out = await raw(base, 'HELLO\r\n\r\n')
      assert.match(out, /^HTTP\/1\.1 400/)
      assert.equal((await call(`${base}/healthz`)).status, 200)
    })
  })
})

describe('service HTTP API with auth', { timeout: 60_000 }, () => {
  let t: TestService
  let base: string
  before(async () => {
    t = await startTestService(`${CONFIG}\nauth: { tokens: [${CLIENT}], admin-tokens: [${ADMIN}] }\n`)
    base = t.url
  })
  after(() => t.close())

  it('answers 401 without a token or with a wrong one', async () => {
    const none = await check(base, { userId: 'a1' })
    assert.equal(none.status, 401)
    assert.equal(none.headers.get('www-authenticate'), 'Bearer realm="ratelimiting"')
    assert.equal((await check(base, { userId: 'a1' }, { authorization: 'Bearer wrong-token-000' })).status, 401)
    assert.equal((await check(base, { userId: 'a1' }, { authorization: CLIENT })).status, 401, 'the Bearer scheme is required')
    assert.equal((await call(`${base}/v1/users/a1`)).status, 401)
  })

  it('decides with a client or an admin token', async () => {
    assert.equal((await check(base, { userId: 'a2' }, { authorization: `Bearer ${CLIENT}` })).status, 200)
    assert.equal((await check(base, { userId: 'a2' }, { authorization: `bearer ${ADMIN}` })).status, 200)
    assert.equal(
      (
        await call(`${base}/v1/users/a2`, {
          headers: { authorization: `Bearer ${CLIENT}` },
        })
      ).body?.count,
      2,
    )
  })

  it('lets only admin tokens reset', async () => {
    const client = await call(`${base}/v1/users/a2`, {
      method: 'DELETE',
      headers: { authorization: `Bearer ${CLIENT}` },
    })
    assert.equal(client.status, 403)
    assert.equal(errorCode(client), 'forbidden')
    assert.equal((await call(`${base}/v1/users/a2`, { method: 'DELETE' })).status, 401)
    assert.equal(
      (
        await call(`${base}/v1/users/a2`, {
          method: 'DELETE',
          headers: { authorization: `Bearer ${ADMIN}` },
        })
      ).status,
      204,
    )
  })

  it('takes a token with spaces inside as a request presents it; refuses to start with one no request can present', async () => {
    const spaced = await startTestService(`${CONFIG}\nauth: { tokens: ["token with spaces"] }\n`)
    try {
      assert.equal((await check(spaced.url, { userId: 'a3' }, { authorization: 'Bearer token with spaces ' })).status, 200)
    } finally {
      await spaced.close()
    }
    for (const token of ['spaced-token  ', 'tökén-1234'])
      await assert.rejects(
        startTestService(`${CONFIG}\nauth: { tokens: ["${token}"] }\n`),
        (err: unknown) => err instanceof ConfigFileError && /auth\.tokens\.0: must be visible ASCII characters/.test(err.message),
      )
  })

  it('keeps /healthz, /readyz and /metrics open for probes and scrapers', async () => {
    assert.equal((await call(`${base}/healthz`)).status, 200)
    assert.equal((await call(`${base}/readyz`)).status, 200)
    assert.equal((await fetch(`${base}/metrics`)).status, 200)
  })
})
