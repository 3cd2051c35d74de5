// Requires every subpath from CommonJS (no require(esm): this runs on Node versions without it)
// and uses the package the way the README shows.
const assert = require('node:assert/strict')
const express = require('express')
const { rateLimit } = require('express-rate-limit')
const { Redis } = require('ioredis')
const ratelimiting = require('ratelimiting')
const { MemoryFixedWindow } = require('ratelimiting/algorithms')
const { RateLimitingStore } = require('ratelimiting/express')
const { createFastifyStore } = require('ratelimiting/fastify')
const { createHonoMiddleware } = require('ratelimiting/hono')
const { MemcachedStrategy } = require('ratelimiting/memcached')
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
