import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { type Context, Hono } from 'hono'
import { createHonoMiddleware, type HonoMiddlewareOptions } from '../../src/adapters/hono.js'
import { ConfigError, createFakeClock, MemoryStrategy, RateLimiting } from '../../src/index.js'
import { sharedStoreCases } from '../support/shared-store.js'

const MINUTE = 1_699_999_980_000 // a minute boundary

const byHeader = (c: Context) => c.req.header('x-client') ?? 'anonymous'

function appWith(
  options: Omit<HonoMiddlewareOptions, 'key'> & {
    key?: HonoMiddlewareOptions['key']
  },
): Hono {
  const app = new Hono()
  app.use('*', createHonoMiddleware({ key: byHeader, ...options }))
  app.get('/', (c) => c.text('ok'))
  app.get('/json', (c) => c.json({ ok: true }))
  app.get('/raw', () => new Response('raw', { headers: { 'x-own': 'yes' } }))
  return app
}

function request(app: Hono, client = 'c1', path = '/', headers: Record<string, string> = {}): Promise<Response> {
  return Promise.resolve(app.request(path, { headers: { 'x-client': client, ...headers } }))
}

async function statuses(app: Hono, n: number, client = 'c1'): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push((await request(app, client)).status)
  return out
}

describe('createHonoMiddleware', () => {
  it('answers 429 after the limit, with draft-8 headers value by value', async () => {
    const clock = createFakeClock(MINUTE + 15_300) // 44.7 s left in the window
    const app = appWith({ limit: 3, windowMs: 60_000, clock: clock.now })
    const first = await request(app)
    assert.equal(first.status, 200)
    assert.equal(await first.text(), 'ok')
    assert.equal(first.headers.get('ratelimit-policy'), '"3-in-1min";q=3;w=60')
    assert.equal(first.headers.get('ratelimit'), '"3-in-1min";r=2;t=45')
    assert.equal((await request(app, 'c1', '/json')).headers.get('ratelimit'), '"3-in-1min";r=1;t=45', 'c.json keeps the headers')
    const raw = await request(app, 'c1', '/raw')
    assert.equal(raw.headers.get('ratelimit'), '"3-in-1min";r=0;t=45', 'a Response built by the handler gets them too')
    assert.equal(raw.headers.get('x-own'), 'yes')
    const denied = await request(app)
    assert.equal(denied.status, 429)
    assert.equal(await denied.text(), 'Too many requests, please try again later.')
    assert.equal(denied.headers.get('ratelimit'), '"3-in-1min";r=0;t=75')
    assert.equal(denied.headers.get('retry-after'), '75')
    assert.equal((await request(app, 'c2')).status, 200, 'another key has its own count')
  })

  it('sends draft-6, draft-7, kong and legacy headers', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const six = await request(appWith({ limit: 5, headers: 'draft-6', clock: clock.now }))
    assert.equal(six.headers.get('ratelimit-policy'), '5;w=60')
    assert.equal(six.headers.get('ratelimit-limit'), '5')
    assert.equal(six.headers.get('ratelimit-remaining'), '4')
    assert.equal(six.headers.get('ratelimit-reset'), '45')
    const seven = await request(
      appWith({
        limit: 5,
        headers: 'draft-7',
        legacyHeaders: true,
        clock: clock.now,
      }),
    )
    assert.equal(seven.headers.get('ratelimit'), 'limit=5, remaining=4, reset=45')
    assert.equal(seven.headers.get('x-ratelimit-limit'), '5')
    assert.equal(seven.headers.get('x-ratelimit-remaining'), '4')
    assert.equal(seven.headers.get('x-ratelimit-reset'), String((MINUTE + 60_000) / 1000))
    const kong = await request(appWith({ limit: 5, headers: 'kong', clock: clock.now }))
    assert.equal(kong.headers.get('x-ratelimit-limit-minute'), '5')
    assert.equal(kong.headers.get('x-ratelimit-remaining-minute'), '4')
    const none = await request(appWith({ limit: 5, headers: false, clock: clock.now }))
    assert.equal(none.headers.get('ratelimit'), null)
  })

  it('slides across a window boundary instead of granting a fresh burst', async () => {
    const clock = createFakeClock(MINUTE + 50_000)
    const app = appWith({ limit: 10, clock: clock.now, countDenied: false })
    assert.deepEqual(await statuses(app, 11), [...Array(10).fill(200), 429])
    clock.set(MINUTE + 61_000) // a fixed window would allow 10 again here
    assert.deepEqual(await statuses(app, 2), [429, 429])
    clock.set(MINUTE + 90_000) // 10 * 0.5 = 5: five more fit (denied hits do not count here)
    assert.deepEqual(await statuses(app, 6), [200, 200, 200, 200, 200, 429])
  })

  it('checks several limits, charges a cost, skips, and lets a handler answer', async () => {
    const clock = createFakeClock(MINUTE)
    const app = appWith({
      limits: [
        { limit: 3, windowMs: 1000, name: 'burst' },
        { limit: 10, windowMs: 60_000, name: 'steady' },
      ],
      cost: (c) => Number(c.req.header('x-cost') ?? 1),
      skip: (c) => c.req.header('x-skip') === 'yes',
      clock: clock.now,
      handler: (c, outcome) => c.json({ error: 'rate limited', policy: outcome.decision.name }, 429),
    })
    const first = await request(app, 'c1', '/', { 'x-cost': '2' })
    assert.equal(first.headers.get('ratelimit-policy'), '"burst";q=3;w=1, "steady";q=10;w=60')
    assert.equal(first.headers.get('ratelimit'), '"burst";r=1;t=1, "steady";r=8;t=60')
    const burst = await request(app, 'c1', '/', { 'x-cost': '2' })
    assert.equal(burst.status, 429)
    assert.deepEqual(await burst.json(), {
      error: 'rate limited',
      policy: 'burst',
    })
    assert.equal((await request(app, 'c1', '/', { 'x-skip': 'yes', 'x-cost': '99' })).status, 200)
    for (let i = 0; i < 3; i++) {
      clock.advance(2000)
      await request(app, 'c1', '/', { 'x-cost': '2' })
    }
    const steady = await request(app, 'c1', '/', { 'x-cost': '1' })
    assert.deepEqual(await steady.json(), { error: 'rate limited', policy: 'steady' }, '2 + 2 + 6 = 10 in the minute')
  })

  it('uses a namespace defined by the user, in any sync mode', async () => {
    const clock = createFakeClock(MINUTE)
    const rl = RateLimiting.newInstance('hono-user')
    rl.new({ namespace: 'api', windowSizes: [60], clock: clock.now })
    const app = new Hono()
    app.use(
      '*',
      createHonoMiddleware({
        rateLimiting: rl,
        namespace: 'api',
        limit: 2,
        key: byHeader,
      }),
    )
    app.get('/', (c) => c.text('ok'))
    assert.deepEqual(await statuses(app, 3), [200, 200, 429])
    assert.equal(rl.slidingWindow('c1', 60, undefined, 'api'), 3, 'the counts are in the user namespace')
    assert.throws(
      () =>
        createHonoMiddleware({
          rateLimiting: rl,
          namespace: 'api',
          limit: 2,
          windowMs: 1000,
          key: byHeader,
        }),
      /limits\[0\]\.window 1 is not one of namespace "api"'s windowSizes \[60\]/,
    )
    assert.throws(
      () =>
        createHonoMiddleware({
          rateLimiting: rl,
          namespace: 'api',
          limit: 2,
          key: byHeader,
          syncRate: 0,
        }),
      /syncRate cannot be combined with rateLimiting/,
    )
    await rl.close()
  })

  it('follows the fail policy when the store is down', async () => {
    const strategy = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const deny = appWith({
      limit: 5,
      strategy,
      onStoreError: 'deny',
      clock: clock.now,
    })
    const allow = appWith({
      limit: 5,
      strategy,
      onStoreError: 'allow',
      clock: clock.now,
      namespace: 'hono-allow',
    })
    const local = appWith({
      limit: 1,
      strategy,
      onStoreError: 'local',
      clock: clock.now,
      namespace: 'hono-local',
    })
    strategy.down()
    const refused = await request(deny)
    assert.equal(refused.status, 503)
    assert.equal(await refused.text(), 'Rate limiting is unavailable, please try again later.')
    assert.equal((await request(allow)).status, 200)
    assert.deepEqual([(await request(local)).status, (await request(local)).status], [200, 429], 'local decides on local counts')
    strategy.up()
    assert.equal((await request(deny)).status, 200)
  })

  it('sends the headers with a Response the handler builds itself', async () => {
    const clock = createFakeClock(MINUTE + 15_300)
    const app = appWith({ limit: 1, clock: clock.now, handler: () => new Response('no', { status: 429 }) })
    await request(app)
    const denied = await request(app)
    assert.equal(denied.status, 429)
    assert.equal(await denied.text(), 'no')
    assert.equal(denied.headers.get('ratelimit'), '"1-in-1min";r=0;t=105')
    assert.equal(denied.headers.get('retry-after'), '105')
  })

  it('requires a key function', () => {
    assert.throws(
      () => createHonoMiddleware({ limit: 1 } as HonoMiddlewareOptions),
      (err: unknown) => err instanceof ConfigError && /key is required/.test(err.message),
    )
  })

  sharedStoreCases('hono', async ({ strategy, namespace, clock, limit }) => {
    const apps = [0, 1].map(() => appWith({ limit, strategy, namespace, clock, countDenied: false }))
    return { send: async (i) => (await request(apps[i] as Hono, 'shared')).status, close: async () => {} }
  })
})
