/**
 * Deny and allow lists against the shared Redis (a unique prefix per run, deleted after): the
 * limiter in synchronous and periodic mode on a RedisStrategy makes no store call for a listed
 * key, and the service over real HTTP applies the lists of its YAML before every algorithm, on
 * /v1/check, /v1/users and /v1/forward-auth, with the `reason` field and the metrics' outcomes.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import type { Decision } from '../../src/core/limiter.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { parseConfig } from '../../src/server/config.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { sharedRedisUrl } from '../support/redis-server.js'
import { call, check, deleteKeys, keysUnder, startTestService, type TestService, uniquePrefix } from './server-helpers.js'

const url = await sharedRedisUrl()

describe('limiter lists on Redis', { timeout: 60_000 }, () => {
  const redis = new Redis(url)
  const prefix = uniquePrefix()
  after(async () => {
    await deleteKeys(redis, prefix)
    redis.disconnect()
  })

  for (const [mode, syncRate] of [
    ['synchronous', 0],
    ['periodic', 0.05],
  ] as const) {
    it(`${mode}: a listed key makes no store call and writes no key; an unlisted one does`, async () => {
      const strategy = new RedisStrategy({ client: redis, prefix: `${prefix}:${mode}` })
      const calls = { n: 0 }
      for (const method of ['pushDiffs', 'getCounters', 'getWindow', 'resetKey'] as const) {
        const original = (strategy as unknown as Record<string, (...a: unknown[]) => unknown>)[method]
        if (typeof original !== 'function') continue
        ;(strategy as unknown as Record<string, unknown>)[method] = (...args: unknown[]) => {
          calls.n++
          return original.apply(strategy, args)
        }
      }
      const rl = RateLimiting.newInstance(`lists-redis-${mode}`)
      rl.new({ namespace: 'api', windowSizes: [60], syncRate, strategy, autoSync: false }) // the real clock: Redis expires keys by it
      const limiter = rl.limiter({
        namespace: 'api',
        limits: [{ limit: 2, window: 60 }],
        denyList: ['10.0.0.0/8', 'bad-user'],
        allowList: ['2001:db8::/32', 'vip'],
      })
      const decide = async (key: string): Promise<Decision> => await limiter.hit(key)
      for (let i = 0; i < 4; i++) {
        assert.deepEqual([(await decide('10.4.5.6')).reason, (await decide('bad-user')).allowed], ['denylist', false])
        const vip = await decide('2001:db8::77')
        assert.deepEqual([vip.allowed, vip.reason, vip.remaining], [true, 'allowlist', 2])
        assert.equal(await limiter.allow('vip'), true)
        assert.equal((await limiter.peek('vip')).reason, 'allowlist')
      }
      await rl.sync('api')
      const listedCalls = calls.n
      const written = await keysUnder(redis, `${prefix}:${mode}`)
      assert.deepEqual(
        written.filter((k) => /10\.4\.5\.6|bad-user|2001:db8|vip/.test(k)),
        [],
        'no key of a listed key',
      )
      const d = await decide('plain')
      await rl.sync('api')
      assert.equal(d.reason, 'limit')
      assert.ok(calls.n > listedCalls, 'an unlisted key reaches the store')
      // a full sync refreshes held keys: only 'plain' is held
      assert.ok(
        (await keysUnder(redis, `${prefix}:${mode}`)).some((k) => k.includes('plain')),
        'the unlisted key is written',
      )
      if (mode === 'synchronous') assert.equal(listedCalls, 0, 'synchronous: not one store call for 16 listed hits')
      await rl.close()
    })
  }
})

function yamlFor(prefix: string): string {
  return `
rate-limiter:
  use-algo: sliding-window-algo
  max-requests: 2
  window-size: 60
  key-prefix: ${prefix}
  deny-list: [bad-user, 10.0.0.0/8, "2001:db8::/32"]
  allow-list: [vip, 192.168.0.0/16]
policies:
  fixed: { use-algo: fixed-window-algo }
  counter: { use-algo: sliding-window-counter-algo, sync-rate: 0 }
  open: { deny-list: [] }
  shadow: { shadow-mode: true }
store: { type: redis, url: ${url} }
forward-auth: { key-header: x-real-ip }
`
}

describe('service lists on Redis', { timeout: 60_000 }, () => {
  const redis = new Redis(url)
  const prefix = uniquePrefix()
  let t: TestService
  before(async () => {
    t = await startTestService(yamlFor(prefix))
  })
  after(async () => {
    await t?.close()
    await deleteKeys(redis, prefix)
    redis.disconnect()
  })

  for (const policy of ['default', 'fixed', 'counter']) {
    it(`${policy}: denies a deny-listed key (429, reason denylist) and never counts an allow-listed one`, async () => {
      for (const userId of ['bad-user', '10.1.1.1', '2001:db8::5', '::ffff:10.9.9.9']) {
        const r = await check(t.url, { userId, policy })
        assert.equal(r.status, 429, userId)
        assert.deepEqual(r.body, { allowed: false, count: 0, limit: 2, remaining: 0, resetMs: 0, retryAfterMs: null, reason: 'denylist' })
        assert.equal(r.headers.get('retry-after'), null, 'no wait admits a deny-listed key')
        assert.equal(r.headers.get('ratelimit'), `"${policy}";r=0;t=0`)
      }
      for (let i = 0; i < 5; i++) {
        const r = await check(t.url, { userId: 'vip', policy })
        assert.deepEqual([r.status, r.body?.reason, r.body?.remaining], [200, 'allowlist', 2])
      }
      const ip = await check(t.url, { userId: '192.168.7.7', policy, cost: 2 })
      assert.deepEqual([ip.status, ip.body?.reason], [200, 'allowlist'])
      const read = await call(`${t.url}/v1/users/vip?policy=${policy}`)
      assert.deepEqual([read.status, read.body?.count, read.body?.reason], [200, 0, 'allowlist'])
      const keys = await keysUnder(redis, prefix)
      assert.deepEqual(
        keys.filter((k) => /vip|bad-user|10\.1\.1\.1|192\.168|2001:db8/.test(k)),
        [],
        'no Redis key for a listed user',
      )
      const plain = [await check(t.url, { userId: `plain-${policy}`, policy }), await check(t.url, { userId: `plain-${policy}`, policy })]
      const third = await check(t.url, { userId: `plain-${policy}`, policy })
      assert.deepEqual(
        [...plain, third].map((r) => [r.status, r.body?.reason]),
        [
          [200, 'limit'],
          [200, 'limit'],
          [429, 'limit'],
        ],
      )
    })
  }

  it('lets a policy clear the inherited deny list with deny-list: []', async () => {
    const r = await check(t.url, { userId: 'bad-user', policy: 'open' })
    assert.deepEqual([r.status, r.body?.reason], [200, 'limit'])
    assert.equal((await check(t.url, { userId: 'vip', policy: 'open' })).body?.reason, 'allowlist', 'the allow list is still inherited')
  })

  it('answers a deny-listed key as a shadow denial in shadow mode', async () => {
    const r = await check(t.url, { userId: 'bad-user', policy: 'shadow' })
    assert.deepEqual([r.status, r.body?.shadowDenied, r.body?.reason], [200, true, 'denylist'])
  })

  it('applies the lists on /v1/forward-auth to the key header', async () => {
    const denied = await call(`${t.url}/v1/forward-auth`, { headers: { 'x-real-ip': '10.20.30.40' } })
    assert.deepEqual([denied.status, denied.body?.reason], [403, 'denylist'])
    for (let i = 0; i < 4; i++) {
      const ok = await call(`${t.url}/v1/forward-auth/fixed`, { headers: { 'x-real-ip': '192.168.1.1' } })
      assert.deepEqual([ok.status, ok.body?.reason], [200, 'allowlist'])
    }
  })

  it('counts listed decisions under the outcomes denylist and allowlist', async () => {
    const text = await (await fetch(`${t.url}/metrics`)).text()
    assert.match(text, /ratelimiting_decisions_total\{policy="default",algorithm="sliding-window-algo",outcome="denylist"\} [1-9]/)
    assert.match(text, /ratelimiting_decisions_total\{policy="fixed",algorithm="fixed-window-algo",outcome="allowlist"\} [1-9]/)
    assert.match(text, /ratelimiting_decisions_total\{policy="counter",algorithm="sliding-window-counter-algo",outcome="denylist"\} [1-9]/)
  })
})

describe('service lists: config errors', () => {
  it('rejects a malformed CIDR range with file:line:col and the entry key path', () => {
    const yaml = [
      'rate-limiter:',
      '  deny-list:',
      '    - ok-key',
      '    - 10.0.0.0/33',
      'policies:',
      '  p: { allow-list: ["2001:db8::/200"] }',
      'store: { type: memory }',
      '',
    ].join('\n')
    assert.throws(
      () => parseConfig(yaml, 'lists.yaml'),
      (err: Error) =>
        /^lists\.yaml:4:7: rate-limiter\.deny-list\.1: "10\.0\.0\.0\/33": the prefix length must be a whole number from 0 to 32, got "33"$/m.test(
          err.message,
        ) && /^lists\.yaml:6:\d+: policies\.p\.allow-list\.0: "2001:db8::\/200": .*0 to 128/m.test(err.message),
    )
  })

  it('rejects an entry that is not a string through the schema', () => {
    assert.throws(
      () => parseConfig('rate-limiter: { allow-list: [42] }\nstore: { type: memory }\n', 'lists.yaml'),
      /rate-limiter\.allow-list\.0: must be a string, got 42/,
    )
  })

  it('refuses to start a service whose YAML has a bad range', async () => {
    await assert.rejects(
      startTestService('rate-limiter: { deny-list: ["300.0.0.1/8"] }\nstore: { type: memory }\n'),
      /rate-limiter\.deny-list\.0: "300\.0\.0\.1\/8": "300\.0\.0\.1" is not a valid IPv4 or IPv6 address/,
    )
  })
})
