/**
 * Refunds through the real frameworks over real HTTP: our Express, Fastify (hook and plugin)
 * and Hono middleware with skipFailedRequests / skipSuccessfulRequests / requestWasSuccessful,
 * and express-rate-limit's own options over RateLimitingStore (its `decrement`). A refunded hit
 * gives its place back, a 429 under skipFailedRequests does not count, an aborted request is a
 * failure, and in synchronous mode a refund reaches another app instance through a shared
 * MemoryStrategy and the shared Redis (a unique prefix, deleted after).
 */
import assert from 'node:assert/strict'
import http, { type Server } from 'node:http'
import { after, describe, it } from 'node:test'
import { serve } from '@hono/node-server'
import express from 'express'
import { rateLimit } from 'express-rate-limit'
import Fastify, { type FastifyInstance } from 'fastify'
import { type Context, Hono } from 'hono'
import { Redis } from 'ioredis'
import { createExpressMiddleware, RateLimitingStore } from '../../src/adapters/express.js'
import { createFastifyHook, fastifyRateLimiting } from '../../src/adapters/fastify.js'
import { createHonoMiddleware } from '../../src/adapters/hono.js'
import { type Clock, ConfigError, createFakeClock, type FakeClock, MemoryStrategy, type Strategy } from '../../src/index.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { sharedRedisUrl } from '../support/redis-server.js'
import { closeServer, listening } from '../support/http-server.js'
import { deleteKeys, uniquePrefix } from './server-helpers.js'

const redisUrl = await sharedRedisUrl()
const redis = new Redis(redisUrl)
const prefix = uniquePrefix()
after(async () => {
  await deleteKeys(redis, prefix)
  redis.disconnect()
})

/** What a test asks of an app: the limit, the refund options, and where its counts live. */
interface Setup {
  readonly limit: number
  readonly clock: Clock
  readonly skipFailedRequests?: boolean
  readonly skipSuccessfulRequests?: boolean
  /** requestWasSuccessful: a status below 500 (a 404 is then a success). */
  readonly below500?: boolean
  /** requestWasSuccessful throws. */
  readonly throwing?: boolean
  readonly onError?: (error: Error) => void
  readonly strategy?: Strategy
  readonly namespace?: string
  /** Run by /late before it answers 500 (moves the fake clock). */
  readonly late?: () => void
}

interface Deferred {
  readonly promise: Promise<void>
  resolve(): void
}

function deferred(): Deferred {
  let resolve!: () => void
  const promise = new Promise<void>((r) => (resolve = r))
  return { promise, resolve }
}

/**
 * One running app: routes /ok (200), /fail (500), /missing (404), /late (500 after `late()`),
 * /slow (never answers before the client leaves).
 */
interface App {
  readonly base: string
  /** The /slow handler started; the server saw the client go. */
  readonly slow: { readonly started: Deferred; readonly gone: Deferred }
  /** Resolves when the refunds of the responses received so far are done. */
  settled(): Promise<void>
  close(): Promise<void>
}

interface Framework {
  readonly name: string
  /** Whether the app can take a strategy shared with another instance here. */
  readonly shared: boolean
  /** Whether a refund goes to the window of the hit's own time (express-rate-limit's decrement has none). */
  readonly hitTime: boolean
  start(setup: Setup): Promise<App>
}

// One event-loop turn: the server's 'finish'/'close' listeners and the microtasks after them have run.
const turn = () => new Promise<void>((resolve) => setImmediate(resolve))

function slowState() {
  return { started: deferred(), gone: deferred() }
}

function engineOptions(s: Setup) {
  return {
    clock: s.clock,
    ...(s.strategy === undefined ? {} : { strategy: s.strategy, namespace: s.namespace as string }),
    ...(s.onError === undefined ? {} : { onError: s.onError }),
  }
}

/** Our middlewares' options for a setup: the limit per minute, the key, the engine and the refunds. */
function middlewareOptions<K, A extends unknown[]>(s: Setup, key: K, status: (...args: A) => number) {
  return { limit: s.limit, windowMs: 60_000, key, ...engineOptions(s), ...refundOptions(s, status) }
}

function refundOptions<A extends unknown[]>(s: Setup, status: (...args: A) => number) {
  return {
    ...(s.skipFailedRequests === undefined ? {} : { skipFailedRequests: s.skipFailedRequests }),
    ...(s.skipSuccessfulRequests === undefined ? {} : { skipSuccessfulRequests: s.skipSuccessfulRequests }),
    ...(s.below500 === true ? { requestWasSuccessful: (...args: A) => status(...args) < 500 } : {}),
    ...(s.throwing === true
      ? {
          requestWasSuccessful: (): boolean => {
            throw new Error('requestWasSuccessful failed')
          },
        }
      : {}),
  }
}

function expressRoutes(app: express.Express, slow: App['slow'], s: Setup): void {
  app.get('/ok', (_req, res) => {
    res.send('ok')
  })
  app.get('/fail', (_req, res) => {
    res.status(500).send('boom')
  })
  app.get('/missing', (_req, res) => {
    res.status(404).send('no')
  })
  app.get('/late', (_req, res) => {
    s.late?.()
    res.status(500).send('late boom')
  })
  app.get('/slow', (_req, res) => {
    res.once('close', () => slow.gone.resolve())
    slow.started.resolve()
  })
}

const byHeader = (req: express.Request) => req.get('x-client') ?? 'anonymous'

const ourExpress: Framework = {
  name: 'createExpressMiddleware',
  shared: true,
  hitTime: true,
  async start(s) {
    const slow = slowState()
    const mw = createExpressMiddleware(middlewareOptions(s, byHeader, (_req: express.Request, res: express.Response) => res.statusCode))
    const app = express()
    app.use(mw)
    expressRoutes(app, slow, s)
    const server = app.listen(0, '127.0.0.1')
    const base = await listening(server)
    return {
      base,
      slow,
      settled: async () => {
        await turn()
        await mw.settled()
      },
      close: async () => {
        await closeServer(server)
        await mw.close()
      },
    }
  },
}

/** express-rate-limit with its own skip options, over our store: its `decrement` is our refund. */
const expressRateLimit: Framework = {
  name: 'express-rate-limit + RateLimitingStore',
  shared: true,
  hitTime: false,
  async start(s) {
    const slow = slowState()
    const pending = new Set<Promise<void>>()
    // counts the store's decrements in flight, to know when they reached the store
    class TrackedStore extends RateLimitingStore {
      override decrement(key: string): Promise<void> {
        const done = super.decrement(key)
        pending.add(done)
        return done.finally(() => pending.delete(done))
      }
    }
    const store = new TrackedStore(engineOptions(s))
    const app = express()
    app.use(
      rateLimit({
        windowMs: 60_000,
        limit: s.limit,
        keyGenerator: byHeader,
        store,
        ...refundOptions(s, (_req: express.Request, res: express.Response) => res.statusCode),
      }),
    )
    expressRoutes(app, slow, s)
    const server = app.listen(0, '127.0.0.1')
    const base = await listening(server)
    return {
      base,
      slow,
      settled: async () => {
        await turn()
        // express-rate-limit awaits requestWasSuccessful before it decrements: a few ticks
        await turn()
        await Promise.all(pending)
      },
      close: async () => {
        await closeServer(server)
        await store.shutdown()
      },
    }
  },
}

function fastifyRoutes(app: FastifyInstance, slow: App['slow'], s: Setup): void {
  app.get('/ok', async () => 'ok')
  app.get('/fail', async (_request, reply) => reply.code(500).send('boom'))
  app.get('/missing', async (_request, reply) => reply.code(404).send('no'))
  app.get('/late', async (_request, reply) => {
    s.late?.()
    return reply.code(500).send('late boom')
  })
  app.get('/slow', async (_request, reply) => {
    slow.started.resolve()
    await new Promise((resolve) => reply.raw.once('close', resolve))
    slow.gone.resolve()
    return 'late'
  })
}

const fastifyKey = (request: { headers: Record<string, unknown> }) => String(request.headers['x-client'] ?? 'anonymous')

const ourFastifyHook: Framework = {
  name: 'createFastifyHook',
  shared: true,
  hitTime: true,
  async start(s) {
    const slow = slowState()
    const hook = createFastifyHook(middlewareOptions(s, fastifyKey, (_request: unknown, reply: { statusCode: number }) => reply.statusCode))
    const app = Fastify()
    app.addHook('onRequest', hook)
    fastifyRoutes(app, slow, s)
    const base = await app.listen({ port: 0, host: '127.0.0.1' })
    return {
      base,
      slow,
      settled: async () => {
        await turn()
        await hook.settled()
      },
      close: async () => {
        await app.close()
        await hook.close()
      },
    }
  },
}

const ourFastifyPlugin: Framework = {
  name: 'fastifyRateLimiting plugin',
  // the plugin keeps its hook: no settled() to wait on a store, so local counts only
  shared: false,
  hitTime: true,
  async start(s) {
    const slow = slowState()
    const app = Fastify()
    await app.register(
      fastifyRateLimiting,
      middlewareOptions(s, fastifyKey, (_request: unknown, reply: { statusCode: number }) => reply.statusCode),
    )
    fastifyRoutes(app, slow, s)
    const base = await app.listen({ port: 0, host: '127.0.0.1' })
    // local counts: a refund is taken back as the response ends
    return { base, slow, settled: turn, close: () => app.close() }
  },
}

const ourHono: Framework = {
  name: 'createHonoMiddleware',
  shared: true,
  hitTime: true,
  async start(s) {
    const slow = slowState()
    const mw = createHonoMiddleware(
      middlewareOptions(
        s,
        (c: Context) => c.req.header('x-client') ?? 'anonymous',
        (c: Context) => c.res.status,
      ),
    )
    const app = new Hono()
    app.use('*', mw)
    app.get('/ok', (c) => c.text('ok'))
    app.get('/fail', (c) => c.text('boom', 500))
    app.get('/missing', (c) => c.text('no', 404))
    app.get('/late', (c) => {
      s.late?.()
      return c.text('late boom', 500)
    })
    app.get('/slow', async (c) => {
      slow.started.resolve()
      const signal = c.req.raw.signal
      if (!signal.aborted) await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }))
      slow.gone.resolve()
      return c.text('late')
    })
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server
    const base = await listening(server)
    return {
      base,
      slow,
      settled: async () => {
        await turn()
        await mw.settled()
      },
      close: async () => {
        await closeServer(server)
        await mw.close()
      },
    }
  },
}

const FRAMEWORKS = [ourExpress, ourFastifyHook, ourFastifyPlugin, ourHono, expressRateLimit]

/** GET `path` as `client`; resolves with the status once the body is read and the server's refund settled. */
async function get(app: App, path: string, client = 'c1'): Promise<number> {
  const res = await fetch(app.base + path, { headers: { 'x-client': client } })
  await res.arrayBuffer()
  await app.settled()
  return res.status
}

async function gets(app: App, path: string, n: number, client = 'c1'): Promise<number[]> {
  const out: number[] = []
  for (let i = 0; i < n; i++) out.push(await get(app, path, client))
  return out
}

/** Starts GET /slow and destroys the socket once the handler runs; resolves when the server saw it go. */
async function abortSlow(app: App, client = 'c1'): Promise<void> {
  const req = http.get(app.base + '/slow', { headers: { 'x-client': client }, agent: false })
  req.on('error', () => {})
  await app.slow.started.promise
  req.destroy()
  await app.slow.gone.promise
  await app.settled()
}

/** A fake clock 5 s into a minute near the real time (Redis expires windows by it). */
function nearNow(): FakeClock {
  return createFakeClock(Math.ceil(Date.now() / 60_000) * 60_000 + 5_000)
}

for (const fw of FRAMEWORKS) {
  describe(`refunds through ${fw.name}`, { timeout: 30_000 }, () => {
    it('skipFailedRequests: 500s never use up the limit, 200s do, and the 429s themselves do not count', async () => {
      const clock = nearNow()
      const app = await fw.start({ limit: 2, clock: clock.now, skipFailedRequests: true })
      try {
        assert.deepEqual(await gets(app, '/fail', 5), [500, 500, 500, 500, 500], 'each failure is refunded')
        assert.deepEqual(await gets(app, '/ok', 3), [200, 200, 429])
        assert.deepEqual(await gets(app, '/ok', 4), [429, 429, 429, 429])
        // half the previous window weighs: 2 counted hits weigh 1, room for one more; had the
        // five 429s counted, 7 would weigh 3.5 and deny
        clock.advance(60_000 + 25_000)
        assert.deepEqual(await gets(app, '/ok', 2), [200, 429])
      } finally {
        await app.close()
      }
    })

    it('skipSuccessfulRequests: 200s never use up the limit, failures do', async () => {
      const clock = nearNow()
      const app = await fw.start({ limit: 2, clock: clock.now, skipSuccessfulRequests: true })
      try {
        assert.deepEqual(await gets(app, '/ok', 5), [200, 200, 200, 200, 200])
        assert.deepEqual(await gets(app, '/fail', 3), [500, 500, 429], 'two failures use up the limit')
        assert.equal(await get(app, '/ok'), 429, 'and the 429 was a failure too: it stays counted')
      } finally {
        await app.close()
      }
    })

    it('a custom requestWasSuccessful decides what failed', async () => {
      const clock = nearNow()
      const app = await fw.start({ limit: 2, clock: clock.now, skipFailedRequests: true, below500: true })
      try {
        assert.deepEqual(await gets(app, '/fail', 3), [500, 500, 500], 'a 500 failed: refunded')
        assert.deepEqual(await gets(app, '/missing', 3), [404, 404, 429], 'a 404 succeeded here: counted')
      } finally {
        await app.close()
      }
    })

    it('a request whose client went away before the response counts as failed', async () => {
      const clock = nearNow()
      const app = await fw.start({ limit: 1, clock: clock.now, skipFailedRequests: true })
      try {
        await abortSlow(app)
        assert.deepEqual(await gets(app, '/ok', 2), [200, 429], 'the aborted request gave its place back')
      } finally {
        await app.close()
      }
    })

    it('an aborted request stays counted under skipSuccessfulRequests', async () => {
      const clock = nearNow()
      const app = await fw.start({ limit: 1, clock: clock.now, skipSuccessfulRequests: true })
      try {
        await abortSlow(app)
        assert.equal(await get(app, '/ok'), 429)
      } finally {
        await app.close()
      }
    })

    if (fw.hitTime)
      it("refunds into the hit's own window when the response ends in the next one", async () => {
        const clock = nearNow()
        const app = await fw.start({ limit: 2, clock: clock.now, skipFailedRequests: true, late: () => clock.advance(60_000) })
        try {
          assert.equal(await get(app, '/late'), 500)
          // refunded at now, the hit would stay in the previous window weighing 55/60 and deny the second
          assert.deepEqual(await gets(app, '/ok', 3), [200, 200, 429])
        } finally {
          await app.close()
        }
      })

    if (fw.shared) {
      for (const [storeName, makeStrategy] of [
        ['memory', () => new MemoryStrategy()],
        ['redis', () => new RedisStrategy({ client: redis, prefix: `${prefix}:${fw.name.replace(/\W+/g, '-')}` })],
      ] as const) {
        it(`synchronous mode: a refund on one instance reaches another through a shared ${storeName} store`, async () => {
          const clock = nearNow()
          const strategy = makeStrategy()
          const namespace = `refunds-${process.pid}-${Date.now()}`
          const setup = { limit: 2, clock: clock.now, skipFailedRequests: true, strategy, namespace }
          const a = await fw.start(setup)
          const b = await fw.start(setup)
          try {
            assert.deepEqual(await gets(a, '/fail', 3), [500, 500, 500])
            assert.deepEqual(await gets(b, '/ok', 3), [200, 200, 429], 'the other instance sees the places given back')
            assert.equal(await get(a, '/ok'), 429, 'the limit is shared')
            assert.deepEqual(await gets(a, '/fail', 2), [429, 429], 'a 429 is refunded too: still exactly two counted')
            clock.advance(60_000 + 25_000)
            assert.deepEqual(await gets(b, '/ok', 2), [200, 429], 'two counted hits weigh 1 half a window later')
          } finally {
            await a.close()
            await b.close()
            if (storeName === 'memory') await strategy.close()
          }
        })
      }
    }
  })
}

describe('refund options of our middleware', () => {
  const ours = [
    ['createExpressMiddleware', (o: object) => createExpressMiddleware({ limit: 1, ...o })],
    ['createFastifyHook', (o: object) => createFastifyHook({ limit: 1, ...o })],
    ['createHonoMiddleware', (o: object) => createHonoMiddleware({ limit: 1, key: () => 'k', ...o })],
  ] as const

  for (const [who, make] of ours) {
    it(`${who}: a bad option is a ConfigError naming it`, () => {
      const refused = (options: object, message: RegExp) =>
        assert.throws(
          () => make(options),
          (err: unknown) => err instanceof ConfigError && message.test(err.message),
        )
      refused({ skipFailedRequests: 'yes' }, new RegExp(`^${who}: skipFailedRequests must be a boolean, got "yes"$`))
      refused({ skipSuccessfulRequests: 1 }, new RegExp(`^${who}: skipSuccessfulRequests must be a boolean, got 1$`))
      refused({ skipFailedRequests: true, requestWasSuccessful: 'status < 400' }, /requestWasSuccessful must be a function/)
      refused({ requestWasSuccessful: () => true }, /requestWasSuccessful is only asked with skipFailedRequests or skipSuccessfulRequests/)
    })
  }

  for (const fw of [ourExpress, ourFastifyHook, ourHono]) {
    it(`${fw.name}: a requestWasSuccessful that throws goes to onError and leaves the hit counted`, async () => {
      const errors: Error[] = []
      const clock = nearNow()
      const app = await fw.start({ limit: 2, clock: clock.now, skipFailedRequests: true, throwing: true, onError: (e) => errors.push(e) })
      try {
        assert.deepEqual(await gets(app, '/fail', 3), [500, 500, 429], 'not refunded: the answer is unknown')
        assert.equal(errors.length, 3)
        assert.equal(errors[0]?.message, 'requestWasSuccessful failed')
      } finally {
        await app.close()
      }
    })
  }

  it('costs nothing per request when neither option is set: no listener on the response', async () => {
    const counts: number[] = []
    for (const options of [{}, { skipFailedRequests: true }]) {
      const mw = createExpressMiddleware({ limit: 10, ...options })
      const app = express()
      app.use(mw)
      app.get('/', (_req, res) => {
        counts.push(res.listenerCount('finish') + res.listenerCount('close'))
        res.send('ok')
      })
      const server = app.listen(0, '127.0.0.1')
      const res = await fetch((await listening(server)) + '/')
      await res.arrayBuffer()
      await closeServer(server)
      await mw.close()
    }
    assert.equal((counts[1] as number) - (counts[0] as number), 2, 'one listener on finish and close, only with the option')
  })
})
