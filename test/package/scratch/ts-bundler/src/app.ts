// Named imports only: a bundler keeps the root entry's registration of the stores (its side
// effect) only because package.json says the root entry has one.
import assert from 'node:assert/strict'
import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import { ConfigError, RateLimiting } from 'ratelimiting'
import { MemoryFixedWindow } from 'ratelimiting/algorithms'
import { RateLimitingStore } from 'ratelimiting/express'
import { createFastifyStore } from 'ratelimiting/fastify'
import { createHonoMiddleware } from 'ratelimiting/hono'
import { MemcachedStrategy } from 'ratelimiting/memcached'
import { PostgresStrategy } from 'ratelimiting/postgres'
import { RedisStrategy } from 'ratelimiting/redis'
import { startService } from 'ratelimiting/server'
import { perMinute } from 'ratelimiting/simple'

for (const value of [
  MemoryFixedWindow,
  RateLimitingStore,
  createFastifyStore,
  MemcachedStrategy,
  PostgresStrategy,
  RedisStrategy,
  startService,
])
  assert.equal(typeof value, 'function')
assert.equal(perMinute(1).allow('k'), true)
assert.throws(() => createHonoMiddleware({ limit: 1, windowMs: 60_000, key: () => 'k', namespace: '' }), ConfigError)

// a store by name: registered by the root entry, loaded on demand from the bundle
const rl = RateLimiting.newInstance('ts-bundler')
// each bundle's run counts under keys of its own
const prefix = `${process.env.RATELIMITING_KEY_PREFIX ?? 'scratch'}:${process.pid}`
rl.new({
  windowSizes: [3600],
  syncRate: 0,
  strategy: 'redis',
  strategyOpts: { url: process.env.RATELIMITING_REDIS_URL ?? 'redis://127.0.0.1:6379', prefix },
})
assert.equal(await rl.increment('k', 3600, 3), 3)
await rl.close()

// a real request: our Hono middleware admits 2, then 429
const app = new Hono()
app.use('*', createHonoMiddleware({ limit: 2, windowMs: 60_000, key: (c) => c.req.header('x-api-key') ?? 'anonymous' }))
app.get('/', (c) => c.text('ok'))
const server = await new Promise<ReturnType<typeof serve>>((resolve) => {
  const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s))
})
const address = server.address()
assert.ok(address !== null && typeof address === 'object')
const statuses: number[] = []
for (let i = 0; i < 3; i++) statuses.push((await fetch(`http://127.0.0.1:${address.port}/`)).status)
server.close()
assert.deepEqual(statuses, [200, 200, 429])
console.log('ts-bundler: ok')
