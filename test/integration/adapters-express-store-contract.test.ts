/**
 * The Store contract of express-rate-limit, as its own stores' tests state it (MemoryStore's in
 * express-rate-limit, rate-limit-redis's and rate-limit-memcached's store tests), ported to
 * RateLimitingStore and run on every strategy against a real server. Where those stores expire a
 * fixed window, the port states the sliding window's rule instead (a hit weighs for two windows),
 * and where they inspect their own keys in Redis or memcached, it checks the counts the store
 * answers. Cases that test a store's client plumbing (sendCommand binding, SCRIPT LOAD retries,
 * the memcached client's options) have nothing to port.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, describe, it, type TestContext } from 'node:test'
import type { ClientRateLimitInfo, Options } from 'express-rate-limit'
import { Cluster } from 'ioredis'
import pg from 'pg'
import { RateLimitingStore } from '../../src/adapters/express.js'
import { type Clock, createFakeClock, MemoryStrategy, type Strategy } from '../../src/index.js'
import { MemcachedStrategy } from '../../src/strategies/memcached/index.js'
import { createPostgresStrategy } from '../../src/strategies/postgres/index.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { sharedClusterPorts, sharedRedisUrl } from '../support/redis-server.js'

const run = randomUUID().slice(0, 8)
const connectionString = 'postgres://postgres@127.0.0.1:5432/test'
const schema = `rl_ercontract_${run}`
const WINDOW_MS = 60_000

interface Case {
  readonly name: string
  /** A known defect outside the adapter that fails the ordered-answers case, as node:test's todo. */
  readonly todoOrdered?: string
  /** A strategy for the test, or undefined: counts in this process. */
  readonly make: () => Strategy | undefined | Promise<Strategy | undefined>
}

const cluster = new Cluster((await sharedClusterPorts()).map((port) => ({ host: '127.0.0.1', port })))
const redisUrl = await sharedRedisUrl()
const cases: Case[] = [
  { name: 'this process (no strategy)', make: () => undefined },
  { name: 'memory', make: () => new MemoryStrategy() },
  { name: 'redis', make: () => new RedisStrategy({ url: redisUrl, prefix: `ercontract-${run}` }) },
  { name: 'redis cluster', make: () => new RedisStrategy({ client: cluster, prefix: `ercontract-${run}` }) },
  {
    name: 'postgres',
    make: () => createPostgresStrategy({ connectionString, schema, migrate: true }),
  },
  { name: 'memcached', make: () => new MemcachedStrategy({ servers: ['127.0.0.1:11211'], prefix: `ercontract-${run}` }) },
]

after(async () => {
  await cluster.quit()
  const client = new pg.Client({ connectionString })
  await client.connect()
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
  await client.end()
})

/** A store ready for requests, on a fake clock near the real time (stores expire keys by it). */
async function storeOn(t: TestContext, c: Case, clock: Clock, namespace = `ns-${randomUUID().slice(0, 8)}`, limit = 10) {
  const strategy = await c.make()
  const store = new RateLimitingStore({ ...(strategy === undefined ? {} : { strategy }), namespace, clock })
  await store.init({ windowMs: WINDOW_MS, limit } as Options)
  // also when an assertion fails: an open client would keep the process alive
  t.after(async () => {
    await store.shutdown()
    await strategy?.close()
  })
  return store
}

const hits = async (info: ClientRateLimitInfo | undefined | Promise<ClientRateLimitInfo | undefined>) => (await info)?.totalHits

function nearNow(): ReturnType<typeof createFakeClock> {
  // 5 s into a minute: every increment of a test falls in one window
  return createFakeClock(Math.ceil(Date.now() / WINDOW_MS) * WINDOW_MS + 5_000)
}

for (const c of cases) {
  describe(`RateLimitingStore keeps express-rate-limit's Store contract: ${c.name}`, () => {
    it('counts 1 on the first increment of a key, with a reset time', async (t) => {
      const clock = nearNow()
      const store = await storeOn(t, c, clock.now)
      const info = await store.increment('1.2.3.4')
      assert.equal(info.totalHits, 1)
      assert.ok(info.resetTime instanceof Date)
    })

    it('counts every increment of a key', async (t) => {
      const store = await storeOn(t, c, nearNow().now)
      await store.increment('k')
      await store.increment('k')
      assert.equal(await hits(store.increment('k')), 3)
    })

    it('counts every one of simultaneous increments', async (t) => {
      const store = await storeOn(t, c, nearNow().now)
      await Promise.all([store.increment('k'), store.increment('k'), store.increment('k')])
      assert.equal(await hits(store.increment('k')), 4)
    })

    // express-rate-limit admits a request by the count its own increment answers
    it('answers each of simultaneous increments with its own count', { todo: c.todoOrdered }, async (t) => {
      const store = await storeOn(t, c, nearNow().now)
      const answers = await Promise.all([1, 2, 3, 4, 5].map(() => store.increment('k')))
      assert.deepEqual(answers.map((a) => a.totalHits).sort(), [1, 2, 3, 4, 5])
    })

    it('takes one hit back on decrement', async (t) => {
      const store = await storeOn(t, c, nearNow().now)
      await store.increment('k')
      await store.increment('k')
      await store.decrement('k')
      assert.equal(await hits(store.increment('k')), 2)
    })

    it('never goes below zero, and reads a key decremented to zero as { totalHits: 0 }', async (t) => {
      const store = await storeOn(t, c, nearNow().now)
      await store.increment('k')
      await store.decrement('k')
      await store.decrement('k')
      const info = await store.get('k')
      assert.equal(info?.totalHits, 0)
      assert.ok(info?.resetTime instanceof Date)
      assert.equal(await hits(store.increment('k')), 1)
    })

    it('takes nothing back from a key it never counted', async (t) => {
      const store = await storeOn(t, c, nearNow().now)
      await store.decrement('new')
      assert.equal(await hits(store.increment('new')), 1)
    })

    it('reads the hits and reset time of a key without counting one', async (t) => {
      const store = await storeOn(t, c, nearNow().now)
      await store.increment('k')
      await store.increment('k')
      const info = await store.get('k')
      assert.equal(info?.totalHits, 2)
      assert.ok(info?.resetTime instanceof Date)
      assert.equal(await hits(store.get('k')), 2, 'get does not count')
      assert.equal(await hits(store.get('nobody')), 0, 'a key never counted reads as 0 hits')
    })

    it('forgets a key on resetKey, and resets a key it never counted without failing', async (t) => {
      const store = await storeOn(t, c, nearNow().now)
      await store.increment('k')
      await store.increment('k')
      await store.resetKey('k')
      assert.equal(await hits(store.get('k')), 0)
      assert.equal(await hits(store.increment('k')), 1)
      await store.resetKey('never-seen')
    })

    it('forgets every key on resetAll', async (t) => {
      const store = await storeOn(t, c, nearNow().now)
      await store.increment('one')
      await store.increment('two')
      await store.increment('two')
      await store.resetAll()
      assert.equal(await hits(store.increment('one')), 1)
      assert.equal(await hits(store.increment('two')), 1)
    })

    it('keeps the counts of stores with different namespaces apart (a prefix each)', async (t) => {
      const clock = nearNow()
      const a = await storeOn(t, c, clock.now, `a-${randomUUID().slice(0, 8)}`)
      const b = await storeOn(t, c, clock.now, `b-${randomUUID().slice(0, 8)}`)
      await a.increment('k')
      await a.increment('k')
      assert.equal(await hits(b.increment('k')), 1)
    })

    it('lets hits weigh for two windows: less after one, none after two (a fixed window forgets them after one)', async (t) => {
      const clock = nearNow()
      const store = await storeOn(t, c, clock.now)
      for (let i = 0; i < 4; i++) await store.increment('k')
      clock.advance(WINDOW_MS) // 5 s into the next window: 4 * 55/60 = 3.67 still weigh
      assert.equal(await hits(store.get('k')), 4)
      clock.advance(30_000) // 35 s in: 4 * 25/60 = 1.67
      assert.equal(await hits(store.get('k')), 2)
      clock.advance(WINDOW_MS) // two windows later
      assert.equal(await hits(store.get('k')), 0)
      assert.equal(await hits(store.increment('k')), 1)
    })

    // without a strategy nothing is shared: the case has no such test
    if (c.name.startsWith('this process')) return
    it('shares the counts of one namespace between two stores (two processes)', async (t) => {
      const clock = nearNow()
      const namespace = `shared-${randomUUID().slice(0, 8)}`
      const strategy = (await c.make()) as Strategy
      const stores = [0, 1].map(() => new RateLimitingStore({ strategy, namespace, clock: clock.now }))
      t.after(async () => {
        for (const s of stores) await s.shutdown()
        await strategy.close()
      })
      for (const s of stores) s.init({ windowMs: WINDOW_MS, limit: 10 } as Options)
      await stores[0]?.increment('k')
      await stores[1]?.increment('k')
      assert.equal(await hits(stores[0]?.increment('k')), 3)
      assert.equal(await hits(stores[1]?.get('k')), 3)
    })
  })
}
