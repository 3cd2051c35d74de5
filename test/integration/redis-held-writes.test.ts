/**
 * Held writes on Redis (src/strategies/redis/scripts.ts, WriteHold): while calls are in flight,
 * the Redis strategy (and the service's Redis algorithms, for the calls they do not batch:
 * redis-batch.test.ts) hold a client's socket writes and send
 * them together, at the end of the event-loop iteration or as soon as 16 calls are held, so that
 * Redis runs the first calls of a batch while the client still makes the next ones (holding a
 * whole batch of 64 made the two sides take turns: 0.78x RateLimiterRedis's decisions/s at 64 in
 * flight, 1.40x in parts; docs/BENCHMARKS-redis.md). The socket's cork count shows what is held,
 * synchronously, between two calls. Against the shared Redis (127.0.0.1:6379).
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, describe, it } from 'node:test'
import { Cluster, Redis } from 'ioredis'
import { RedisFixedWindow } from '../../src/algorithms/index.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { deleteTestKeys, sharedClusterPorts, sharedRedisUrl } from '../support/redis-server.js'

const prefix = `rltest-held-${randomUUID().slice(0, 8)}`
const url = await sharedRedisUrl()
const clients: (Redis | Cluster)[] = []

after(() => deleteTestKeys(url, prefix, clients))

async function readyClient(): Promise<Redis & { stream: { writableCorked: number } }> {
  const client = new Redis(url)
  clients.push(client)
  await client.ping()
  return client as Redis & { stream: { writableCorked: number } }
}

describe('held writes on Redis', () => {
  it('the strategy holds the calls made while others are in flight, and sends every 16th at once', async () => {
    const client = await readyClient()
    const strategy = new RedisStrategy({ client, prefix })
    const startMs = Math.floor(Date.now() / 60_000) * 60_000
    const push = (i: number) =>
      strategy.pushDiffs({
        namespace: 'held',
        nodeId: 'n1',
        seq: i + 1,
        nowMs: Date.now(),
        windows: [{ key: `k${i}`, windowStartMs: startMs, windowSizeMs: 60_000, count: 1, diff: 1 }],
        refresh: [],
      })
    const calls = [push(0)]
    // a lone call is written at once
    assert.equal(client.stream.writableCorked, 0)
    const corked: number[] = []
    for (let i = 1; i <= 40; i++) {
      calls.push(push(i))
      corked.push(client.stream.writableCorked)
    }
    // held from the second call; the 16th held call leaves with the 15 before it, and so on
    const expected = Array.from({ length: 40 }, (_, i) => ((i + 1) % 16 === 0 ? 0 : 1))
    assert.deepEqual(corked, expected)
    // the rest leave at the end of the iteration: every call is answered, each key counted once
    const rows = await Promise.all(calls)
    assert.deepEqual(
      rows.map((r) => r[0]?.count),
      calls.map(() => 1),
    )
    assert.equal(client.stream.writableCorked, 0)
  })

  it("on a cluster client every master's socket is held, and the calls leave every 16 per socket", async () => {
    const cluster = new Cluster((await sharedClusterPorts()).map((port) => ({ host: '127.0.0.1', port })))
    clients.push(cluster)
    await cluster.ping()
    const masters = cluster.nodes('master') as unknown as { stream: { writableCorked: number } }[]
    // the masters' connections are made on first use: one call to each of the 16,384 slots' keys
    // would be too many, so every key is written once first (the sockets then stay ready)
    const keys = Array.from({ length: 120 }, (_, i) => `k${i}`)
    const strategy = new RedisStrategy({ client: cluster, prefix })
    const startMs = Math.floor(Date.now() / 60_000) * 60_000
    const push = (key: string, seq: number) =>
      strategy.pushDiffs({
        namespace: 'held',
        nodeId: 'n1',
        seq,
        nowMs: Date.now(),
        windows: [{ key, windowStartMs: startMs, windowSizeMs: 60_000, count: seq, diff: 1 }],
        refresh: [],
      })
    await Promise.all(keys.map((key) => push(key, 1)))
    const calls = [push('k0', 2)]
    const held: boolean[] = []
    for (let i = 1; i < 2 * 16 * masters.length; i++) {
      calls.push(push(keys[i % keys.length] as string, 2))
      held.push(masters.every((m) => m.stream.writableCorked === 1))
    }
    // held from the second call until 16 per master's socket are (48 on three masters), then again
    const limit = 16 * masters.length
    assert.deepEqual(
      held,
      held.map((_, i) => (i + 1) % limit !== 0),
    )
    await Promise.all(calls)
    assert.ok(masters.every((m) => m.stream.writableCorked === 0))
  })

  it("the service's algorithms hold the calls they do not batch, and send every 16th at once", async () => {
    const client = await readyClient()
    const fixed = new RedisFixedWindow({ client, limit: 1000, windowMs: 60_000, prefix })
    const corked: number[] = []
    const peeks: Promise<unknown>[] = []
    for (let i = 0; i < 40; i++) {
      peeks.push(fixed.peek(`u${i}`))
      corked.push(client.stream.writableCorked)
    }
    assert.deepEqual(
      corked,
      Array.from({ length: 40 }, (_, i) => ((i + 1) % 16 === 0 ? 0 : 1)),
    )
    const results = (await Promise.all(peeks)) as { allowed: boolean; count: number }[]
    assert.ok(results.every((r) => r.allowed && r.count === 0))
    assert.equal(client.stream.writableCorked, 0)
  })
})
