// Every subpath resolves through typesVersions (node10 ignores `exports`) and runs through main/exports.
import assert from 'node:assert/strict'
import rateLimit from '@fastify/rate-limit'
import Fastify from 'fastify'
import { ConfigError, type Decision, RateLimiting } from 'ratelimiting'
import { type AlgorithmResult, MemoryFixedWindow } from 'ratelimiting/algorithms'
import { RateLimitingStore } from 'ratelimiting/express'
import { createFastifyStore } from 'ratelimiting/fastify'
import { createHonoMiddleware } from 'ratelimiting/hono'
import { MemcachedStrategy } from 'ratelimiting/memcached'
import { RateLimitingThrottlerStorage } from 'ratelimiting/nestjs'
import { PostgresStrategy } from 'ratelimiting/postgres'
import { RedisStrategy, type RedisStrategyOptions } from 'ratelimiting/redis'
import { type ServiceConfig, startService } from 'ratelimiting/server'
import { perMinute, type SimpleLimiter } from 'ratelimiting/simple'

const redisOptions: RedisStrategyOptions = { url: 'redis://127.0.0.1:6379' }
const limiter: SimpleLimiter = perMinute(1)
const config: ServiceConfig | undefined = undefined
for (const value of [
  MemoryFixedWindow,
  RateLimitingStore,
  createHonoMiddleware,
  MemcachedStrategy,
  PostgresStrategy,
  RateLimitingThrottlerStorage,
  RedisStrategy,
  startService,
])
  assert.equal(typeof value, 'function')
assert.equal(limiter.allow('k'), true)
assert.equal(config, undefined)
assert.equal(typeof redisOptions.url, 'string')

async function main(): Promise<void> {
  const rl = RateLimiting.newInstance('ts-node10')
  rl.new({ namespace: 'api', windowSizes: [60] })
  const decision: Decision | Promise<Decision> = rl.limiter({ namespace: 'api', limits: [{ limit: 1, window: 60 }] }).hit('k')
  assert.equal((await decision).allowed, true)
  const result: AlgorithmResult | Promise<AlgorithmResult> = new MemoryFixedWindow({ limit: 1, windowMs: 60_000 }).check('u')
  assert.equal((await result).allowed, true)
  assert.throws(() => createFastifyStore({ namespace: '' }), ConfigError)

  // a real request: @fastify/rate-limit with our store admits 2, then 429
  const app = Fastify()
  await app.register(rateLimit, { max: 2, timeWindow: 60_000, store: createFastifyStore() })
  app.get('/', async () => 'ok')
  const url = await app.listen({ port: 0, host: '127.0.0.1' })
  const statuses: number[] = []
  for (let i = 0; i < 3; i++) statuses.push((await fetch(url)).status)
  await app.close()
  assert.deepEqual(statuses, [200, 200, 429])
  console.log('ts-node10: ok')
}

main().catch((err: unknown) => {
  console.error(err)
  process.exit(1)
})
