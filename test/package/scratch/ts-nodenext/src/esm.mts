// An ES module under nodenext in the same project: the imports are typed by the .d.ts files.
import 'reflect-metadata'
import assert from 'node:assert/strict'
import { Controller, Get, Module } from '@nestjs/common'
import { APP_GUARD, NestFactory } from '@nestjs/core'
import { ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler'
import * as ratelimiting from 'ratelimiting'
import { MemorySlidingLog } from 'ratelimiting/algorithms'
import { RateLimitingStore } from 'ratelimiting/express'
import { createFastifyStore } from 'ratelimiting/fastify'
import { createHonoMiddleware } from 'ratelimiting/hono'
import { MemcachedStrategy } from 'ratelimiting/memcached'
import { RateLimitingThrottlerStorage } from 'ratelimiting/nestjs'
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
// a real request: a Nest 12 app (ES modules only) with @nestjs/throttler's guard and our storage
// admits 2, then 429 with Retry-After. The decorators are applied as compiled TypeScript applies
// them (this project has no experimentalDecorators).
class HelloController {
  hello(): { ok: boolean } {
    return { ok: true }
  }
}
Reflect.decorate([Controller()], HelloController)
Reflect.decorate([Get()], HelloController.prototype, 'hello', Object.getOwnPropertyDescriptor(HelloController.prototype, 'hello'))
class AppModule {}
Reflect.decorate(
  [
    Module({
      imports: [ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: 2 }], storage: new RateLimitingThrottlerStorage() })],
      controllers: [HelloController],
      providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
    }),
  ],
  AppModule,
)
const app = await NestFactory.create(AppModule, { logger: false })
await app.listen(0, '127.0.0.1')
const url = await app.getUrl()
const responses: Response[] = []
for (let i = 0; i < 3; i++) {
  const res = await fetch(url)
  await res.arrayBuffer()
  responses.push(res)
}
await app.close()
assert.deepEqual(
  responses.map((r) => r.status),
  [200, 200, 429],
)
assert.equal(responses[1]?.headers.get('x-ratelimit-remaining'), '0')
assert.ok(Number(responses[2]?.headers.get('retry-after')) > 0)
console.log('ts-nodenext (ESM): ok')
