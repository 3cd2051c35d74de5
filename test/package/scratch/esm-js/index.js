// Imports every subpath as an ES module and uses the package the way the README shows.
import assert from 'node:assert/strict'
import express from 'express'
import { rateLimit } from 'express-rate-limit'
import { Redis } from 'ioredis'
import * as ratelimiting from 'ratelimiting'
import { MemoryFixedWindow } from 'ratelimiting/algorithms'
import { RateLimitingStore } from 'ratelimiting/express'
import { createFastifyStore } from 'ratelimiting/fastify'
import { createHonoMiddleware } from 'ratelimiting/hono'
import { MemcachedStrategy } from 'ratelimiting/memcached'
import { PostgresStrategy } from 'ratelimiting/postgres'
import { RedisStrategy } from 'ratelimiting/redis'
import { startService } from 'ratelimiting/server'
import { perMinute } from 'ratelimiting/simple'

const redisUrl = process.env.RATELIMITING_REDIS_URL ?? 'redis://127.0.0.1:6379'
const prefix = process.env.RATELIMITING_KEY_PREFIX ?? `scratch:${process.pid}`

for (const value of [MemoryFixedWindow, createFastifyStore, createHonoMiddleware, MemcachedStrategy, PostgresStrategy, startService])
  assert.equal(typeof value, 'function')
assert.equal(perMinute(1).allow('k'), true)

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
const byName = instance('esm-js-by-name', { strategy: 'redis', strategyOpts: { url: redisUrl, prefix } })
const byObject = instance('esm-js-by-object', { strategy: new RedisStrategy({ client, prefix }) })
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
const url = `http://127.0.0.1:${server.address().port}/`
const statuses = []
for (let i = 0; i < 3; i++) statuses.push((await fetch(url)).status)
server.close()
assert.deepEqual(statuses, [200, 200, 429])
console.log('esm-js: ok')
