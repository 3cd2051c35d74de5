/**
 * `batchAcrossSlots` by default: a sync of many keys goes out as one script call on a client
 * that is not a cluster (one given, or the one the strategy makes from `url`), and as one call
 * per hash slot on a cluster; `false` keeps one call per slot on a single server. Script calls
 * are counted by the server itself (INFO commandstats on a redis-server of the test's own) and,
 * on the shared cluster, at the client (each call's keys checked to share a slot).
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Cluster, Redis } from 'ioredis'
import { createClient } from 'redis'
import { ConfigError } from '../../src/core/errors.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { keySlot } from '../../src/strategies/redis/key-slot.js'
import { RedisStrategy, type RedisStrategyOptions } from '../../src/strategies/redis/index.js'
import { deleteTestKeys, type RedisServerHandle, sharedClusterPorts, sharedRedisUrl, startRedisServer } from '../support/redis-server.js'

// 200 keys: their windows (written and read back) fit one call of 512 key-windows, and they
// spread over about 200 hash slots
const KEYS = Array.from({ length: 200 }, (_, i) => `user-${i}`)

/** Hits every key once in a periodic namespace over `strategy`, then runs one sync. */
async function syncManyKeys(strategy: RedisStrategy, namespace: string): Promise<void> {
  const rl = RateLimiting.newInstance(`batch-default-${namespace}`)
  rl.new({ namespace, windowSizes: [60], syncRate: 1, strategy, autoSync: false })
  const limiter = rl.limiter({ namespace, limits: [{ limit: 100, window: 60 }] })
  for (const key of KEYS) assert.equal((await limiter.hit(key)).allowed, true)
  await rl.sync(namespace)
  await rl.close()
}

/** The keys of `namespace` whose current window holds one hit in the store. */
async function storedKeys(strategy: RedisStrategy, namespace: string): Promise<number> {
  let found = 0
  for await (const row of strategy.getCounters(namespace, [60_000], Date.now())) if (row.count === 1) found++
  return found
}

describe('batchAcrossSlots by default, on a server of its own', { timeout: 60_000 }, () => {
  let server: RedisServerHandle
  let admin: Redis
  before(async () => {
    server = await startRedisServer()
    admin = new Redis(server.url)
  })
  after(async () => {
    admin.disconnect()
    await server.stop()
  })

  // EVALSHA and EVAL calls the server ran since the last reset
  async function scriptCalls(run: () => Promise<void>): Promise<number> {
    await admin.config('RESETSTAT')
    await run()
    const stats = await admin.info('commandstats')
    const calls = (name: string) => Number(new RegExp(`^cmdstat_${name}:calls=(\\d+)`, 'm').exec(stats)?.[1] ?? 0)
    return calls('evalsha') + calls('eval')
  }

  async function withStrategy(options: RedisStrategyOptions, namespace: string): Promise<number> {
    const strategy = new RedisStrategy(options)
    try {
      const calls = await scriptCalls(() => syncManyKeys(strategy, namespace))
      assert.equal(await storedKeys(strategy, namespace), KEYS.length, "every key's hit reached the store")
      return calls
    } finally {
      await strategy.close()
    }
  }

  it('sends a sync of many keys as one script call with an ioredis client it was given', async () => {
    const client = new Redis(server.url)
    try {
      assert.equal(await withStrategy({ client, prefix: 'given' }, 'given'), 1)
    } finally {
      client.disconnect()
    }
  })

  it('does so with the client it makes from url', async () => {
    assert.equal(await withStrategy({ url: server.url, prefix: 'url' }, 'url'), 1)
  })

  it('does so with a node-redis client', async () => {
    const client = createClient({ url: server.url })
    await client.connect()
    try {
      assert.equal(await withStrategy({ client, prefix: 'node-redis' }, 'node-redis'), 1)
    } finally {
      await client.close()
    }
  })

  it('keeps one script call per hash slot with batchAcrossSlots: false', async () => {
    const client = new Redis(server.url)
    try {
      const slots = new Set(KEYS.map((key) => keySlot(`off:{per-slot:${key}}`)))
      assert.ok(slots.size > 150)
      assert.equal(await withStrategy({ client, prefix: 'off', batchAcrossSlots: false }, 'per-slot'), slots.size)
      const fromUrl = await withStrategy({ url: server.url, prefix: 'off-url', batchAcrossSlots: false }, 'per-slot-url')
      assert.equal(fromUrl, new Set(KEYS.map((key) => keySlot(`off-url:{per-slot-url:${key}}`))).size)
    } finally {
      client.disconnect()
    }
  })
})

describe('batchAcrossSlots by default, on a cluster', { timeout: 60_000 }, () => {
  const prefix = `rltest-batchdef-${randomUUID().slice(0, 8)}`
  let cluster: Cluster
  before(async () => {
    const ports = await sharedClusterPorts()
    cluster = new Cluster(ports.map((port) => ({ host: '127.0.0.1', port })))
  })
  after(async () => deleteTestKeys(await sharedRedisUrl(), prefix, [cluster]))

  it('sends a sync as one script call per hash slot, each call in one slot', async () => {
    // the calls the strategy sends, seen at the client: the shared cluster serves other tests too
    const calls: string[][] = []
    const spy = cluster as unknown as Record<'evalsha' | 'eval', (...args: unknown[]) => Promise<unknown>>
    for (const method of ['evalsha', 'eval'] as const) {
      const original = spy[method].bind(cluster)
      spy[method] = (script: unknown, numKeys: unknown, ...rest: unknown[]) => {
        calls.push(rest.slice(0, Number(numKeys)) as string[])
        return original(script, numKeys, ...rest)
      }
    }
    const strategy = new RedisStrategy({ client: cluster, prefix })
    await syncManyKeys(strategy, 'cluster')
    const sent = calls.length
    assert.equal(await storedKeys(strategy, 'cluster'), KEYS.length, "every key's hit reached the store")
    calls.length = sent
    const slots = new Set(KEYS.map((key) => keySlot(`${prefix}:{cluster:${key}}`)))
    // a call that NOSCRIPT sent again as EVAL counts twice at the client: count the slots' calls
    const slotsCalled = calls.map((names) => {
      const inCall = new Set(names.map((name) => keySlot(name)))
      assert.equal(inCall.size, 1, 'every call stays in one slot')
      return [...inCall][0]
    })
    assert.deepEqual(new Set(slotsCalled), slots)
    assert.ok(calls.length >= slots.size)
  })

  it('refuses batchAcrossSlots: true with a cluster client', () => {
    assert.throws(
      () => new RedisStrategy({ client: cluster, prefix, batchAcrossSlots: true }),
      (err: unknown) => err instanceof ConfigError && /batchAcrossSlots cannot be used with a cluster client/.test(err.message),
    )
  })
})
