// A CommonJS module under nodenext: every import below compiles to require(), typed by the .d.cts files.
import assert from 'node:assert/strict'
import type { ThrottlerStorage } from '@nestjs/throttler'
import express from 'express'
import { ConfigError, type Decision, RateLimiting } from 'ratelimiting'
import { type AlgorithmResult, MemoryFixedWindow } from 'ratelimiting/algorithms'
import { createExpressMiddleware } from 'ratelimiting/express'
import { createFastifyStore } from 'ratelimiting/fastify'
import { createHonoMiddleware } from 'ratelimiting/hono'
import { MemcachedStrategy } from 'ratelimiting/memcached'
import { RateLimitingThrottlerStorage, type ThrottlerStorageRecord } from 'ratelimiting/nestjs'
import { PostgresStrategy } from 'ratelimiting/postgres'
import { RedisStrategy } from 'ratelimiting/redis'
import { type ServiceConfig, startService } from 'ratelimiting/server'
import { perMinute } from 'ratelimiting/simple'

const config: ServiceConfig | undefined = undefined
for (const value of [createFastifyStore, createHonoMiddleware, MemcachedStrategy, PostgresStrategy, RedisStrategy, startService])
  assert.equal(typeof value, 'function')
assert.equal(perMinute(1).allow('k'), true)
assert.equal(config, undefined)

async function main(): Promise<void> {
  const rl = RateLimiting.newInstance('ts-nodenext-cjs')
  rl.new({ namespace: 'api', windowSizes: [60] })
  const decision: Decision | Promise<Decision> = rl.limiter({ namespace: 'api', limits: [{ limit: 1, window: 60 }] }).hit('k')
  assert.equal((await decision).allowed, true)
  const result: AlgorithmResult | Promise<AlgorithmResult> = new MemoryFixedWindow({ limit: 1, windowMs: 60_000 }).check('u')
  assert.equal((await result).allowed, true)
  assert.throws(() => createExpressMiddleware({ limit: 0 }), ConfigError)

  // our storage is a ThrottlerStorage for @nestjs/throttler, typed by its .d.cts
  const storage: ThrottlerStorage = new RateLimitingThrottlerStorage()
  const record: ThrottlerStorageRecord = await storage.increment('k', 60_000, 1, 60_000, 'default')
  assert.equal(record.isBlocked, false)
  assert.equal((await storage.increment('k', 60_000, 1, 60_000, 'default')).isBlocked, true)

  // a real request: our Express middleware admits 2, then 429 with Retry-After
  const app = express()
  app.use(createExpressMiddleware({ limit: 2, windowMs: 60_000 }))
  app.get('/', (_req, res) => {
    res.send('ok')
  })
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  const address = server.address()
  assert.ok(address !== null && typeof address === 'object')
  const responses: Response[] = []
  for (let i = 0; i < 3; i++) responses.push(await fetch(`http://127.0.0.1:${address.port}/`))
  server.close()
  assert.deepEqual(
    responses.map((r) => r.status),
    [200, 200, 429],
  )
  assert.ok(Number(responses[2]?.headers.get('retry-after')) > 0)
  console.log('ts-nodenext (CommonJS): ok')
}

main().catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
