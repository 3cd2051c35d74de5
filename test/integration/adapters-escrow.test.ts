/**
 * Every adapter on an escrow namespace (docs/ARCHITECTURE.md, "Escrow"), over real HTTP: two
 * RateLimiting instances (two "processes") with an escrow namespace on one MemoryStrategy, an app
 * per instance, each adapter given the instance and the namespace (`rateLimiting`, `namespace`).
 * `hit()` answers a Promise there whenever the budget must be asked of the store, a Decision when
 * the budget held answers. The checks: the status codes, the RateLimit headers (a remaining that
 * counts this process's hits and, once a sync has passed, the other's grants), and the limit never
 * exceeded across both apps.
 */
import 'reflect-metadata'
import assert from 'node:assert/strict'
import type { Server } from 'node:http'
import { describe, it } from 'node:test'
import { setTimeout as delay } from 'node:timers/promises'
import rateLimit from '@fastify/rate-limit'
import { serve } from '@hono/node-server'
import { Controller, Get, type INestApplication, Module } from '@nestjs/common'
import { APP_GUARD, NestFactory } from '@nestjs/core'
import { ExpressAdapter } from '@nestjs/platform-express'
import { ThrottlerGuard, ThrottlerModule } from '@nestjs/throttler'
import express from 'express'
import { rateLimit as expressRateLimit } from 'express-rate-limit'
import Fastify from 'fastify'
import { type Context, Hono } from 'hono'
import { createExpressMiddleware, RateLimitingStore } from '../../src/adapters/express.js'
import { createFastifyStore, fastifyRateLimiting } from '../../src/adapters/fastify.js'
import { createHonoMiddleware } from '../../src/adapters/hono.js'
import { RateLimitingThrottlerStorage } from '../../src/adapters/nestjs.js'
import { MemoryStrategy, RateLimiting } from '../../src/index.js'
import { closeServer, listening } from '../support/http-server.js'

const LIMIT = 5
const WINDOW_MS = 60_000
const SYNC_RATE = 0.05
// learnMs = 2 × syncRate + 2 × storeTimeoutMs = 300 ms: a new store epoch grants nothing that long
const STORE_TIMEOUT_MS = 100

/** Two processes' engines sharing one store, each with the escrow namespace `namespace`. */
interface Fleet {
  readonly namespace: string
  readonly rls: readonly [RateLimiting, RateLimiting]
  close(): Promise<void>
}

let fleets = 0

async function escrowFleet(): Promise<Fleet> {
  const store = new MemoryStrategy()
  const namespace = `escrow-${++fleets}`
  const make = (i: number) => {
    const rl = RateLimiting.newInstance(`adapters-escrow-${fleets}-${i}`)
    rl.new({
      namespace,
      windowSizes: [WINDOW_MS / 1000],
      syncRate: SYNC_RATE,
      strategy: store,
      escrow: true,
      storeTimeoutMs: STORE_TIMEOUT_MS,
      onError: () => undefined,
    })
    return rl
  }
  const rls = [make(0), make(1)] as const
  // the store's epoch begins with the first grant; grants start once its learning period is over
  const probe = rls[0].limiter({ namespace, limits: [{ limit: 1000, window: WINDOW_MS / 1000 }] })
  for (let i = 0; ; i++) {
    const d = await probe.hit(`warm-up-${i}`)
    if (d.allowed && d.storeError === undefined) break
    if (i > 200) throw new Error('the escrow namespace never granted')
    await delay(20)
  }
  return {
    namespace,
    rls,
    async close() {
      await Promise.all(rls.map((rl) => rl.close()))
      await store.close()
    },
  }
}

/** One app of an adapter, over real HTTP; requests carry their client in `x-client`. */
interface App {
  readonly base: string
  close(): Promise<void>
}

type StartApp = (rl: RateLimiting, namespace: string) => Promise<App>

const clientOf = (headers: { get?: (name: string) => string | undefined } | Record<string, unknown>): string =>
  String((headers as Record<string, unknown>)['x-client'] ?? 'anonymous')

async function expressApp(use: express.RequestHandler, close: () => Promise<void> = async () => undefined): Promise<App> {
  const app = express()
  app.use(use)
  app.get('/', (_req, res) => {
    res.send('ok')
  })
  const server = app.listen(0, '127.0.0.1')
  const base = await listening(server)
  return { base, close: async () => (await closeServer(server), await close()) }
}

class ApiController {
  index(): { ok: true } {
    return { ok: true }
  }
}
Reflect.decorate([Controller()], ApiController)
{
  const proto = ApiController.prototype
  const descriptor = Object.getOwnPropertyDescriptor(proto, 'index') as PropertyDescriptor
  Object.defineProperty(proto, 'index', Reflect.decorate([Get()], proto, 'index', descriptor) as PropertyDescriptor)
}

const ADAPTERS: Array<[string, StartApp]> = [
  [
    'our Express middleware',
    async (rl, namespace) => {
      const mw = createExpressMiddleware({
        rateLimiting: rl,
        namespace,
        limit: LIMIT,
        windowMs: WINDOW_MS,
        key: (req) => req.get('x-client') ?? 'anonymous',
      })
      return expressApp(mw, () => mw.close())
    },
  ],
  [
    'express-rate-limit with RateLimitingStore',
    async (rl, namespace) =>
      expressApp(
        expressRateLimit({
          windowMs: WINDOW_MS,
          limit: LIMIT,
          standardHeaders: 'draft-8',
          legacyHeaders: false,
          keyGenerator: (req) => req.get('x-client') ?? 'anonymous',
          store: new RateLimitingStore({ rateLimiting: rl, namespace }),
        }),
      ),
  ],
  [
    'our Fastify plugin',
    async (rl, namespace) => {
      const app = Fastify()
      await app.register(fastifyRateLimiting, {
        rateLimiting: rl,
        namespace,
        limit: LIMIT,
        windowMs: WINDOW_MS,
        key: (request) => clientOf(request.headers),
      })
      app.get('/', async () => 'ok')
      const base = await app.listen({ port: 0, host: '127.0.0.1' })
      return { base, close: () => app.close() }
    },
  ],
  [
    '@fastify/rate-limit with createFastifyStore',
    async (rl, namespace) => {
      const app = Fastify()
      await app.register(rateLimit, {
        max: LIMIT,
        timeWindow: WINDOW_MS,
        keyGenerator: (request) => clientOf(request.headers),
        store: createFastifyStore({ rateLimiting: rl, namespace }),
      })
      app.get('/', async () => 'ok')
      const base = await app.listen({ port: 0, host: '127.0.0.1' })
      return { base, close: () => app.close() }
    },
  ],
  [
    'our Hono middleware',
    async (rl, namespace) => {
      const mw = createHonoMiddleware({
        rateLimiting: rl,
        namespace,
        limit: LIMIT,
        windowMs: WINDOW_MS,
        key: (c: Context) => c.req.header('x-client') ?? 'anonymous',
      })
      const app = new Hono()
      app.use('*', mw)
      app.get('/', (c) => c.text('ok'))
      const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server
      const base = await listening(server)
      return { base, close: async () => (await closeServer(server), await mw.close()) }
    },
  ],
  [
    '@nestjs/throttler with RateLimitingThrottlerStorage',
    async (rl, namespace) => {
      class AppModule {}
      Reflect.decorate(
        [
          Module({
            imports: [
              ThrottlerModule.forRoot({
                throttlers: [{ ttl: WINDOW_MS, limit: LIMIT }],
                storage: new RateLimitingThrottlerStorage({ rateLimiting: rl, namespace }),
              }),
            ],
            controllers: [ApiController],
            providers: [{ provide: APP_GUARD, useClass: ThrottlerGuard }],
          }),
        ],
        AppModule,
      )
      const app: INestApplication = await NestFactory.create(AppModule, new ExpressAdapter(), { logger: false })
      // the throttler's key is the client's address: one client for every request here
      await app.listen(0, '127.0.0.1')
      const base = (await app.getUrl()).replace('[::1]', '127.0.0.1')
      return { base, close: () => app.close() }
    },
  ],
]

interface Answer {
  readonly status: number
  /** What the headers say is left: the draft-8 `r`, or X-RateLimit-Remaining. */
  readonly remaining: number
  readonly retryAfter: string | null
}

async function get(base: string, client: string): Promise<Answer> {
  const res = await fetch(`${base}/`, { headers: { 'x-client': client } })
  await res.arrayBuffer()
  const draft = /;\s*r=(\d+)/.exec(res.headers.get('ratelimit') ?? '')?.[1]
  const legacy = res.headers.get('x-ratelimit-remaining')
  const remaining = Number(draft ?? legacy ?? Number.NaN)
  return { status: res.status, remaining, retryAfter: res.headers.get('retry-after') }
}

for (const [name, start] of ADAPTERS) {
  describe(`${name} on an escrow namespace`, () => {
    it('admits the limit across two processes taking turns, with headers counting down, then 429', async () => {
      const fleet = await escrowFleet()
      const apps = await Promise.all(fleet.rls.map((rl) => start(rl, fleet.namespace)))
      try {
        const answers: Answer[] = []
        for (let i = 0; i < 2 * LIMIT; i++) answers.push(await get((apps[i % 2] as App).base, 'turns'))
        const admitted = answers.filter((a) => a.status === 200).length
        assert.equal(admitted, LIMIT, `exactly the limit passes: ${answers.map((a) => a.status).join(' ')}`)
        assert.deepEqual(
          answers.map((a) => a.status),
          [...Array<number>(LIMIT).fill(200), ...Array<number>(LIMIT).fill(429)],
        )
        // each process's view: its own hits plus the others' reservations as of its last store call or sync
        const own = [0, 0]
        const last = [LIMIT, LIMIT]
        for (const [i, a] of answers.entries()) {
          const p = i % 2
          if (a.status === 200) own[p] = (own[p] as number) + 1
          // @nestjs/throttler's guard sends only Retry-After with a 429
          if (a.status === 429 && Number.isNaN(a.remaining) && name.startsWith('@nestjs')) {
            assert.ok(Number(a.retryAfter) >= 1, `answer ${i}: a 429 says when to retry (${a.retryAfter})`)
            continue
          }
          assert.ok(Number.isInteger(a.remaining), `answer ${i} has a remaining header`)
          assert.ok(a.remaining >= 0 && a.remaining <= LIMIT - (own[p] as number), `answer ${i}: remaining ${a.remaining}`)
          assert.ok(a.remaining <= (last[p] as number), `answer ${i}: a process's remaining never goes up within the window`)
          last[p] = a.remaining
          if (a.status === 429) {
            assert.equal(a.remaining, 0)
            assert.ok(Number(a.retryAfter) >= 1, `answer ${i}: a 429 says when to retry (${a.retryAfter})`)
          }
        }
        assert.equal(answers[0]?.remaining, LIMIT - 1, 'the first answer counts itself only')
      } finally {
        await Promise.all(apps.map((a) => a.close()))
        await fleet.close()
      }
    })

    it("counts the other process's grants in remaining once a sync has passed", async () => {
      const fleet = await escrowFleet()
      const apps = await Promise.all(fleet.rls.map((rl) => start(rl, fleet.namespace)))
      try {
        const [a, b] = apps as [App, App]
        const first = [await get(a.base, 'synced'), await get(a.base, 'synced'), await get(b.base, 'synced')]
        assert.deepEqual(
          first.map((x) => x.status),
          [200, 200, 200],
        )
        await delay(4 * SYNC_RATE * 1000)
        const fourth = await get(a.base, 'synced')
        assert.equal(fourth.status, 200)
        // 4 admitted fleet-wide: a's view holds b's reservation (at least its one hit) by now
        assert.ok(fourth.remaining <= LIMIT - 4, `remaining ${fourth.remaining} after 4 admitted across both`)
      } finally {
        await Promise.all(apps.map((x) => x.close()))
        await fleet.close()
      }
    })

    it('never admits more than the limit of 40 concurrent requests spread over both processes', async () => {
      const fleet = await escrowFleet()
      const apps = await Promise.all(fleet.rls.map((rl) => start(rl, fleet.namespace)))
      try {
        const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => get((apps[i % 2] as App).base, 'burst')))
        const codes = answers.map((a) => a.status)
        assert.equal(codes.filter((s) => s !== 200 && s !== 429).length, 0, `only 200 and 429: ${codes.join(' ')}`)
        const admitted = codes.filter((s) => s === 200).length
        assert.ok(admitted <= LIMIT, `at most the limit passes: ${admitted} of ${LIMIT}`)
        // both processes took requests beyond their budget, so none is stranded: all of it is used
        assert.equal(admitted, LIMIT, `the whole limit is used: ${codes.join(' ')}`)
      } finally {
        await Promise.all(apps.map((a) => a.close()))
        await fleet.close()
      }
    })
  })
}
