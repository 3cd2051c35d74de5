/**
 * RateLimitingThrottlerStorage in a real Nest app, on the Express and on the Fastify platform,
 * over real HTTP: @nestjs/throttler's own guard and module, our storage. The limits, the headers
 * the guard sends (X-RateLimit-*, Retry-After in seconds), two named throttlers, skipIf,
 * blockDuration, and two app instances sharing the counts and blocks through the shared Redis,
 * in synchronous and in periodic mode. Time is a fake clock: the storage's engine reads it, the
 * guard reads no time.
 *
 * The test files run without TypeScript's legacy decorators, which Nest needs: the decorators are
 * applied by hand with Reflect.decorate, as the compiled code of a decorated class does.
 */
import 'reflect-metadata'
import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import { Controller, Get, type INestApplication, Module, type ExecutionContext } from '@nestjs/common'
import { APP_GUARD, NestFactory, type AbstractHttpAdapter } from '@nestjs/core'
import { ExpressAdapter } from '@nestjs/platform-express'
import { FastifyAdapter } from '@nestjs/platform-fastify'
import { SkipThrottle, Throttle, ThrottlerGuard, ThrottlerModule, type ThrottlerModuleOptions } from '@nestjs/throttler'
import { Redis } from 'ioredis'
import { RateLimitingThrottlerStorage } from '../../src/adapters/nestjs.js'
import { ConfigError, createFakeClock, type FakeClock, MemoryStrategy, RateLimiting } from '../../src/index.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { sharedRedisUrl } from '../support/redis-server.js'
import { deleteKeys, uniquePrefix } from './server-helpers.js'

const redisUrl = await sharedRedisUrl()
const redis = new Redis(redisUrl)
const prefix = uniquePrefix()
after(async () => {
  await deleteKeys(redis, prefix)
  redis.disconnect()
})

const MINUTE = 60_000

/** Applies decorators as TypeScript's compiled `@decorator` does. */
function decorate(target: object, decorators: readonly (ClassDecorator | MethodDecorator)[], method?: string): void {
  if (method === undefined) {
    Reflect.decorate(decorators as ClassDecorator[], target as () => void)
    return
  }
  const proto = (target as { prototype: object }).prototype
  const descriptor = Object.getOwnPropertyDescriptor(proto, method) as PropertyDescriptor
  Object.defineProperty(proto, method, Reflect.decorate(decorators as MethodDecorator[], proto, method, descriptor) as PropertyDescriptor)
}

/** GET / under the module's throttlers; GET /login with its own 'default' limit and a 10 s block; GET /free never throttled. */
class ApiController {
  index(): { ok: true } {
    return { ok: true }
  }

  login(): { ok: true } {
    return { ok: true }
  }

  free(): { ok: true } {
    return { ok: true }
  }
}
decorate(ApiController, [Controller()])
decorate(ApiController, [Get()], 'index')
decorate(ApiController, [Get('login'), Throttle({ default: { limit: 2, ttl: 1000, blockDuration: 10_000 } })], 'login')
decorate(ApiController, [Get('free'), SkipThrottle()], 'free')

interface App {
  readonly url: string
  /** Sends GET `path` (its body read); resolves with the response. */
  get(path?: string, headers?: Record<string, string>): Promise<Answer>
  close(): Promise<void>
}

interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly body: unknown
}

const PLATFORMS: Array<[string, () => AbstractHttpAdapter]> = [
  ['Express', () => new ExpressAdapter()],
  ['Fastify', () => new FastifyAdapter()],
]

/** A Nest app on `platform` with ThrottlerModule.forRoot(`options`) and the guard on every route. */
async function startApp(platform: () => AbstractHttpAdapter, options: ThrottlerModuleOptions): Promise<App> {
  class AppModule {}
  decorate(AppModule, [
    Module({
      imports: [ThrottlerModule.forRoot(options)],
      controllers: [ApiController],
      providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
    }),
  ])
  const app: INestApplication = await NestFactory.create(AppModule, platform(), { logger: false })
  await app.listen(0, '127.0.0.1')
  const url = (await app.getUrl()).replace('[::1]', '127.0.0.1')
  return {
    url,
    async get(path = '/', headers = {}) {
      const res = await fetch(url + path, { headers })
      return { status: res.status, headers: res.headers, body: await res.json() }
    },
    close: () => app.close(),
  }
}

/** The guard's rate-limit headers of `answer` (`name` for a named throttler), as numbers. */
function limits(answer: Answer, name = ''): { limit: number; remaining: number; reset: number } {
  const suffix = name === '' ? '' : `-${name}`
  const read = (header: string) => Number(answer.headers.get(`${header}${suffix}`))
  return { limit: read('x-ratelimit-limit'), remaining: read('x-ratelimit-remaining'), reset: read('x-ratelimit-reset') }
}

function retryAfter(answer: Answer, name = ''): number | null {
  const value = answer.headers.get(name === '' ? 'retry-after' : `retry-after-${name}`)
  return value === null ? null : Number(value)
}

const TOO_MANY = { statusCode: 429, message: 'ThrottlerException: Too Many Requests' }

/** A fake clock `offsetMs` into a minute near the real time (stores that expire keys by the clock see sane times). */
function clockAt(offsetMs: number): FakeClock {
  return createFakeClock(Math.ceil(Date.now() / MINUTE) * MINUTE + offsetMs)
}

for (const [platformName, platform] of PLATFORMS) {
  describe(`@nestjs/throttler with RateLimitingThrottlerStorage on Nest's ${platformName} platform`, () => {
    it('admits the limit with the guard’s headers, then answers 429 with Retry-After the exact wait in seconds', async () => {
      const clock = clockAt(15_000)
      const app = await startApp(platform, {
        throttlers: [{ ttl: MINUTE, limit: 3 }],
        storage: new RateLimitingThrottlerStorage({ clock: clock.now }),
      })
      try {
        for (let i = 0; i < 3; i++) {
          const answer = await app.get()
          assert.equal(answer.status, 200)
          assert.deepEqual(answer.body, { ok: true })
          // X-RateLimit-Reset: the seconds to the end of the minute window the clock is 15 s into
          assert.deepEqual(limits(answer), { limit: 3, remaining: 2 - i, reset: 45 })
          assert.equal(retryAfter(answer), null)
        }
        const denied = await app.get()
        assert.equal(denied.status, 429)
        assert.deepEqual(denied.body, TOO_MANY)
        // blocked for blockDuration (the ttl, the guard's default): 60 s; but the 3 hits weigh
        // until the next window is 20 s old (3 × 40/60 + 1 = 3): 45 + 20 = 65 s, the later one
        assert.equal(retryAfter(denied), 65)
        assert.equal(denied.headers.get('x-ratelimit-remaining'), null, 'the guard throws before the other headers')

        clock.advance(65_000)
        const again = await app.get()
        assert.equal(again.status, 200)
        assert.deepEqual(limits(again), { limit: 3, remaining: 0, reset: 40 })
      } finally {
        await app.close()
      }
    })

    it('denies a request after the block’s end but before Retry-After by the counts, which blocks again', async () => {
      const clock = clockAt(15_000)
      const app = await startApp(platform, {
        throttlers: [{ ttl: MINUTE, limit: 3, blockDuration: 30_000 }],
        storage: new RateLimitingThrottlerStorage({ clock: clock.now }),
      })
      try {
        for (let i = 0; i < 3; i++) assert.equal((await app.get()).status, 200)
        assert.equal(retryAfter(await app.get()), 65, 'the counts wait longer than the 30 s block')
        clock.advance(20_000)
        assert.equal(retryAfter(await app.get()), 45, 'blocked: the same instant, 20 s nearer')
        clock.advance(20_000) // the block ended 10 s ago; the 3 hits still fill the window
        const early = await app.get()
        assert.equal(early.status, 429)
        assert.equal(retryAfter(early), 30, 'a denial blocks for blockDuration again: 30 s from now, past the counts’ 25 s')
        clock.advance(30_000)
        assert.equal((await app.get()).status, 200)
      } finally {
        await app.close()
      }
    })

    it('keeps a blockDuration longer than the window: blocked until its end, then the counts start from what slid out', async () => {
      const clock = clockAt(15_000)
      const app = await startApp(platform, {
        throttlers: [{ ttl: MINUTE, limit: 100 }],
        storage: new RateLimitingThrottlerStorage({ clock: clock.now }),
      })
      try {
        // GET /login: @Throttle({ default: { limit: 2, ttl: 1000, blockDuration: 10_000 } })
        for (let i = 0; i < 2; i++) assert.deepEqual(limits(await app.get('/login')), { limit: 2, remaining: 1 - i, reset: 1 })
        const denied = await app.get('/login')
        assert.equal(denied.status, 429)
        assert.equal(retryAfter(denied), 10)
        clock.advance(5_000) // the 1 s window has long slid out: only the block denies
        const blocked = await app.get('/login')
        assert.equal(blocked.status, 429)
        assert.equal(retryAfter(blocked), 5)
        clock.advance(5_000)
        const free = await app.get('/login')
        assert.equal(free.status, 200)
        assert.equal(limits(free).remaining, 1)
        // GET / is another route, so another key: never blocked by /login
        assert.equal(limits(await app.get()).remaining, 99)
      } finally {
        await app.close()
      }
    })

    it('counts two named throttlers apart, each with its own headers, the shorter deciding first', async () => {
      const clock = clockAt(0)
      const app = await startApp(platform, {
        throttlers: [
          { name: 'short', ttl: 1000, limit: 1 },
          { name: 'long', ttl: MINUTE, limit: 3 },
        ],
        storage: new RateLimitingThrottlerStorage({ clock: clock.now }),
      })
      try {
        const first = await app.get()
        assert.deepEqual(limits(first, 'short'), { limit: 1, remaining: 0, reset: 1 })
        assert.deepEqual(limits(first, 'long'), { limit: 3, remaining: 2, reset: 60 })
        const second = await app.get()
        assert.equal(second.status, 429)
        // the 1 s window is full until the next one has wholly replaced it: 2 s; the guard stops
        // at the first throttler that denies, so 'long' neither counts nor answers
        assert.equal(retryAfter(second, 'short'), 2)
        assert.equal(retryAfter(second, 'long'), null)
        assert.equal(second.headers.get('x-ratelimit-remaining-long'), null)

        clock.advance(2_000)
        assert.equal(limits(await app.get(), 'long').remaining, 1, 'the denied request did not count in long')
        clock.advance(2_000)
        assert.equal(limits(await app.get(), 'long').remaining, 0)
        clock.advance(2_000)
        const third = await app.get()
        assert.equal(third.status, 429)
        assert.equal(retryAfter(third, 'short'), null, 'short let it through')
        // blocked for the ttl (the guard's default blockDuration), 60 s; but the three hits of the
        // minute window (at 0, 2 and 4 s) weigh until the next window is 20 s old: 74 s from now
        assert.equal(retryAfter(third, 'long'), 74)
      } finally {
        await app.close()
      }
    })

    it('leaves a request skipIf says to skip unthrottled and uncounted, and a @SkipThrottle route without headers', async () => {
      const clock = clockAt(0)
      const app = await startApp(platform, {
        throttlers: [{ ttl: MINUTE, limit: 2 }],
        skipIf: (context: ExecutionContext) =>
          context.switchToHttp().getRequest<{ headers: Record<string, string> }>().headers['x-skip'] === 'yes',
        storage: new RateLimitingThrottlerStorage({ clock: clock.now }),
      })
      try {
        for (let i = 0; i < 5; i++) {
          const skipped = await app.get('/', { 'x-skip': 'yes' })
          assert.equal(skipped.status, 200)
          assert.equal(skipped.headers.get('x-ratelimit-limit'), null)
          const free = await app.get('/free')
          assert.equal(free.status, 200)
          assert.equal(free.headers.get('x-ratelimit-limit'), null)
        }
        assert.deepEqual(limits(await app.get()), { limit: 2, remaining: 1, reset: 60 })
      } finally {
        await app.close()
      }
    })

    it('denies every request under a limit of 0 and answers 500 for a ttl the engine cannot hold', async () => {
      const none = await startApp(platform, { throttlers: [{ ttl: MINUTE, limit: 0 }], storage: new RateLimitingThrottlerStorage() })
      try {
        for (let i = 0; i < 2; i++) {
          const denied = await none.get()
          assert.equal(denied.status, 429)
          assert.equal(retryAfter(denied), 60)
        }
      } finally {
        await none.close()
      }
      const odd = await startApp(platform, { throttlers: [{ ttl: 1.5, limit: 5 }], storage: new RateLimitingThrottlerStorage() })
      try {
        assert.equal((await odd.get()).status, 500, 'ttl 1.5 ms is a ConfigError, which Nest answers with a 500')
      } finally {
        await odd.close()
      }
    })

    it('stays usable after app.close(): a second app on the same storage counts again', async () => {
      const storage = new RateLimitingThrottlerStorage({ clock: clockAt(0).now })
      const first = await startApp(platform, { throttlers: [{ ttl: MINUTE, limit: 2 }], storage })
      assert.equal(limits(await first.get()).remaining, 1)
      await first.close() // Nest calls the storage's onApplicationShutdown
      const second = await startApp(platform, { throttlers: [{ ttl: MINUTE, limit: 2 }], storage })
      try {
        assert.equal(limits(await second.get()).remaining, 1, 'the closed engine held the counts of this process only')
      } finally {
        await second.close()
      }
    })

    it('shares counts and blocks between two app instances on the shared Redis (synchronous mode), by the default namespace', async () => {
      const clock = clockAt(15_000)
      const strategy = new RedisStrategy({ client: redis, prefix: `${prefix}:${platformName}:sync` })
      // built with the same options, as two processes of a fleet would be
      const options = { strategy, syncRate: 0, clock: clock.now }
      const apps = [
        await startApp(platform, {
          throttlers: [{ ttl: MINUTE, limit: 3, blockDuration: 10 * MINUTE }],
          storage: new RateLimitingThrottlerStorage(options),
        }),
        await startApp(platform, {
          throttlers: [{ ttl: MINUTE, limit: 3, blockDuration: 10 * MINUTE }],
          storage: new RateLimitingThrottlerStorage(options),
        }),
      ]
      try {
        const answers: Answer[] = []
        for (let i = 0; i < 5; i++) answers.push(await (apps[i % 2] as App).get())
        assert.deepEqual(
          answers.map((a) => a.status),
          [200, 200, 200, 429, 429],
        )
        assert.deepEqual(
          answers.slice(0, 3).map((a) => limits(a).remaining),
          [2, 1, 0],
        )
        assert.deepEqual(
          answers.slice(3).map((a) => retryAfter(a)),
          [600, 600],
          'the block app 1 made holds in app 0 too',
        )
        clock.advance(2 * MINUTE) // the counts have slid out; the block has not ended
        assert.equal(retryAfter(await (apps[0] as App).get()), 480)
      } finally {
        for (const app of apps) await app.close()
      }
    })

    it('shares counts between two app instances on the shared Redis in periodic mode, at their syncs', async () => {
      const clock = clockAt(15_000)
      const strategy = new RedisStrategy({ client: redis, prefix: `${prefix}:${platformName}:periodic` })
      const instances = ['a', 'b'].map((name) => {
        const rl = RateLimiting.newInstance(`nestjs-${name}`)
        // your own namespace: its window must be the throttler's ttl; syncs by hand here
        rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0.05, autoSync: false, strategy, clock: clock.now })
        return rl
      })
      const apps = await Promise.all(
        instances.map((rl) =>
          startApp(platform, {
            throttlers: [{ ttl: MINUTE, limit: 3 }],
            storage: new RateLimitingThrottlerStorage({ rateLimiting: rl, namespace: 'api' }),
          }),
        ),
      )
      const [a, b] = apps as [App, App]
      const [rlA, rlB] = instances as [RateLimiting, RateLimiting]
      try {
        for (let i = 0; i < 3; i++) assert.equal((await a.get()).status, 200)
        // periodic: app b decides on its own view until a sync brings a's hits (here fetch(), a
        // new process's warm-up); app a's decisions never waited on Redis
        await rlA.sync('api')
        await rlB.fetch('api')
        const denied = await b.get()
        assert.equal(denied.status, 429)
        assert.equal(retryAfter(denied), 65)
      } finally {
        for (const app of apps) await app.close()
        await Promise.all(instances.map((rl) => rl.close()))
      }
    })
  })
}

describe('RateLimitingThrottlerStorage options', () => {
  it('refuses options it cannot use, naming them, when it is built', () => {
    assert.throws(() => new RateLimitingThrottlerStorage({ namespace: '' }), ConfigError)
    assert.throws(
      () => new RateLimitingThrottlerStorage({ rateLimiting: RateLimiting.newInstance('x'), namespace: 'api', syncRate: 0 }),
      /syncRate cannot be combined with rateLimiting/,
    )
    assert.throws(() => new RateLimitingThrottlerStorage({ strategy: {} as MemoryStrategy }), /strategy must be an engine strategy/)
  })

  it('counts each throttler name apart, a name with ":" included, and shares counts between storages on one store', async () => {
    const strategy = new MemoryStrategy()
    const [one, two] = [new RateLimitingThrottlerStorage({ strategy }), new RateLimitingThrottlerStorage({ strategy })]
    try {
      assert.equal((await one.increment('k', MINUTE, 5, MINUTE, 'a')).totalHits, 1)
      assert.equal((await one.increment('b:k', MINUTE, 5, MINUTE, 'a')).totalHits, 1)
      assert.equal((await one.increment('k', MINUTE, 5, MINUTE, 'a:b')).totalHits, 1)
      assert.equal((await two.increment('k', MINUTE, 5, MINUTE, 'a')).totalHits, 2, 'the same namespace on the same store')
      assert.equal((await two.increment('k', MINUTE, 5, 0, 'a')).totalHits, 3, 'blockDuration does not change the counts')
      assert.equal((await two.increment('k', 30_000, 5, 0, 'a')).totalHits, 1, 'another ttl is another window')
    } finally {
      await Promise.all([one.close(), two.close()])
    }
  })

  it('without a block (blockDuration 0, as throttler 6.7.1 passes it) denies without counting, Retry-After the exact wait', async () => {
    const clock = clockAt(0)
    const storage = new RateLimitingThrottlerStorage({ clock: clock.now })
    for (let i = 1; i <= 2; i++)
      assert.deepEqual(await storage.increment('k', 10_000, 2, 0, 'default'), {
        totalHits: i,
        timeToExpire: 10,
        isBlocked: false,
        timeToBlockExpire: 0,
      })
    assert.deepEqual(await storage.increment('k', 10_000, 2, 0, 'default'), {
      totalHits: 3,
      timeToExpire: 10,
      isBlocked: true,
      timeToBlockExpire: 15,
    })
    clock.advance(15_000)
    assert.deepEqual(await storage.increment('k', 10_000, 2, 0, 'default'), {
      totalHits: 2,
      timeToExpire: 5,
      isBlocked: false,
      timeToBlockExpire: 0,
    })
    await storage.close()
  })
})
