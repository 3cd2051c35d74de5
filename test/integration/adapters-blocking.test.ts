/**
 * Blocking through the real frameworks over real HTTP: our Express, Fastify and Hono middleware
 * with `blockMs`. The request that goes over the limit blocks its client; while blocked, every
 * request gets a 429 whose `Retry-After` is the block's end, even once the counts have slid out;
 * then it passes again. Two app instances on the shared Redis (synchronous mode) share the block.
 */
import assert from 'node:assert/strict'
import type { Server } from 'node:http'
import { after, describe, it } from 'node:test'
import { serve } from '@hono/node-server'
import express from 'express'
import Fastify from 'fastify'
import { type Context, Hono } from 'hono'
import { Redis } from 'ioredis'
import { createExpressMiddleware } from '../../src/adapters/express.js'
import { createFastifyHook } from '../../src/adapters/fastify.js'
import { createHonoMiddleware } from '../../src/adapters/hono.js'
import { type Clock, ConfigError, createFakeClock, type Strategy } from '../../src/index.js'
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

const MINUTE = 60_000

interface Setup {
  readonly clock: Clock
  readonly strategy?: Strategy
  readonly namespace?: string
}

interface App {
  readonly base: string
  close(): Promise<void>
}

/** The middleware options of every framework: 2 per minute, a 10-minute block, keyed by a header. */
function options<K>(s: Setup, key: K) {
  return {
    limit: 2,
    windowMs: MINUTE,
    blockMs: 10 * MINUTE,
    key,
    clock: s.clock,
    ...(s.strategy === undefined ? {} : { strategy: s.strategy, syncRate: 0, namespace: s.namespace as string }),
  }
}

const FRAMEWORKS: Array<[string, (s: Setup) => Promise<App>]> = [
  [
    'Express',
    async (s) => {
      const mw = createExpressMiddleware(options(s, (req: express.Request) => req.get('x-client') ?? 'anonymous'))
      const app = express()
      app.use(mw)
      app.get('/', (_req, res) => {
        res.send('ok')
      })
      const server = app.listen(0, '127.0.0.1')
      const base = await listening(server)
      return { base, close: async () => (await closeServer(server), await mw.close()) }
    },
  ],
  [
    'Fastify',
    async (s) => {
      const hook = createFastifyHook(options(s, (request: { headers: Record<string, unknown> }) => String(request.headers['x-client'])))
      const app = Fastify()
      app.addHook('onRequest', hook)
      app.get('/', async () => 'ok')
      const base = await app.listen({ port: 0, host: '127.0.0.1' })
      return { base, close: async () => (await app.close(), await hook.close()) }
    },
  ],
  [
    'Hono',
    async (s) => {
      const mw = createHonoMiddleware(options(s, (c: Context) => c.req.header('x-client') ?? 'anonymous'))
      const app = new Hono()
      app.use('*', mw)
      app.get('/', (c) => c.text('ok'))
      const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server
      const base = await listening(server)
      return { base, close: async () => (await closeServer(server), await mw.close()) }
    },
  ],
]

async function get(base: string, client: string): Promise<{ status: number; retryAfter: string | null }> {
  const res = await fetch(`${base}/`, { headers: { 'x-client': client } })
  await res.arrayBuffer()
  return { status: res.status, retryAfter: res.headers.get('retry-after') }
}

for (const [name, start] of FRAMEWORKS) {
  describe(`blocking through ${name}`, () => {
    it('blocks a client that went over the limit for blockMs, past the window, then lets it through', async () => {
      const clock = createFakeClock(Date.UTC(2026, 0, 1, 12))
      const app = await start({ clock: clock.now })
      try {
        assert.equal((await get(app.base, 'mallory')).status, 200)
        assert.equal((await get(app.base, 'mallory')).status, 200)
        assert.deepEqual(await get(app.base, 'mallory'), { status: 429, retryAfter: '600' }, 'the third goes over and blocks')
        assert.equal((await get(app.base, 'alice')).status, 200, 'another client is not blocked')
        clock.advance(3 * MINUTE) // the counts have slid out; the block holds
        assert.deepEqual(await get(app.base, 'mallory'), { status: 429, retryAfter: '420' })
        clock.advance(7 * MINUTE)
        assert.equal((await get(app.base, 'mallory')).status, 200, 'the block is over')
      } finally {
        await app.close()
      }
    })

    it('shares the block between two app instances on one Redis (synchronous)', async () => {
      const clock = createFakeClock(Math.ceil(Date.now() / MINUTE) * MINUTE + 5_000)
      const namespace = `${name}-block-${Date.now()}`
      const strategy = new RedisStrategy({ client: redis, prefix })
      const a = await start({ clock: clock.now, strategy, namespace })
      const b = await start({ clock: clock.now, strategy, namespace })
      try {
        for (let i = 0; i < 3; i++) await get(a.base, 'mallory')
        // b has never seen mallory: its first request reads the block with the counts
        assert.deepEqual(await get(b.base, 'mallory'), { status: 429, retryAfter: '600' })
        assert.equal((await get(b.base, 'alice')).status, 200)
      } finally {
        await a.close()
        await b.close()
      }
    })
  })
}

describe('blocking options of the middleware', () => {
  it('refuses a blockMs that is not a positive number of ms, naming it', () => {
    assert.throws(() => createExpressMiddleware({ limit: 1, blockMs: 0 }), ConfigError)
    assert.throws(() => createExpressMiddleware({ limit: 1, blockMs: -5 }), /blockMs must be a positive number of ms, got -5/)
    assert.throws(() => createExpressMiddleware({ limits: [{ limit: 1, windowMs: 1000, blockMs: Number.NaN }] }), /limits\[0\]\.blockMs/)
    assert.throws(
      () => createExpressMiddleware({ limits: [{ limit: 1, windowMs: 1000 }], blockMs: 5 }),
      /either limits or limit\/windowMs\/blockMs/,
    )
  })
})
