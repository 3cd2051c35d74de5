// Requires every subpath from CommonJS (no require(esm): this runs on Node versions without it)
// and uses the package the way the README shows.
const assert = require('node:assert/strict')
const express = require('express')
const { rateLimit } = require('express-rate-limit')
const { Redis } = require('ioredis')
const { createClient } = require('redis')
const ratelimiting = require('ratelimiting')
const { MemoryFixedWindow } = require('ratelimiting/algorithms')
const { RateLimitingStore } = require('ratelimiting/express')
const { createFastifyStore } = require('ratelimiting/fastify')
const { createHonoMiddleware } = require('ratelimiting/hono')
const { MemcachedStrategy } = require('ratelimiting/memcached')
const { RateLimitingThrottlerStorage } = require('ratelimiting/nestjs')
const { PostgresStrategy } = require('ratelimiting/postgres')
const { RedisStrategy } = require('ratelimiting/redis')
const { startService } = require('ratelimiting/server')
const { perMinute } = require('ratelimiting/simple')
const testing = require('ratelimiting/testing')

const redisUrl = process.env.RATELIMITING_REDIS_URL ?? 'redis://127.0.0.1:6379'
const prefix = process.env.RATELIMITING_KEY_PREFIX ?? `scratch:${process.pid}`

/** The package files this process loaded, relative to dist/. */
function loaded() {
  return Object.keys(require.cache)
    .filter((file) => file.includes('node_modules/ratelimiting/dist/'))
    .map((file) => file.split('node_modules/ratelimiting/dist/')[1])
}

async function main() {
  for (const value of [MemoryFixedWindow, createFastifyStore, createHonoMiddleware, MemcachedStrategy, PostgresStrategy, startService])
    assert.equal(typeof value, 'function')
  for (const name of ['runStrategyContract', 'runFaultSuite', 'readWindow', 'startTcpProxy'])
    assert.equal(typeof testing[name], 'function', name)
  // the kit's memory store is the root's: one engine behind every subpath
  assert.equal(testing.MemoryStrategy, ratelimiting.MemoryStrategy)
  assert.equal(perMinute(1).allow('k'), true)
  assert.ok(loaded().every((file) => file.endsWith('.cjs')))

  // one engine behind every subpath: an adapter's errors are the root's classes
  assert.throws(() => new RateLimitingStore({ namespace: '' }), ratelimiting.ConfigError)
  assert.throws(() => new RateLimitingThrottlerStorage({ namespace: '' }), ratelimiting.ConfigError)

  // ratelimiting/nestjs requires without Nest installed (it imports @nestjs/throttler only as
  // types): the storage answers @nestjs/throttler's record, a second request of 1 per hour blocked
  const storage = new RateLimitingThrottlerStorage()
  assert.equal((await storage.increment('k', 3_600_000, 1, 60_000, 'default')).isBlocked, false)
  const blocked = await storage.increment('k', 3_600_000, 1, 60_000, 'default')
  assert.ok(blocked.isBlocked && blocked.timeToBlockExpire >= 60, JSON.stringify(blocked))
  await storage.close()

  // A store by name, loaded on demand by the root entry, and a store object from its subpath: two
  // instances (two processes of a fleet) see each other's hits through Redis. A window of an hour:
  // the second rate is above 2 even if a window boundary passes between the two calls.
  function instance(name, store) {
    const rl = ratelimiting.RateLimiting.newInstance(name)
    rl.new({ namespace: 'shared', windowSizes: [3600], syncRate: 0, ...store })
    return rl
  }
  const client = new Redis(redisUrl)
  const byName = instance('cjs-js-by-name', { strategy: 'redis', strategyOpts: { url: redisUrl, prefix } })
  const byObject = instance('cjs-js-by-object', { strategy: new RedisStrategy({ client, prefix }) })
  assert.equal(await byName.increment('k', 3600, 2, 'shared'), 2)
  assert.ok(
    (await byObject.increment('k', 3600, 1, 'shared')) > 2,
    'the RedisStrategy of ratelimiting/redis sees the hits of strategy "redis"',
  )
  await Promise.all([byName.close(), byObject.close()])
  await client.quit()

  // the official client (node-redis), connected by its owner, serves the same counts
  const nodeRedis = await createClient({ url: redisUrl }).connect()
  const viaNodeRedis = instance('cjs-js-node-redis', { strategy: new RedisStrategy({ client: nodeRedis, prefix }) })
  assert.ok((await viaNodeRedis.increment('k', 3600, 1, 'shared')) > 3, 'node-redis reaches the counts ioredis wrote')
  await viaNodeRedis.close()
  await nodeRedis.close()

  // Redis Sentinel (the test sets RATELIMITING_SENTINELS to its own master, replica and three Sentinels)
  if (process.env.RATELIMITING_SENTINELS !== undefined) {
    const sentinels = process.env.RATELIMITING_SENTINELS.split(',').map((s) => ({ host: s.split(':')[0], port: Number(s.split(':')[1]) }))
    // a store object the caller made: the caller closes it (a namespace closes only the stores it made)
    const sentinelStore = new RedisStrategy({
      sentinels,
      name: process.env.RATELIMITING_SENTINEL_MASTER,
      password: process.env.RATELIMITING_SENTINEL_DATA_PASSWORD,
      sentinelPassword: process.env.RATELIMITING_SENTINEL_PASSWORD,
      prefix,
    })
    const bySentinel = instance('cjs-js-sentinel', { strategy: sentinelStore })
    assert.equal(await bySentinel.increment('k', 3600, 2, 'shared'), 2)
    assert.equal(await bySentinel.increment('k', 3600, 1, 'shared'), 3)
    await bySentinel.close()
    await sentinelStore.close()
  }

  // a real request: express-rate-limit with our store admits 2, then 429
  const app = express()
  app.use(rateLimit({ windowMs: 60_000, limit: 2, standardHeaders: 'draft-8', legacyHeaders: false, store: new RateLimitingStore() }))
  app.get('/', (_req, res) => res.send('ok'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const statuses = []
  for (let i = 0; i < 3; i++) statuses.push((await fetch(`http://127.0.0.1:${server.address().port}/`)).status)
  server.close()
  assert.deepEqual(statuses, [200, 200, 429])

  assert.ok(loaded().every((file) => file.endsWith('.cjs')))
  console.log('cjs-js: ok')
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
