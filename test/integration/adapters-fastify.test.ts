import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, it } from 'node:test'
import rateLimit from '@fastify/rate-limit'
import Fastify, { type FastifyInstance, type FastifyRequest } from 'fastify'
import { createFastifyHook, createFastifyStore, fastifyRateLimiting } from '../../src/adapters/fastify.js'
import { createFakeClock, MemoryStrategy } from '../../src/index.js'
import { sharedStoreCases } from '../support/shared-store.js'

const MINUTE = 1_699_999_980_000 // a minute boundary

const byHeader = (req: FastifyRequest) => String(req.headers['x-client'] ?? 'anonymous')

function inject(app: FastifyInstance, client = 'c1', url = '/', headers: Record<string, string> = {}) {
  return app.inject({
    method: 'GET',
    url,
    headers: { 'x-client': client, ...headers },
  })
}

function pk(key: string): string {
  return Buffer.from(createHash('sha256').update(key).digest('hex').slice(0, 12)).toString('base64')
}

async function statuses(app: FastifyInstance, n: number, client = 'c1', url = '/'): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await inject(app, client, url)).statusCode)
  return out
}

async function withPluginStore(options: Record<string, unknown>): Promise<FastifyInstance> {
  const app = Fastify()
  await app.register(rateLimit, { keyGenerator: byHeader, ...options })
  app.get('/', async () => 'ok')
  app.get('/login', { config: { rateLimit: { max: 1, timeWindow: 1000 } } }, async () => 'login')
  await app.ready()
  return app
}

describe('@fastify/rate-limit with createFastifyStore', () => {
  it('answers 429 after the limit, with its headers value by value', async () => {
    const clock = createFakeClock(MINUTE + 15_300) // 44.7 s left in the window
    const app = await withPluginStore({
      max: 3,
      timeWindow: 60_000,
      store: createFastifyStore({ clock: clock.now }),
    })
    const first = await inject(app)
    assert.equal(first.statusCode, 200)
    assert.equal(first.headers['x-ratelimit-limit'], '3')
    assert.equal(first.headers['x-ratelimit-remaining'], '2')
    assert.equal(first.headers['x-ratelimit-reset'], '45')
    assert.equal(first.headers['retry-after'], undefined)
    assert.deepEqual(await statuses(app, 2), [200, 200])
    const denied = await inject(app)
    assert.equal(denied.statusCode, 429)
    assert.equal(denied.headers['x-ratelimit-remaining'], '0')
    // 4 hits are 3 allowed again half way through the next window: 44.7 s + 30 s
    assert.equal(denied.headers['x-ratelimit-reset'], '75')
    assert.equal(denied.headers['retry-after'], '75')
    assert.equal(denied.json().message, 'Rate limit exceeded, retry in 1 minute')
    assert.equal((await inject(app, 'c2')).statusCode, 200, 'another key has its own count')
    await app.close()
  })

  it('sends the draft-spec headers with enableDraftSpec', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const app = await withPluginStore({
      max: 2,
      timeWindow: 60_000,
      enableDraftSpec: true,
      store: createFastifyStore({ clock: clock.now }),
    })
    const first = await inject(app)
    assert.equal(first.headers['ratelimit-limit'], '2')
    assert.equal(first.headers['ratelimit-remaining'], '1')
    assert.equal(first.headers['ratelimit-reset'], '45')
    await inject(app)
    const denied = await inject(app)
    assert.equal(denied.statusCode, 429)
    assert.equal(denied.headers['ratelimit-remaining'], '0')
    // 3 hits weigh 2 - 1 = 1 two thirds of the way through the next window: 44.7 s + 40 s
    assert.equal(denied.headers['retry-after'], '85')
    await app.close()
  })

  it('counts route-level limits apart (child stores)', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const app = await withPluginStore({
      max: 5,
      timeWindow: 60_000,
      store: createFastifyStore({ clock: clock.now }),
    })
    assert.deepEqual(await statuses(app, 2, 'c1', '/login'), [200, 429])
    assert.equal((await inject(app, 'c1', '/login')).headers['x-ratelimit-limit'], '1')
    assert.deepEqual(await statuses(app, 5), [200, 200, 200, 200, 200], 'the login hits do not count for /')
    clock.advance(2000) // two 1 s windows later the login limit is free again
    assert.equal((await inject(app, 'c1', '/login')).statusCode, 200)
    await app.close()
  })

  it('slides across a window boundary instead of granting a fresh burst', async () => {
    const clock = createFakeClock(MINUTE + 50_000)
    const app = await withPluginStore({
      max: 10,
      timeWindow: 60_000,
      store: createFastifyStore({ clock: clock.now }),
    })
    assert.deepEqual(await statuses(app, 11), [...Array(10).fill(200), 429])
    clock.set(MINUTE + 61_000) // a fixed window would allow 10 again here
    assert.deepEqual(await statuses(app, 3), [429, 429, 429])
    clock.set(MINUTE + 90_000) // 11 * 0.5 + 3 = 8.5: one more fits under 10
    assert.deepEqual(await statuses(app, 3), [200, 429, 429])
    await app.close()
  })

  it('reads without counting ({ increment: false })', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const app = Fastify()
    await app.register(rateLimit, {
      global: false,
      keyGenerator: byHeader,
      store: createFastifyStore({ clock: clock.now }),
    })
    const check = app.createRateLimit({ max: 3, timeWindow: 60_000 })
    app.get('/', async (req) => {
      const counted = await check(req)
      const peeked = await check(req, { increment: false })
      return {
        counted: 'remaining' in counted ? counted.remaining : -1,
        peeked: 'remaining' in peeked ? peeked.remaining : -1,
      }
    })
    await app.ready()
    assert.deepEqual((await inject(app)).json(), { counted: 2, peeked: 2 })
    assert.deepEqual((await inject(app)).json(), { counted: 1, peeked: 1 })
    await app.close()
  })

  it('counts each app.rateLimit() and app.createRateLimit() apart, as LocalStore does', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const app = Fastify()
    await app.register(rateLimit, { global: false, keyGenerator: byHeader, store: createFastifyStore({ clock: clock.now }) })
    app.get('/a', { preHandler: app.rateLimit({ max: 1, timeWindow: 60_000 }) }, async () => 'a')
    app.get('/b', { preHandler: app.rateLimit({ max: 1, timeWindow: 60_000 }) }, async () => 'b')
    const check = app.createRateLimit({ max: 1, timeWindow: 60_000 })
    app.get('/c', async (req) => ('remaining' in (await check(req)) ? 'checked' : 'allowed'))
    await app.ready()
    assert.equal((await inject(app, 'c1', '/a')).statusCode, 200)
    assert.equal((await inject(app, 'c1', '/b')).statusCode, 200, 'not the counter of /a')
    assert.equal((await inject(app, 'c1', '/a')).statusCode, 429)
    assert.equal((await inject(app, 'c1', '/b')).statusCode, 429)
    await inject(app, 'c1', '/c')
    assert.equal((await inject(app, 'c1', '/a')).headers['x-ratelimit-remaining'], '0')
    await app.close()
  })

  it('refuses continueExceeding and exponentialBackoff when the plugin or the route is registered, naming the option', async () => {
    for (const option of ['continueExceeding', 'exponentialBackoff']) {
      const app = Fastify()
      await assert.rejects(
        async () => {
          await app.register(rateLimit, { max: 2, timeWindow: 1000, [option]: true, store: createFastifyStore() })
        },
        new RegExp(`createFastifyStore: ${option} \\(plugin options\\) is not supported: .*fixed window`),
      )
      await app.close()
      const routeApp = Fastify()
      await routeApp.register(rateLimit, { global: false, store: createFastifyStore() })
      assert.throws(
        () => routeApp.get('/', { config: { rateLimit: { max: 2, [option]: true } } }, async () => 'ok'),
        new RegExp(`createFastifyStore: ${option} \\(route /\\) is not supported`),
      )
      assert.throws(() => routeApp.rateLimit({ max: 2, [option]: true }), new RegExp(`${option} \\(app.rateLimit\\(\\) options\\)`))
      await routeApp.close()
    }
  })

  it('refuses a timeWindow the engine cannot use when the plugin is registered, naming it', async () => {
    const app = Fastify()
    await assert.rejects(async () => {
      await app.register(rateLimit, { max: 2, timeWindow: 0, store: createFastifyStore() })
    }, /createFastifyStore: timeWindow must be a positive whole number of ms, got 0/)
    await app.close()
  })

  describe('a store failure in synchronous mode', () => {
    async function appWith(storeOptions: Record<string, unknown>, pluginOptions: Record<string, unknown> = {}) {
      const strategy = new MemoryStrategy()
      const clock = createFakeClock(MINUTE + 15_300)
      const app = await withPluginStore({
        max: 2,
        timeWindow: 60_000,
        store: createFastifyStore({ strategy, clock: clock.now, storeTimeoutMs: 50, ...storeOptions }),
        ...pluginOptions,
      })
      assert.equal((await inject(app)).statusCode, 200)
      strategy.down()
      return app
    }

    it('goes to skipOnError when onStoreError is not set, as with the package’s own stores', async () => {
      const failing = await appWith({})
      const res = await inject(failing)
      assert.equal(res.statusCode, 500, 'skipOnError false: the error answers')
      await failing.close()
      const skipping = await appWith({}, { skipOnError: true })
      const passed = await inject(skipping)
      assert.equal(passed.statusCode, 200, 'skipOnError true: the request passes')
      assert.equal(passed.headers['x-ratelimit-remaining'], '2', 'as @fastify/rate-limit reports a skipped check')
      await skipping.close()
    })

    it('allows with onStoreError "allow", denies with "deny", decides on local counts with "local"', async () => {
      const allow = await appWith({ onStoreError: 'allow' })
      assert.deepEqual(await statuses(allow, 3), [200, 200, 200])
      await allow.close()
      const deny = await appWith({ onStoreError: 'deny' })
      assert.equal((await inject(deny)).statusCode, 429)
      await deny.close()
      const local = await appWith({ onStoreError: 'local' })
      assert.deepEqual(await statuses(local, 2), [200, 429], 'the hit before the failure counts here')
      await local.close()
    })
  })

  sharedStoreCases('fastify', async ({ strategy, namespace, clock, limit }) => {
    const stores = [0, 1].map(() => createFastifyStore({ strategy, namespace, clock }))
    const apps = await Promise.all(stores.map((store) => withPluginStore({ max: limit, timeWindow: 60_000, store })))
    return {
      send: async (i) => (await inject(apps[i] as FastifyInstance, 'shared')).statusCode,
      close: async () => {
        for (const app of apps) await app.close()
        for (const store of stores) await store.close()
      },
    }
  })
})

describe('fastifyRateLimiting plugin and createFastifyHook', () => {
  it('limits every route with IETF headers and a 429', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const app = Fastify()
    await app.register(fastifyRateLimiting, {
      limit: 2,
      windowMs: 60_000,
      key: byHeader,
      clock: clock.now,
      partitionKey: true,
    })
    app.get('/', async () => 'ok')
    await app.ready()
    const first = await inject(app)
    assert.equal(first.headers['ratelimit-policy'], `"2-in-1min";q=2;w=60;pk=:${pk('c1')}:`)
    assert.equal(first.headers.ratelimit, '"2-in-1min";r=1;t=45')
    await inject(app)
    const denied = await inject(app)
    assert.equal(denied.statusCode, 429)
    assert.equal(denied.body, 'Too many requests, please try again later.')
    assert.equal(denied.headers.ratelimit, '"2-in-1min";r=0;t=85')
    assert.equal(denied.headers['retry-after'], '85')
    await app.close()
  })

  it('applies a hook to one route, with cost, skip and a custom handler', async () => {
    const clock = createFakeClock(MINUTE)
    const hook = createFastifyHook({
      limit: 10,
      windowMs: 60_000,
      key: byHeader,
      cost: (req) => Number(req.headers['x-cost'] ?? 1),
      skip: (req) => req.headers['x-skip'] === 'yes',
      headers: 'draft-6',
      clock: clock.now,
      handler: async (_req, reply, outcome) => {
        await reply.code(429).send({ denied: true, remaining: outcome.decision.remaining })
      },
    })
    assert.equal(hook.name, 'rateLimitHook')
    const app = Fastify()
    app.get('/limited', { onRequest: hook }, async () => 'ok')
    app.get('/free', async () => 'free')
    await app.ready()
    const heavy = await inject(app, 'c1', '/limited', { 'x-cost': '8' })
    assert.equal(heavy.statusCode, 200)
    assert.equal(heavy.headers['ratelimit-limit'], '10')
    assert.equal(heavy.headers['ratelimit-remaining'], '2')
    assert.equal(heavy.headers['ratelimit-reset'], '60')
    assert.equal(heavy.headers['ratelimit-policy'], '10;w=60')
    assert.equal((await inject(app, 'c1', '/limited', { 'x-skip': 'yes', 'x-cost': '50' })).statusCode, 200)
    const denied = await inject(app, 'c1', '/limited', { 'x-cost': '3' })
    assert.equal(denied.statusCode, 429)
    assert.deepEqual(denied.json(), { denied: true, remaining: 0 })
    assert.equal((await inject(app, 'c1', '/free')).headers['ratelimit-limit'], undefined)
    await app.close()
  })

  it('follows the fail policy when the store is down', async () => {
    const strategy = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const app = Fastify()
    await app.register(fastifyRateLimiting, {
      limit: 5,
      key: byHeader,
      strategy,
      onStoreError: 'deny',
      clock: clock.now,
    })
    app.get('/', async () => 'ok')
    await app.ready()
    assert.equal((await inject(app)).statusCode, 200)
    strategy.down()
    assert.equal((await inject(app)).statusCode, 503)
    strategy.up()
    assert.equal((await inject(app)).statusCode, 200)
    await app.close()
  })

  it('fails registration on a bad option, naming it', async () => {
    const app = Fastify()
    app.register(fastifyRateLimiting, { limit: 5, windowMs: -250 })
    await assert.rejects(async () => {
      await app.ready()
    }, /createFastifyHook: windowMs must be a positive whole number of ms, got -250/)
  })
})
