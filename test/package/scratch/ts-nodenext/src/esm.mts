// An ES module under nodenext in the same project: the imports are typed by the .d.ts files.
import assert from 'node:assert/strict'
import * as ratelimiting from 'ratelimiting'
import { MemorySlidingLog } from 'ratelimiting/algorithms'
import { RateLimitingStore } from 'ratelimiting/express'
import { createFastifyStore } from 'ratelimiting/fastify'
import { createHonoMiddleware } from 'ratelimiting/hono'
import { MemcachedStrategy } from 'ratelimiting/memcached'
import { PostgresStrategy } from 'ratelimiting/postgres'
import { RedisStrategy } from 'ratelimiting/redis'
import { startService } from 'ratelimiting/server'
import { perSecond } from 'ratelimiting/simple'

for (const value of [createFastifyStore, createHonoMiddleware, MemcachedStrategy, PostgresStrategy, RedisStrategy, startService])
  assert.equal(typeof value, 'function')
assert.equal(perSecond(1).allow('k'), true)
assert.throws(() => new RateLimitingStore({ namespace: '' }), ratelimiting.ConfigError)

// Kong's module shape on the default instance
ratelimiting.new({ namespace: 'esm', windowSizes: [60] })
assert.equal(ratelimiting.increment('k', 60, 2, 'esm'), 2)
const log = new MemorySlidingLog({ limit: 1, windowMs: 60_000 })
assert.deepEqual([log.check('u').allowed, log.check('u').allowed], [true, false])
console.log('ts-nodenext (ESM): ok')
