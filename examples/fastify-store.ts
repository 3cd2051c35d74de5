/**
 * An existing @fastify/rate-limit setup with one added option, `store`: a sliding window, and
 * with a shared `strategy` one limit for every process. A route-level limit counts apart.
 *
 * Run: node --import tsx examples/fastify-store.ts   (then curl -i http://127.0.0.1:3000/)
 */
import rateLimit from '@fastify/rate-limit'
import Fastify, { type FastifyInstance } from 'fastify'
import { createFastifyStore } from '../src/adapters/fastify.js'
import type { Strategy } from '../src/index.js'

export interface ExampleOptions {
  /** Requests per minute per client. */
  readonly max?: number
  /** Share counts with other processes through this store. */
  readonly strategy?: Strategy
}

/** Builds the app (not listening); the example's tests call it and inject requests. */
export async function buildFastifyApp(options: ExampleOptions = {}): Promise<FastifyInstance> {
  const app = Fastify()
  const Store = createFastifyStore(options.strategy === undefined ? {} : { strategy: options.strategy })
  await app.register(rateLimit, { max: options.max ?? 100, timeWindow: 60_000, store: Store })
  app.addHook('onClose', () => Store.close())
  app.get('/', async () => ({ hello: 'world' }))
  app.post('/login', { config: { rateLimit: { max: 5, timeWindow: 60_000 } } }, async () => ({ token: 'demo' }))
  return app
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const app = await buildFastifyApp()
  const address = await app.listen({ port: Number(process.env.PORT ?? 3000), host: '127.0.0.1' })
  console.log(`@fastify/rate-limit with createFastifyStore on ${address}`)
}
