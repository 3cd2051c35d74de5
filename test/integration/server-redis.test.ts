/**
 * The seed algorithms on the shared Redis (a unique key prefix per run, deleted after): the
 * exact key names, types and TTLs checked in Redis itself, the same decisions as the memory
 * versions, and exactly `limit` admitted out of 200 concurrent requests through the service.
 */
import assert from 'node:assert/strict'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { MemoryFixedWindow, MemorySlidingLog, RedisFixedWindow, RedisSlidingLog } from '../../src/algorithms/index.js'
import type { RateLimitAlgorithm } from '../../src/algorithms/types.js'
import { createFakeClock } from '../../src/core/clock.js'
import {
  call,
  check,
  delay,
  deleteKeys,
  keysUnder,
  SHARED_REDIS_URL,
  startOwnRedis,
  startTestService,
  type TestService,
  uniquePrefix,
} from './server-helpers.js'
import { seededRandom } from '../support/random.js'

const MINUTE = 1_699_999_980_000

describe('seed algorithms on Redis', { timeout: 60_000 }, () => {
  let redis: Redis
  const prefix = uniquePrefix()
  before(() => {
    redis = new Redis(SHARED_REDIS_URL)
  })
  after(async () => {
    await deleteKeys(redis, prefix)
    redis.disconnect()
  })

  it('fixed window: a STRING at <prefix>:<userId>:<window> with INCR and EXPIRE window-size', async () => {
    const clock = createFakeClock(MINUTE + 5_000)
    const fw = new RedisFixedWindow({
      client: redis,
      limit: 3,
      windowMs: 60_000,
      prefix,
      clock: clock.now,
    })
    await fw.check('u1')
    const key = `${prefix}:u1:${Math.floor((MINUTE + 5_000) / 60_000)}`
    assert.equal(key, `${prefix}:u1:28333333`)
    assert.deepEqual(await keysUnder(redis, `${prefix}:u1`), [key])
    assert.equal(await redis.type(key), 'string')
    assert.equal(await redis.get(key), '1')
    assert.equal(await redis.ttl(key), 60)
  })

  it('fixed window: sets the expiry only when the key is created', async () => {
    const clock = createFakeClock(MINUTE)
    const fw = new RedisFixedWindow({
      client: redis,
      limit: 10,
      windowMs: 60_000,
      prefix,
      clock: clock.now,
    })
    await fw.check('u2')
    const key = fw.key('u2')
    await redis.pexpire(key, 5_000)
    await fw.check('u2')
    await fw.check('u2')
    const pttl = await redis.pttl(key)
    assert.ok(pttl > 0 && pttl <= 5_000, `the later INCRs kept the TTL (${pttl} ms)`)
    assert.equal(await redis.get(key), '3')
  })

  it('fixed window: a new key per bucket, and 2 x limit across a boundary', async () => {
    const clock = createFakeClock(MINUTE + 59_900)
    const fw = new RedisFixedWindow({
      client: redis,
      limit: 5,
      windowMs: 60_000,
      prefix,
      clock: clock.now,
    })
    let admitted = 0
    for (let i = 0; i < 6; i++) if ((await fw.check('u3')).allowed) admitted++
    clock.advance(200)
    for (let i = 0; i < 6; i++) if ((await fw.check('u3')).allowed) admitted++
    assert.equal(admitted, 10)
    const keys = await keysUnder(redis, `${prefix}:u3`)
    assert.deepEqual(
      keys.map((k) => k.split(':').pop()),
      ['28333333', '28333334'],
    )
    assert.equal(await redis.get(keys[0] as string), '6', 'denied requests count, as with INCR')
  })

  it('sliding log: a ZSET at <prefix>:<userId> scored by ms, unique members, PEXPIRE 2 x window', async () => {
    const clock = createFakeClock(MINUTE)
    const log = new RedisSlidingLog({
      client: redis,
      limit: 5,
      windowMs: 60_000,
      prefix,
      clock: clock.now,
    })
    // the same millisecond three times: members must still be distinct
    await Promise.all([log.check('u4'), log.check('u4'), log.check('u4')])
    const key = `${prefix}:u4`
    assert.equal(log.key('u4'), key)
    assert.equal(await redis.type(key), 'zset')
    const entries = await redis.zrange(key, '0', '-1', 'WITHSCORES')
    const scores = entries.filter((_, i) => i % 2 === 1)
    assert.deepEqual(scores, [String(MINUTE), String(MINUTE), String(MINUTE)])
    assert.equal(new Set(entries.filter((_, i) => i % 2 === 0)).size, 3)
    const pttl = await redis.pttl(key)
    assert.ok(pttl > 119_000 && pttl <= 120_000, `PEXPIRE 2 x window, got ${pttl}`)
  })

  it('sliding log: prunes entries a window old and logs only admitted requests', async () => {
    const clock = createFakeClock(MINUTE)
    const log = new RedisSlidingLog({
      client: redis,
      limit: 2,
      windowMs: 10_000,
      prefix,
      clock: clock.now,
    })
    await log.check('u5')
    clock.advance(4_000)
    await log.check('u5')
    const denied = await log.check('u5')
    assert.equal(denied.allowed, false)
    assert.equal(denied.retryAfterMs, 6_000)
    assert.equal(await redis.zcard(`${prefix}:u5`), 2)
    clock.advance(6_000)
    assert.equal((await log.check('u5')).allowed, true)
    const scores = (await redis.zrange(`${prefix}:u5`, '0', '-1', 'WITHSCORES')).filter((_, i) => i % 2 === 1)
    assert.deepEqual(scores, [String(MINUTE + 4_000), String(MINUTE + 10_000)])
  })

  it('peek reads without writing, reset deletes the key', async () => {
    const clock = createFakeClock(MINUTE)
    const log = new RedisSlidingLog({
      client: redis,
      limit: 2,
      windowMs: 10_000,
      prefix,
      clock: clock.now,
    })
    const fw = new RedisFixedWindow({
      client: redis,
      limit: 2,
      windowMs: 10_000,
      prefix,
      clock: clock.now,
    })
    await log.check('u6')
    await fw.check('u6')
    assert.equal((await log.peek('u6')).count, 1)
    assert.equal((await fw.peek('u6')).count, 1)
    assert.equal(await redis.zcard(`${prefix}:u6`), 1)
    assert.equal((await log.peek('never-seen')).count, 0)
    assert.equal(await redis.exists(`${prefix}:never-seen`), 0)
    await log.reset('u6')
    await fw.reset('u6')
    assert.deepEqual(await keysUnder(redis, `${prefix}:u6`), [])
  })

  it('decides exactly as the memory versions for the same requests and clock', async () => {
    const clock = createFakeClock(MINUTE + 1_234)
    const pairs: Array<[string, RateLimitAlgorithm, RateLimitAlgorithm]> = [
      [
        'fixed window',
        new MemoryFixedWindow({ limit: 7, windowMs: 5_000, clock: clock.now }),
        new RedisFixedWindow({
          client: redis,
          limit: 7,
          windowMs: 5_000,
          prefix,
          clock: clock.now,
        }),
      ],
      [
        'sliding log',
        new MemorySlidingLog({ limit: 7, windowMs: 5_000, clock: clock.now }),
        new RedisSlidingLog({
          client: redis,
          limit: 7,
          windowMs: 5_000,
          prefix,
          clock: clock.now,
        }),
      ],
    ]
    const random = seededRandom(42)
    for (let step = 0; step < 150; step++) {
      clock.advance(Math.floor(random() * 700))
      const cost = random() < 0.8 ? 1 : 1 + Math.floor(random() * 8)
      const user = random() < 0.7 ? 'diff-a' : 'diff-b'
      const peek = random() < 0.3
      for (const [name, memory, onRedis] of pairs) {
        const expected = await memory.check(user, cost)
        const actual = await onRedis.check(user, cost)
        assert.deepEqual(actual, expected, `${name}, step ${step}, cost ${cost}`)
        // a read in between: the same answer, and it changes neither count
        if (peek) assert.deepEqual(await onRedis.peek(user), await memory.peek(user), `${name}, step ${step}, peek`)
      }
    }
  })
})

describe('service on Redis', { timeout: 60_000 }, () => {
  let t: TestService
  let redis: Redis
  const prefix = uniquePrefix()
  before(async () => {
    redis = new Redis(SHARED_REDIS_URL)
    t = await startTestService(`
rate-limiter: { use-algo: sliding-window-algo, max-requests: 50, window-size: 60, key-prefix: "${prefix}" }
policies:
  fixed: { use-algo: fixed-window-algo, window-size: 3600 }
  counter: { use-algo: sliding-window-counter-algo, max-requests: 5, sync-rate: 0.05 }
  counter-sync: { use-algo: sliding-window-counter-algo, max-requests: 3, sync-rate: 0 }
store: { type: redis, url: "${SHARED_REDIS_URL}" }
`)
  })
  after(async () => {
    await t?.close()
    await deleteKeys(redis, prefix)
    redis.disconnect()
  })

  it('writes the seed key formats, types and TTLs for the default policy, keys of its own for a named one', async () => {
    await check(t.url, { userId: 'svc-1' })
    await check(t.url, { userId: 'svc-1', policy: 'fixed' })
    const window = Math.floor(Date.now() / 3_600_000)
    assert.deepEqual(await keysUnder(redis, `${prefix}:svc-1`), [`${prefix}:svc-1`], 'the default sliding log: the seed key')
    assert.equal(await redis.type(`${prefix}:svc-1`), 'zset')
    const pttl = await redis.pttl(`${prefix}:svc-1`)
    assert.ok(pttl > 119_000 && pttl <= 120_000, `PEXPIRE 2 x window, got ${pttl}`)
    const fixedKeys = await keysUnder(redis, `${prefix}@fixed:fixed:svc-1:`)
    assert.equal(fixedKeys.length, 1, fixedKeys.join(' '))
    const fixedKey = fixedKeys[0] as string
    assert.ok([`${window}`, `${window - 1}`].includes(fixedKey.split(':').pop() as string), fixedKey)
    assert.equal(await redis.type(fixedKey), 'string')
    const ttl = await redis.ttl(fixedKey)
    assert.ok(ttl > 3590 && ttl <= 3600, `EXPIRE window-size, got ${ttl}`)
  })

  for (const policy of ['default', 'fixed']) {
    it(`admits exactly 50 of 200 concurrent requests for one user (${policy === 'default' ? 'sliding log' : 'fixed window'})`, async () => {
      // keep all 200 inside one fixed bucket: wait out the last seconds of an hour
      const left = 3_600_000 - (Date.now() % 3_600_000)
      if (left < 10_000) await delay(left + 50)
      const user = `burst-${policy}`
      const answers = await Promise.all(Array.from({ length: 200 }, () => check(t.url, { userId: user, policy })))
      const statuses = answers.map((a) => a.status)
      assert.equal(statuses.filter((s) => s === 200).length, 50)
      assert.equal(statuses.filter((s) => s === 429).length, 150)
      const remaining = answers.filter((a) => a.status === 200).map((a) => a.body?.remaining as number)
      assert.deepEqual(
        [...remaining].sort((a, b) => a - b),
        Array.from({ length: 50 }, (_, i) => i),
        'each admitted request got its own slot',
      )
      const peek = await call(`${t.url}/v1/users/${user}?policy=${policy}`)
      if (policy === 'fixed') {
        // the seed's INCR counts every denied request that reaches Redis; those sent after a
        // denial came back are answered by the service without Redis (rememberDenials)
        const count = peek.body?.count as number
        assert.ok(count > 50 && count <= 200, `count ${count}`)
      } else assert.equal(peek.body?.count, 50)
    })
  }

  it('answers a denied user without Redis while the denial holds, counts it in /metrics, and forgets it on a reset', async () => {
    const left = 3_600_000 - (Date.now() % 3_600_000)
    if (left < 10_000) await delay(left + 50)
    const metric = async () => {
      const text = (await fetch(`${t.url}/metrics`).then((r) => r.text())).split('\n')
      const line = text.find((l) => l.startsWith('ratelimiting_local_denials_total{policy="fixed"}'))
      return Number(line?.split(' ')[1] ?? Number.NaN)
    }
    const user = 'remembered'
    for (let i = 0; i < 50; i++) assert.equal((await check(t.url, { userId: user, policy: 'fixed' })).status, 200)
    const localBefore = await metric()
    const answers = []
    for (let i = 0; i < 4; i++) answers.push(await check(t.url, { userId: user, policy: 'fixed' }))
    assert.deepEqual(
      answers.map((a) => a.status),
      [429, 429, 429, 429],
    )
    assert.equal(await metric(), localBefore + 3, 'the first denial came from Redis, the next three from the service')
    const key = (await keysUnder(redis, `${prefix}@fixed:fixed:${user}:`))[0] as string
    assert.equal(await redis.get(key), '51', 'Redis counted the requests that reached it')
    assert.equal((await call(`${t.url}/v1/users/${user}?policy=fixed`, { method: 'DELETE' })).status, 204)
    assert.equal((await check(t.url, { userId: user, policy: 'fixed' })).status, 200, 'the reset ended the denial here too')
  })

  it('resets a user by deleting its key', async () => {
    await check(t.url, { userId: 'svc-2' })
    assert.equal(await redis.exists(`${prefix}:svc-2`), 1)
    assert.equal((await call(`${t.url}/v1/users/svc-2`, { method: 'DELETE' })).status, 204)
    assert.equal(await redis.exists(`${prefix}:svc-2`), 0)
  })

  it('runs the counter algorithm on Redis, periodic and synchronous', async () => {
    for (let i = 0; i < 5; i++) assert.equal((await check(t.url, { userId: 'svc-3', policy: 'counter' })).status, 200)
    assert.equal((await check(t.url, { userId: 'svc-3', policy: 'counter' })).status, 429)
    for (let i = 0; i < 3; i++) assert.equal((await check(t.url, { userId: 'svc-3', policy: 'counter-sync' })).status, 200)
    assert.equal((await check(t.url, { userId: 'svc-3', policy: 'counter-sync' })).status, 429)
    const engineKeys = await keysUnder(redis, `${prefix}#counter:`)
    assert.ok(
      engineKeys.some((k) => k.startsWith(`${prefix}#counter:{counter-sync:svc-3}`)),
      `the synchronous counter wrote through: ${engineKeys.join(' ')}`,
    )
    await t.service.runtime().policies.get('counter')?.engine?.rl.sync('counter')
    assert.ok((await keysUnder(redis, `${prefix}#counter:{counter:svc-3}`)).length > 0, 'the periodic counter synced')
  })

  it('is ready while Redis answers', async () => {
    assert.deepEqual((await call(`${t.url}/readyz`)).body, {
      status: 'ready',
      store: 'redis',
    })
  })
})

describe('service on one Redis server with store.batch-across-slots', { timeout: 60_000 }, () => {
  it('syncs the counter policy in script calls that span slots, and counts every user', async () => {
    const own = await startOwnRedis()
    const redis = new Redis(own.url)
    const t = await startTestService(`
rate-limiter: { use-algo: sliding-window-counter-algo, max-requests: 5, window-size: 60, sync-rate: 60, key-prefix: rl }
store: { type: redis, url: "${own.url}", batch-across-slots: true }
`)
    try {
      for (let i = 0; i < 300; i++) assert.equal((await check(t.url, { userId: `u${i}` })).status, 200)
      await redis.config('RESETSTAT')
      await t.service.runtime().policies.get('default')?.engine?.rl.sync('default')
      const stats = await redis.info('commandstats')
      const evalsha = Number(/^cmdstat_evalsha:calls=(\d+)/m.exec(stats)?.[1] ?? 0)
      const evals = Number(/^cmdstat_eval:calls=(\d+)/m.exec(stats)?.[1] ?? 0)
      // 300 users, a write and a read each: 2 calls of up to 512 key-windows, not 300 (one per
      // slot); on this fresh server each EVALSHA is answered NOSCRIPT and sent again as EVAL
      assert.ok(evalsha <= 3 && evals <= 3, `${evalsha} EVALSHA and ${evals} EVAL for 300 users`)
      assert.equal((await keysUnder(redis, 'rl#counter:')).length, 300, 'every user written')
      for (let i = 0; i < 5; i++) await check(t.url, { userId: 'u0' })
      assert.equal((await check(t.url, { userId: 'u0' })).status, 429)
    } finally {
      await t.close()
      redis.disconnect()
      await own.kill()
    }
  })
})
