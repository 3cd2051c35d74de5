/**
 * Redis keys (docs/SERVICE.md, "Redis keys"): the default policy writes the RLaaS seed's exact
 * keys, a named policy keys of its own, and no user id of one policy or algorithm can reach the
 * key of another — checked by the attacks that used to work (counts shared between policies, a
 * reset of one policy resetting another, a short window pruning a long one's log) over real
 * HTTP, on Redis and on the memory store.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { RedisFixedWindow, RedisSlidingLog } from '../../src/algorithms/index.js'
import { createFakeClock, type FakeClock } from '../../src/core/clock.js'
import { ConfigError } from '../../src/core/errors.js'
import {
  call,
  check,
  deleteKeys,
  keysUnder,
  type OwnRedis,
  SHARED_REDIS_URL,
  startOwnRedis,
  startTestService,
  type TestService,
  uniquePrefix,
} from './server-helpers.js'

// bucket 29923298 of a 60 s window, 5 s in
const T0 = 29_923_298 * 60_000 + 5_000
// 5 s into the current minute's bucket: the engine's Redis keys expire on the real clock
const NOW_BUCKET = Math.floor(Date.now() / 60_000)
const NOW = NOW_BUCKET * 60_000 + 5_000

describe('the seed algorithms write the seed exact keys', { timeout: 30_000 }, () => {
  // a Redis of our own: the keys under the seed's own prefix must not meet another run's
  let own: OwnRedis
  let redis: Redis
  before(async () => {
    own = await startOwnRedis()
    redis = new Redis(own.url)
  })
  after(async () => {
    redis?.disconnect()
    await own?.kill()
  })

  it('fixed window: rlaas:rate_limit:u1:29923298, a STRING with EXPIRE window-size', async () => {
    const clock = createFakeClock(T0)
    const fw = new RedisFixedWindow({ client: redis, limit: 3, windowMs: 60_000, clock: clock.now })
    await fw.check('u1')
    assert.deepEqual(await redis.keys('*'), ['rlaas:rate_limit:u1:29923298'])
    assert.equal(await redis.type('rlaas:rate_limit:u1:29923298'), 'string')
    assert.equal(await redis.get('rlaas:rate_limit:u1:29923298'), '1')
    assert.equal(await redis.ttl('rlaas:rate_limit:u1:29923298'), 60)
    await redis.flushall()
  })

  it('sliding log: rlaas:rate_limit:u1, a ZSET with one member per request', async () => {
    const clock = createFakeClock(T0)
    const log = new RedisSlidingLog({ client: redis, limit: 3, windowMs: 60_000, clock: clock.now })
    await log.check('u1')
    await log.check('u1')
    assert.deepEqual(await redis.keys('*'), ['rlaas:rate_limit:u1'])
    assert.equal(await redis.type('rlaas:rate_limit:u1'), 'zset')
    assert.equal(await redis.zcard('rlaas:rate_limit:u1'), 2)
    await redis.flushall()
  })

  it('counts the logs and counters a deployment of the seed system left', async () => {
    const clock = createFakeClock(T0)
    // what the seed's scripts write: members "<ms>-<math.random()>", an INCR'd string
    await redis.zadd('rlaas:rate_limit:u2', T0 - 1_000, `${T0 - 1_000}-0.31`, T0 - 500, `${T0 - 500}-0.77`)
    await redis.set('rlaas:rate_limit:u2:29923298', '2', 'EX', 60)
    const log = new RedisSlidingLog({ client: redis, limit: 3, windowMs: 60_000, clock: clock.now })
    const fw = new RedisFixedWindow({ client: redis, limit: 3, windowMs: 60_000, clock: clock.now })
    assert.deepEqual([(await log.check('u2')).count, (await log.check('u2')).allowed], [3, false])
    assert.deepEqual([(await fw.check('u2')).count, (await fw.check('u2')).allowed], [3, false])
    await redis.flushall()
  })

  it('wraps the user id in braces only when hashTag is asked for', async () => {
    const clock = createFakeClock(T0)
    const fw = new RedisFixedWindow({ client: redis, limit: 3, windowMs: 60_000, clock: clock.now, hashTag: true })
    const log = new RedisSlidingLog({ client: redis, limit: 3, windowMs: 60_000, clock: clock.now, hashTag: true })
    await fw.check('u1')
    await log.check('u1')
    assert.deepEqual((await redis.keys('*')).sort(), ['rlaas:rate_limit:{u1}', 'rlaas:rate_limit:{u1}:29923298'])
    await redis.flushall()
  })

  it('gives a scope its own keys: <prefix>@<scope>:fixed:… and <prefix>@<scope>:log:…', async () => {
    const clock = createFakeClock(T0)
    const fw = new RedisFixedWindow({ client: redis, limit: 3, windowMs: 60_000, clock: clock.now, scope: 'login' })
    const log = new RedisSlidingLog({ client: redis, limit: 3, windowMs: 60_000, clock: clock.now, scope: 'login' })
    await fw.check('u1')
    await log.check('u1')
    assert.deepEqual((await redis.keys('*')).sort(), ['rlaas:rate_limit@login:fixed:u1:29923298', 'rlaas:rate_limit@login:log:u1'])
    assert.throws(
      () => new RedisSlidingLog({ client: redis, limit: 3, windowMs: 60_000, scope: 'a:b' }),
      (err: unknown) => err instanceof ConfigError && /scope must be letters, digits/.test(err.message),
    )
    await redis.flushall()
  })
})

const POLICIES = `
policies:
  sl5: { use-algo: sliding-window-algo, max-requests: 5 }
  sl10s: { use-algo: sliding-window-algo, max-requests: 5, window-size: 10 }
  login: { use-algo: fixed-window-algo, max-requests: 5 }
  counter: { use-algo: sliding-window-counter-algo, max-requests: 5, sync-rate: 0 }
`
const ALL = ['default', 'sl5', 'sl10s', 'login', 'counter']

async function countOf(base: string, user: string, policy: string): Promise<unknown> {
  const a = await call(`${base}/v1/users/${encodeURIComponent(user)}?policy=${policy}`)
  assert.equal(a.status, 200, `GET ${user} on ${policy}: ${JSON.stringify(a.body)}`)
  return a.body?.count
}

async function hit(base: string, user: string, policy: string): Promise<number> {
  const a = await check(base, { userId: user, policy })
  assert.ok(a.status === 200 || a.status === 429, `${user} on ${policy}: ${a.status} ${JSON.stringify(a.body)}`)
  return a.status
}

for (const store of ['redis', 'memory'] as const) {
  describe(`policies never share counts (${store} store, over HTTP)`, { timeout: 60_000 }, () => {
    const prefix = uniquePrefix()
    let redis: Redis
    let t: TestService
    let clock: FakeClock
    before(async () => {
      redis = new Redis(SHARED_REDIS_URL)
      clock = createFakeClock(NOW)
      const storeSection = store === 'redis' ? `store: { type: redis, url: "${SHARED_REDIS_URL}" }` : 'store: { type: memory }'
      t = await startTestService(
        `rate-limiter: { use-algo: sliding-window-algo, max-requests: 5, window-size: 60, key-prefix: "${prefix}" }\n${POLICIES}${storeSection}\n`,
        { clock: clock.now },
      )
    })
    after(async () => {
      await t?.close()
      await deleteKeys(redis, prefix)
      redis.disconnect()
    })

    it('3 hits on default are not visible on sl5, and a reset of sl5 leaves default alone', async () => {
      for (let i = 0; i < 3; i++) await hit(t.url, 'shared-1', 'default')
      assert.equal(await countOf(t.url, 'shared-1', 'sl5'), 0)
      await hit(t.url, 'shared-1', 'sl5')
      assert.equal((await call(`${t.url}/v1/users/shared-1?policy=sl5`, { method: 'DELETE' })).status, 204)
      assert.equal(await countOf(t.url, 'shared-1', 'default'), 3)
      assert.equal(await countOf(t.url, 'shared-1', 'sl5'), 0)
    })

    it('a hit on a 10 s policy does not prune the 60 s policy log', async () => {
      for (let i = 0; i < 3; i++) await hit(t.url, 'shared-2', 'default')
      clock.advance(11_000)
      await hit(t.url, 'shared-2', 'sl10s')
      assert.equal(await countOf(t.url, 'shared-2', 'default'), 3)
    })

    it('no crafted user id reaches the key of another policy or algorithm', async () => {
      const victim = 'u1'
      for (const policy of ALL) for (let i = 0; i < 2; i++) await hit(t.url, victim, policy)
      const start = NOW_BUCKET * 60
      const crafted = [
        // what another policy's or algorithm's key would hold after the prefix, with and without the separators
        `login:${victim}`,
        `sl5:${victim}`,
        `@login:fixed:${victim}:${NOW_BUCKET}`,
        `@sl5:log:${victim}`,
        `login:fixed:${victim}:${NOW_BUCKET}`,
        `sl5:log:${victim}`,
        `#counter:{counter:${victim}}:60:${start}`,
        `counter:{counter:${victim}}:60:${start}`,
        `${victim}:${NOW_BUCKET}`,
        `{${victim}}`,
        `{${victim}}:${NOW_BUCKET}`,
      ]
      for (const user of crafted) for (const policy of ALL) for (let i = 0; i < 6; i++) await hit(t.url, user, policy)
      for (const user of crafted) {
        const del = await call(`${t.url}/v1/users/${encodeURIComponent(user)}?policy=login`, { method: 'DELETE' })
        assert.equal(del.status, 204)
      }
      for (const policy of ALL) assert.equal(await countOf(t.url, victim, policy), 2, `${victim} on ${policy}`)
      if (store === 'redis') {
        // every key holds what its owner expects: a STRING only where a fixed window writes
        const keys = await keysUnder(redis, prefix)
        for (const key of keys) {
          const type = await redis.type(key)
          const expected = key.startsWith(`${prefix}#counter:`) ? 'hash' : key.startsWith(`${prefix}@login:fixed:`) ? 'string' : 'zset'
          assert.equal(type, expected, key)
        }
      }
    })
  })
}

describe('switching use-algo on the default policy (Redis)', { timeout: 60_000 }, () => {
  const prefix = uniquePrefix()
  let redis: Redis
  let t: TestService
  const clock = createFakeClock(NOW)
  const yaml = (algo: string) =>
    `rate-limiter: { use-algo: ${algo}, max-requests: 3, window-size: 60, key-prefix: "${prefix}" }\nstore: { type: redis, url: "${SHARED_REDIS_URL}" }\n`
  before(async () => {
    redis = new Redis(SHARED_REDIS_URL)
    t = await startTestService(yaml('sliding-window-algo'), { clock: clock.now })
  })
  after(async () => {
    await t?.close()
    await deleteKeys(redis, prefix)
    redis.disconnect()
  })

  it('to the fixed window: a leftover log under the counter key is replaced, the user is counted from 1', async () => {
    // sliding-log user "v1:<bucket>" owns <prefix>:v1:<bucket>, the name of v1's next fixed-window counter
    await hit(t.url, `v1:${NOW_BUCKET}`, 'default')
    assert.equal(await redis.type(`${prefix}:v1:${NOW_BUCKET}`), 'zset')
    t.write(yaml('fixed-window-algo'))
    assert.equal(await t.service.reload(), true)
    assert.equal(await countOf(t.url, 'v1', 'default'), 0)
    const a = await check(t.url, { userId: 'v1' })
    assert.deepEqual([a.status, a.body?.count], [200, 1])
    assert.equal(await redis.type(`${prefix}:v1:${NOW_BUCKET}`), 'string')
  })

  it('to the sliding log: a user whose log key is a live fixed-window counter is denied, and writes nothing', async () => {
    // fixed-window user v2 owns <prefix>:v2:<bucket>: sliding-log user "v2:<bucket>" names it
    await hit(t.url, 'v2', 'default')
    await hit(t.url, 'v2', 'default')
    t.write(yaml('sliding-window-algo'))
    assert.equal(await t.service.reload(), true)
    const a = await check(t.url, { userId: `v2:${NOW_BUCKET}` })
    assert.equal(a.status, 429, JSON.stringify(a.body))
    assert.ok((a.body?.retryAfterMs as number) > 50_000 && (a.body?.retryAfterMs as number) <= 60_000, 'until the counter expires')
    assert.equal((await call(`${t.url}/v1/users/${encodeURIComponent(`v2:${NOW_BUCKET}`)}`)).status, 200)
    assert.equal((await call(`${t.url}/v1/users/${encodeURIComponent(`v2:${NOW_BUCKET}`)}`, { method: 'DELETE' })).status, 204)
    assert.equal(await redis.get(`${prefix}:v2:${NOW_BUCKET}`), '2', "v2's counter is untouched, by the check and by the reset")
  })
})
