import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { after, describe, it } from 'node:test'
import express, { type Express } from 'express'
import { rateLimit } from 'express-rate-limit'
import { createExpressMiddleware, RateLimitingStore } from '../../src/adapters/express.js'
import { ConfigError, createFakeClock, MemoryStrategy } from '../../src/index.js'
import { sharedStoreCases } from '../support/shared-store.js'

const MINUTE = 1_699_999_980_000 // a minute boundary
const servers = new Set<Server>()

after(async () => {
  for (const server of servers) {
    server.closeAllConnections()
    server.close()
  }
})

async function listen(app: Express): Promise<string> {
  const server = app.listen(0, '127.0.0.1')
  servers.add(server)
  await once(server, 'listening')
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

function appWith(limiter: express.RequestHandler): Express {
  const app = express()
  app.use(limiter)
  app.get('/', (_req, res) => {
    res.send('ok')
  })
  app.get('/fail', (_req, res) => {
    res.status(500).send('boom')
  })
  return app
}

const byHeader = (req: express.Request) => req.get('x-client') ?? 'anonymous'

async function get(base: string, client = 'c1', path = '/', headers: Record<string, string> = {}): Promise<Response> {
  const res = await fetch(base + path, {
    headers: { 'x-client': client, ...headers },
  })
  await res.arrayBuffer()
  return res
}

async function statuses(base: string, n: number, client = 'c1'): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await get(base, client)).status)
  return out
}

function pk(key: string): string {
  return Buffer.from(createHash('sha256').update(key).digest('hex').slice(0, 12)).toString('base64')
}

describe('express-rate-limit with RateLimitingStore', () => {
  it('answers 429 after the limit, with draft-8 headers value by value', async () => {
    const clock = createFakeClock(MINUTE + 15_300) // 44.7 s left in the window
    const store = new RateLimitingStore({ clock: clock.now })
    const base = await listen(
      appWith(
        rateLimit({
          windowMs: 60_000,
          limit: 3,
          standardHeaders: 'draft-8',
          legacyHeaders: false,
          keyGenerator: byHeader,
          store,
        }),
      ),
    )
    const first = await get(base)
    assert.equal(first.status, 200)
    assert.equal(first.headers.get('ratelimit'), '"3-in-1min"; r=2; t=45')
    assert.equal(first.headers.get('ratelimit-policy'), `"3-in-1min"; q=3; w=60; pk=:${pk('c1')}:`)
    assert.equal(first.headers.get('retry-after'), null)
    assert.equal((await get(base)).headers.get('ratelimit'), '"3-in-1min"; r=1; t=45')
    assert.equal((await get(base)).headers.get('ratelimit'), '"3-in-1min"; r=0; t=45')
    const denied = await get(base)
    assert.equal(denied.status, 429)
    // four hits (the denied one counts, as in express-rate-limit) are three allowed again when
    // 4 * (1 - p) + 1 <= 3, half way through the next window: 44.7 s + 30 s
    assert.equal(denied.headers.get('ratelimit'), '"3-in-1min"; r=0; t=75')
    assert.equal(denied.headers.get('retry-after'), '75')
    assert.equal((await get(base, 'c2')).status, 200, 'another key has its own count')
  })

  it('sends draft-6, draft-7 and legacy headers the way express-rate-limit computes them', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const six = await listen(
      appWith(
        rateLimit({
          windowMs: 60_000,
          limit: 5,
          standardHeaders: 'draft-6',
          keyGenerator: byHeader,
          store: new RateLimitingStore({ clock: clock.now }),
        }),
      ),
    )
    const seven = await listen(
      appWith(
        rateLimit({
          windowMs: 60_000,
          limit: 5,
          standardHeaders: 'draft-7',
          legacyHeaders: false,
          keyGenerator: byHeader,
          store: new RateLimitingStore({ clock: clock.now }),
        }),
      ),
    )
    const res6 = await get(six)
    assert.equal(res6.headers.get('ratelimit-policy'), '5;w=60')
    assert.equal(res6.headers.get('ratelimit-limit'), '5')
    assert.equal(res6.headers.get('ratelimit-remaining'), '4')
    assert.equal(res6.headers.get('ratelimit-reset'), '45')
    assert.equal(res6.headers.get('x-ratelimit-limit'), '5')
    assert.equal(res6.headers.get('x-ratelimit-remaining'), '4')
    const reset = Number(res6.headers.get('x-ratelimit-reset'))
    const expected = Math.ceil((Date.now() + 44_700) / 1000)
    assert.ok(Math.abs(reset - expected) <= 1, `X-RateLimit-Reset ${reset} is the window end in epoch seconds (${expected})`)
    const res7 = await get(seven)
    assert.equal(res7.headers.get('ratelimit-policy'), '5;w=60')
    assert.equal(res7.headers.get('ratelimit'), 'limit=5, remaining=4, reset=45')
    assert.equal(res7.headers.get('x-ratelimit-limit'), null)
  })

  it('slides across a window boundary instead of granting a fresh burst', async () => {
    const clock = createFakeClock(MINUTE + 50_000)
    const store = new RateLimitingStore({ clock: clock.now })
    const base = await listen(
      appWith(
        rateLimit({
          windowMs: 60_000,
          limit: 10,
          keyGenerator: byHeader,
          store,
        }),
      ),
    )
    assert.deepEqual(await statuses(base, 11), [...Array(10).fill(200), 429])
    clock.set(MINUTE + 61_000) // 1 s into the next window: a fixed window would allow 10 again
    assert.deepEqual(await statuses(base, 3), [429, 429, 429])
    clock.set(MINUTE + 90_000) // half way through the window
    // 11 hits of the previous window at weight 0.5 plus the 3 denied ones of this window: 8.5;
    // a request passes while ceil(rate + 1) <= 10
    assert.deepEqual(await statuses(base, 3), [200, 429, 429])
    clock.set(MINUTE + 150_000) // the next window: 6 hits (1 allowed, 5 denied) at weight 0.5, so 7 pass
    assert.deepEqual(await statuses(base, 9), [200, 200, 200, 200, 200, 200, 200, 429, 429])
  })

  it('takes back failed requests with skipFailedRequests (decrement)', async () => {
    const clock = createFakeClock(MINUTE)
    const store = new RateLimitingStore({ clock: clock.now })
    const base = await listen(
      appWith(
        rateLimit({
          windowMs: 60_000,
          limit: 2,
          skipFailedRequests: true,
          keyGenerator: byHeader,
          store,
        }),
      ),
    )
    for (let i = 0; i < 3; i++) assert.equal((await get(base, 'c1', '/fail')).status, 500)
    // the decrement runs when the response finishes: let it land
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(await statuses(base, 3), [200, 200, 429])
  })

  it('resets a key through the rate limiter and reads it back with getKey', async () => {
    const clock = createFakeClock(MINUTE)
    const store = new RateLimitingStore({ clock: clock.now })
    const limiter = rateLimit({
      windowMs: 60_000,
      limit: 2,
      keyGenerator: byHeader,
      store,
    })
    const base = await listen(appWith(limiter))
    await statuses(base, 2)
    assert.equal((await limiter.getKey('c1'))?.totalHits, 2)
    assert.equal((await store.get('nobody'))?.totalHits, 0, 'a key without hits reads as 0 hits, as rate-limit-redis answers')
    await limiter.resetKey('c1')
    await new Promise((resolve) => setImmediate(resolve))
    assert.deepEqual(await statuses(base, 3), [200, 200, 429])
  })

  it('refuses an invalid windowMs once, when the limiter is built, naming it', async () => {
    for (const windowMs of [-1, Number.NaN, 0, 1.5]) {
      const errors: unknown[] = []
      const logger = { warn() {}, error: (err: unknown) => errors.push(err) }
      const store = new RateLimitingStore()
      const limiter = rateLimit({ windowMs, limit: 2, store, logger, validate: false })
      assert.equal(errors.length, 1, `windowMs ${windowMs}: logged once, at build`)
      assert.ok(
        errors[0] instanceof ConfigError && /RateLimitingStore: windowMs must be a positive whole number of ms/.test(errors[0].message),
      )
      // no limiter without a window: requests fail (express-rate-limit's passOnStoreError lets them through instead)
      const base = await listen(appWith(limiter))
      assert.equal((await get(base)).status, 500)
      assert.equal(errors.length, 1, 'not logged again per request')
    }
  })

  describe('a store failure in synchronous mode', () => {
    async function baseWith(storeOptions: Record<string, unknown>, limiterOptions: Record<string, unknown> = {}) {
      const strategy = new MemoryStrategy()
      const clock = createFakeClock(MINUTE + 15_000)
      const store = new RateLimitingStore({ strategy, clock: clock.now, storeTimeoutMs: 50, ...storeOptions })
      const logged: unknown[] = []
      const logger = { warn() {}, error: (err: unknown) => logged.push(err) }
      const base = await listen(
        appWith(rateLimit({ windowMs: 60_000, limit: 2, keyGenerator: byHeader, store, logger, ...limiterOptions })),
      )
      assert.equal((await get(base)).status, 200)
      strategy.down()
      return { base, logged }
    }

    it('goes to passOnStoreError when onStoreError is not set, as with express-rate-limit’s own stores', async () => {
      const failing = await baseWith({})
      assert.equal((await get(failing.base)).status, 500, 'passOnStoreError false: the error answers')
      const passing = await baseWith({}, { passOnStoreError: true })
      assert.deepEqual(await statuses(passing.base, 3), [200, 200, 200], 'passOnStoreError true: requests pass')
      assert.equal(passing.logged.length, 3, 'and express-rate-limit logs each failure')
    })

    it('allows with onStoreError "allow", denies with "deny", decides on local counts with "local"', async () => {
      assert.deepEqual(await statuses((await baseWith({ onStoreError: 'allow' })).base, 3), [200, 200, 200])
      assert.equal((await get((await baseWith({ onStoreError: 'deny' })).base)).status, 429)
      assert.deepEqual(await statuses((await baseWith({ onStoreError: 'local' })).base, 2), [200, 429])
    })

    it('answers "allow" with a count express-rate-limit accepts: nothing logged, one hit used', async () => {
      const { base, logged } = await baseWith({ onStoreError: 'allow' }, { standardHeaders: 'draft-7', legacyHeaders: false })
      for (let i = 0; i < 3; i++) {
        const res = await get(base)
        assert.equal(res.status, 200)
        assert.equal(res.headers.get('ratelimit'), 'limit=2, remaining=1, reset=45', 'as after a first hit')
      }
      // before: totalHits 0, which express-rate-limit logs as ERR_ERL_INVALID_HITS on every request
      assert.deepEqual(logged, [])
    })
  })

  sharedStoreCases('express', async ({ strategy, namespace, clock, limit }) => {
    const stores = [0, 1].map(() => new RateLimitingStore({ strategy, namespace, clock }))
    assert.equal(stores[0]?.localKeys, false)
    const bases = await Promise.all(
      stores.map((store) => listen(appWith(rateLimit({ windowMs: 60_000, limit, keyGenerator: byHeader, store })))),
    )
    return {
      send: async (i) => (await get(bases[i] as string, 'shared')).status,
      close: async () => {
        for (const store of stores) await store.shutdown()
      },
    }
  })
})

describe('createExpressMiddleware', () => {
  it('checks several limits together and reports each in draft-8 headers', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const mw = createExpressMiddleware({
      limits: [
        { limit: 2, windowMs: 1000 },
        { limit: 5, windowMs: 60_000 },
      ],
      key: byHeader,
      clock: clock.now,
    })
    assert.equal(mw.name, 'rateLimitMiddleware')
    const base = await listen(appWith(mw))
    const first = await get(base)
    assert.equal(first.headers.get('ratelimit-policy'), '"2-in-1sec";q=2;w=1, "5-in-1min";q=5;w=60')
    assert.equal(first.headers.get('ratelimit'), '"2-in-1sec";r=1;t=1, "5-in-1min";r=4;t=45')
    assert.equal((await get(base)).status, 200)
    const third = await get(base)
    assert.equal(third.status, 429)
    // the 1 s limit decides: 3 hits (the denied one counts) fall to 1 at 2/3 of the next second
    assert.equal(third.headers.get('retry-after'), '2')
    clock.advance(2000) // both earlier seconds are gone from the 1 s limit
    assert.equal((await get(base)).status, 200)
    assert.equal((await get(base)).status, 200)
    assert.equal((await get(base)).status, 429, 'the minute limit (5, denied hits counted) decides now')
  })

  it('charges a cost per request, skips what skip says, and sends draft-7 and legacy headers', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const base = await listen(
      appWith(
        createExpressMiddleware({
          limit: 10,
          windowMs: 60_000,
          key: byHeader,
          cost: (req) => Number(req.get('x-cost') ?? 1),
          skip: (req) => req.get('x-skip') === 'yes',
          headers: 'draft-7',
          legacyHeaders: true,
          clock: clock.now,
        }),
      ),
    )
    const heavy = await get(base, 'c1', '/', { 'x-cost': '6' })
    assert.equal(heavy.headers.get('ratelimit'), 'limit=10, remaining=4, reset=45')
    assert.equal(heavy.headers.get('ratelimit-policy'), '10;w=60')
    assert.equal(heavy.headers.get('x-ratelimit-limit'), '10')
    assert.equal(heavy.headers.get('x-ratelimit-remaining'), '4')
    assert.equal(heavy.headers.get('x-ratelimit-reset'), String(Math.ceil((MINUTE + 60_000) / 1000)))
    const skipped = await get(base, 'c1', '/', {
      'x-skip': 'yes',
      'x-cost': '100',
    })
    assert.equal(skipped.status, 200)
    assert.equal(skipped.headers.get('ratelimit'), null, 'a skipped request gets no headers')
    assert.equal((await get(base, 'c1', '/', { 'x-cost': '5' })).status, 429, '6 + 5 > 10')
    assert.equal((await get(base, 'c1', '/', { 'x-cost': '4' })).status, 429, 'the denied hit of 5 counted')
  })

  it('sends X-RateLimit-Reset on a 429 at the moment a request is allowed again, as Retry-After', async () => {
    const clock = createFakeClock(MINUTE + 40_000) // 20 s left in the window
    const base = await listen(
      appWith(createExpressMiddleware({ limit: 3, windowMs: 60_000, key: byHeader, legacyHeaders: true, clock: clock.now })),
    )
    const allowed = await get(base)
    assert.equal(allowed.headers.get('x-ratelimit-reset'), String((MINUTE + 60_000) / 1000), 'allowed: the end of the window')
    assert.deepEqual(await statuses(base, 2), [200, 200])
    const denied = await get(base)
    assert.equal(denied.status, 429)
    // 4 hits are 3 allowed again when 4 * (1 - p) + 1 <= 3, half way through the next window
    assert.equal(denied.headers.get('retry-after'), '50')
    const reset = Number(denied.headers.get('x-ratelimit-reset'))
    assert.equal(reset, (MINUTE + 90_000) / 1000, 'not the end of the window, 30 s before a request passes')
    clock.set(reset * 1000) // a client that trusts the header retries then, and passes
    assert.equal((await get(base)).status, 200)
  })

  it('warns when two middlewares share counts on one strategy through their default namespace', async () => {
    const warnings: Error[] = []
    const onWarning = (w: Error) => {
      if ((w as Error & { code?: string }).code === 'RATELIMITING_SHARED_NAMESPACE') warnings.push(w)
    }
    process.on('warning', onWarning)
    try {
      const strategy = new MemoryStrategy()
      const clock = createFakeClock(MINUTE)
      const options = { limit: 3, windowMs: 60_000, key: byHeader, strategy, clock: clock.now }
      const login = createExpressMiddleware(options)
      const resetPassword = createExpressMiddleware(options)
      const app = express()
      app.get('/login', login, (_req, res) => {
        res.send('ok')
      })
      app.get('/reset-password', resetPassword, (_req, res) => {
        res.send('ok')
      })
      const base = await listen(app)
      const codes = []
      for (const path of ['/login', '/login', '/login', '/reset-password']) codes.push((await get(base, 'c1', path)).status)
      assert.deepEqual(codes, [200, 200, 200, 429], 'one count for both routes, as documented')
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(warnings.length, 1)
      assert.match(
        warnings[0]?.message ?? '',
        /^createExpressMiddleware: two middlewares count under the default namespace "createExpressMiddleware-3-in-1min" on one strategy, so they share their counts/,
      )
      assert.equal(warnings[0]?.name, 'RateLimitingWarning')
      // a namespace of one's own (or another strategy, or none) says which counts are whose: no warning
      const apart = [
        createExpressMiddleware({ ...options, namespace: 'login' }),
        createExpressMiddleware({ ...options, namespace: 'reset' }),
      ]
      const noStrategy = [0, 1].map(() => createExpressMiddleware({ limit: 3, windowMs: 60_000, key: byHeader }))
      // a middleware closed frees its name: an app rebuilt in the same process does not warn
      await login.close()
      await resetPassword.close()
      const rebuilt = createExpressMiddleware(options)
      await new Promise((resolve) => setImmediate(resolve))
      assert.equal(warnings.length, 1)
      for (const mw of [rebuilt, ...apart, ...noStrategy]) await mw.close()
    } finally {
      process.off('warning', onWarning)
    }
  })

  it('lets a custom handler answer denials', async () => {
    const clock = createFakeClock(MINUTE)
    const base = await listen(
      appWith(
        createExpressMiddleware({
          limit: 1,
          key: byHeader,
          clock: clock.now,
          handler: (_req, res, _next, outcome) => {
            res.status(429).json({
              error: 'slow down',
              retryAfterMs: outcome.decision.retryAfterMs,
            })
          },
        }),
      ),
    )
    await get(base)
    const res = await fetch(base, { headers: { 'x-client': 'c1' } })
    assert.equal(res.status, 429)
    assert.deepEqual(await res.json(), {
      error: 'slow down',
      retryAfterMs: 120_000,
    })
  })

  it('follows the fail policy when the store is down', async () => {
    const strategy = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const deny = await listen(
      appWith(
        createExpressMiddleware({
          limit: 5,
          key: byHeader,
          strategy,
          onStoreError: 'deny',
          clock: clock.now,
        }),
      ),
    )
    const allow = await listen(
      appWith(
        createExpressMiddleware({
          limit: 5,
          key: byHeader,
          strategy,
          onStoreError: 'allow',
          clock: clock.now,
          namespace: 'allow',
        }),
      ),
    )
    assert.equal((await get(deny)).status, 200)
    strategy.down()
    const refused = await get(deny)
    assert.equal(refused.status, 503)
    assert.equal(
      await fetch(deny, { headers: { 'x-client': 'c1' } }).then((r) => r.text()),
      'Rate limiting is unavailable, please try again later.',
    )
    assert.equal((await get(allow)).status, 200)
    strategy.up()
    assert.equal((await get(deny)).status, 200)
  })

  it('limits in windows of any whole number of ms (1.5 s here)', async () => {
    const clock = createFakeClock(MINUTE + 300)
    const mw = createExpressMiddleware({ limit: 2, windowMs: 1500, key: byHeader, clock: clock.now, headers: 'draft-8' })
    const base = await listen(appWith(mw))
    const first = await get(base)
    assert.equal(first.status, 200)
    assert.match(first.headers.get('ratelimit-policy') ?? '', /^"2-in-1\.5sec";q=2;/, "express-rate-limit's policy name")
    assert.deepEqual(await statuses(base, 2), [200, 429])
    clock.advance(3000) // two 1.5 s windows later
    assert.equal((await get(base)).status, 200)
  })

  it('refuses bad options with errors that name them', () => {
    for (const windowMs of [0, -1, Number.NaN, 1.5])
      assert.throws(
        () => createExpressMiddleware({ limit: 10, windowMs }),
        /createExpressMiddleware: windowMs must be a positive whole number of ms/,
      )
    assert.throws(() => createExpressMiddleware({ limit: -1 }), /limit must be a positive number, got -1/)
    assert.throws(() => createExpressMiddleware({ limit: 1, headers: 'draft-99' as 'draft-8' }), /headers must be/)
    assert.throws(() => createExpressMiddleware({ limits: [] }), /limits must be a non-empty array/)
    assert.throws(() => createExpressMiddleware({ limit: 1, cost: -2 }), /cost must be a number >= 0/)
  })
})
