/**
 * Blocking across processes on the real stores (docs/ARCHITECTURE.md, "Blocks"): Redis (single
 * node and Cluster), PostgreSQL and memcached, in periodic and synchronous mode.
 *
 * - Two OS processes: a worker process (test/support/block-worker.ts) goes over a limit with
 *   `blockMs`; this process then sees the key blocked until the same instant, and after this
 *   process lifts the block a new worker sees it free.
 * - Two engines in this process (two nodes, as two processes would be): the exact end, a blocked
 *   hit counted nowhere, `reset` lifting a block fleet-wide, a block extended and never shortened.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { after, describe, it } from 'node:test'
import { promisify } from 'node:util'
import { Cluster, Redis } from 'ioredis'
import { type Decision, RateLimiting, type Strategy } from '../../src/index.js'
import { MemcachedStrategy } from '../../src/strategies/memcached/index.js'
import { PostgresStrategy } from '../../src/strategies/postgres/index.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { readWindow } from '../../src/testing/read-window.js'
import { requireSharedMemcached } from '../support/memcached-server.js'
import { createTestSchema, SHARED_POSTGRES_URL } from '../support/postgres-server.js'
import { sharedClusterPorts, sharedRedisUrl } from '../support/redis-server.js'
import { deleteKeys, keysUnder, root, uniquePrefix, until } from './server-helpers.js'

const run = promisify(execFile)
const MINUTE = 60_000

const redisUrl = await sharedRedisUrl()
const redis = new Redis(redisUrl)
const clusterPorts = await sharedClusterPorts()
const cluster = new Cluster(clusterPorts.map((port) => ({ host: '127.0.0.1', port })))
const memcached = await requireSharedMemcached()
const pg = await createTestSchema('rl_blocks')
const prefix = uniquePrefix()
after(async () => {
  await deleteKeys(redis, prefix)
  // one UNLINK per name on the cluster: names of different slots cannot share a command
  for (const node of cluster.nodes('master')) await Promise.all((await keysUnder(node, prefix)).map((name) => node.unlink(name)))
  redis.disconnect()
  cluster.disconnect()
  await pg.drop()
})

interface StoreCase {
  readonly name: string
  /** A strategy object for the engines of this process. */
  readonly make: () => Promise<Strategy>
  /** The same store by name, for the worker process. */
  readonly byName?: { strategy: string; strategyOpts: Record<string, unknown> }
}

const STORES: StoreCase[] = [
  {
    name: 'redis',
    make: async () => new RedisStrategy({ client: redis, prefix }),
    byName: { strategy: 'redis', strategyOpts: { url: redisUrl, prefix } },
  },
  { name: 'redis cluster', make: async () => new RedisStrategy({ client: cluster, prefix }) },
  {
    name: 'postgres',
    make: async () => {
      const s = new PostgresStrategy({ pool: pg.pool, schema: pg.schema })
      await s.migrate()
      return s
    },
    byName: { strategy: 'postgres', strategyOpts: { connectionString: SHARED_POSTGRES_URL, schema: pg.schema, poolSize: 2 } },
  },
  {
    name: 'memcached',
    make: async () => new MemcachedStrategy({ servers: [memcached], prefix: `${prefix}:` }),
    byName: { strategy: 'memcached', strategyOpts: { servers: [memcached], prefix: `${prefix}:` } },
  },
]

const MODES = [
  ['periodic', 0.5],
  ['synchronous', 0],
] as const

let instances = 0
function engine(strategy: Strategy, namespace: string, syncRate: number) {
  const rl = RateLimiting.newInstance(`blocking-stores-${++instances}`)
  rl.new({ namespace, windowSizes: [60], syncRate, strategy, autoSync: false, onError: () => {} })
  return { rl, limiter: rl.limiter({ namespace, limits: [{ limit: 3, window: 60, blockMs: 15 * MINUTE }] }) }
}

async function worker(byName: NonNullable<StoreCase['byName']>, config: Record<string, unknown>) {
  const { stdout } = await run(
    process.execPath,
    ['--import', 'tsx', 'test/support/block-worker.ts', JSON.stringify({ ...byName, limit: 3, blockMs: 15 * MINUTE, ...config })],
    { cwd: root, timeout: 30_000 },
  )
  return JSON.parse(stdout.trim().split('\n').pop() as string) as { allowed: number; reason: string; blocked: boolean; endsAtMs: number }
}

for (const store of STORES) {
  for (const [mode, syncRate] of MODES) {
    describe(`blocking on ${store.name}, ${mode}`, { timeout: 60_000 }, () => {
      // a periodic process reads a key's block at its first sync after it sees the key
      const learn = async (e: ReturnType<typeof engine>, ns: string, key: string): Promise<Decision> => {
        if (syncRate > 0) {
          await e.limiter.peek(key)
          await e.rl.sync(ns)
        }
        return await e.limiter.hit(key)
      }
      const settle = async (e: ReturnType<typeof engine>, ns: string) => {
        if (syncRate > 0) await e.rl.sync(ns)
      }

      if (store.byName !== undefined) {
        const byName = store.byName
        it('two OS processes: a block made by one holds on the other until the same instant, and a lift reaches back', async () => {
          const ns = `blk-${randomUUID().slice(0, 8)}`
          const other = await worker(byName, { namespace: ns, syncRate, key: 'mallory', tries: 4 })
          assert.deepEqual(
            { allowed: other.allowed, blocked: other.blocked },
            { allowed: 3, blocked: true },
            'the worker went over and blocked',
          )
          const strategy = await store.make()
          const here = engine(strategy, ns, syncRate)
          try {
            const at = here.limiter.clock()
            const d = await learn(here, ns, 'mallory')
            assert.equal(d.reason, 'blocked')
            assert.ok(
              Math.abs(at + d.retryAfterMs - other.endsAtMs) <= 25,
              `ends at ${at + d.retryAfterMs}, the worker said ${other.endsAtMs}`,
            )
            await here.limiter.unblock('mallory')
            await settle(here, ns)
          } finally {
            await here.rl.close()
            await strategy.close()
          }
          const after = await worker(byName, { namespace: ns, syncRate, key: 'mallory', tries: 0 })
          assert.notEqual(after.reason, 'blocked', 'the lift reached the worker')
        })
      }

      it('two nodes: the exact end, nothing counted while blocked, extended but never shortened, reset lifts it', async () => {
        const ns = `blk-${randomUUID().slice(0, 8)}`
        const strategy = await store.make()
        const a = engine(strategy, ns, syncRate)
        const b = engine(strategy, ns, syncRate)
        try {
          const stored = async () => {
            const now = Date.now()
            return (await readWindow(strategy, { namespace: ns, key: 'k', windowStartMs: now - (now % MINUTE), windowSizeMs: MINUTE }))
              .count
          }
          const end = await a.limiter.block('k', 10 * MINUTE)
          await settle(a, ns)
          // synchronous: b does not know of the block; the store's answer tells it, and the hit it wrote is taken back
          const seen = await learn(b, ns, 'k')
          assert.equal(seen.reason, 'blocked')
          assert.ok(Math.abs(b.limiter.clock() + seen.retryAfterMs - end) <= 25, 'b sees the end a set')
          for (let i = 0; i < 5; i++) assert.equal((await b.limiter.hit('k')).reason, 'blocked')
          await settle(b, ns)
          await until(async () => (await stored()) === 0, 3000, 'blocked hits counted nowhere in the store')
          // b extends the block; a shorter one from a leaves it as it is
          const longer = await b.limiter.block('k', 20 * MINUTE)
          await settle(b, ns)
          await a.limiter.block('k', MINUTE)
          await settle(a, ns)
          const fromA = await a.limiter.hit('k')
          assert.ok(Math.abs(a.limiter.clock() + fromA.retryAfterMs - longer) <= 25, `a sees b's longer block: ${fromA.retryAfterMs}`)
          await a.limiter.reset('k')
          await settle(a, ns)
          await settle(b, ns)
          assert.notEqual((await learn(b, ns, 'k')).reason, 'blocked', 'the reset lifted the block for b too')
        } finally {
          await a.rl.close()
          await b.rl.close()
          await strategy.close() // never a client it was given
        }
      })
    })
  }
}
