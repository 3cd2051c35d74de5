/**
 * RedisStrategy.escrow on real servers, against MemoryStrategy.escrow (the reference): the same
 * random sequence of writes, reads and grants from three processes gives the same rows, grants,
 * processes and learning flags, on a single node (one epoch key per namespace with
 * batchAcrossSlots, one per slot without), on the shared Cluster, through ioredis, iovalkey and
 * node-redis. Then what the epochs do: the learning period, a store that lost a group's data, lost
 * writes (a failover), an epoch key that merely expired, and the errors a bad batch gets.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, describe, it } from 'node:test'
import { Cluster, Redis } from 'ioredis'
import { Cluster as ValkeyCluster } from 'iovalkey'
import { createClient, createCluster } from 'redis'
import { StoreError } from '../../src/core/errors.js'
import type { EscrowBatch, EscrowReply, GrantRequest, Strategy, WindowPush, WindowRef } from '../../src/core/strategy.js'
import { tagSlot } from '../../src/strategies/redis/key-slot.js'
import { encodeNamespace } from '../../src/strategies/redis/key-names.js'
import { RedisStrategy, type SupportedRedisClient } from '../../src/strategies/redis/index.js'
import { MemoryStrategy } from '../../src/strategies/memory.js'
import { seededRandom } from '../support/random.js'
import { sharedClusterPorts, sharedRedisUrl } from '../support/redis-server.js'

const runPrefix = `rltest-escrow-${randomUUID().slice(0, 8)}`
const singleUrl = await sharedRedisUrl()
const clusterPorts = await sharedClusterPorts()

const closers: Array<() => Promise<void>> = []
after(async () => {
  const admin = new Redis(singleUrl)
  for (const name of await admin.keys(`${runPrefix}*`)) await admin.unlink(name)
  admin.disconnect()
  for (const port of clusterPorts) {
    const node = new Redis(port, '127.0.0.1')
    for (const name of await node.keys(`${runPrefix}*`)) await node.unlink(name)
    node.disconnect()
  }
  for (const close of closers.reverse()) await close().catch(() => undefined)
})

type Make = (prefix: string, batchAcrossSlots?: boolean) => Promise<RedisStrategy>

function ioredis(): SupportedRedisClient {
  const client = new Redis(singleUrl, { maxRetriesPerRequest: 1 })
  client.on('error', () => undefined)
  closers.push(async () => client.disconnect())
  return client
}

const clients: Array<[string, Make, boolean]> = [
  [
    'ioredis, one epoch key (batchAcrossSlots)',
    async (prefix) => new RedisStrategy({ client: ioredis(), prefix, batchAcrossSlots: true }),
    false,
  ],
  ['ioredis, an epoch key per slot', async (prefix) => new RedisStrategy({ client: ioredis(), prefix, batchAcrossSlots: false }), true],
  [
    'ioredis Cluster',
    async (prefix) => {
      const client = new Cluster(clusterPorts.map((port) => ({ host: '127.0.0.1', port })))
      client.on('error', () => undefined)
      closers.push(async () => client.disconnect())
      return new RedisStrategy({ client, prefix })
    },
    true,
  ],
  [
    'iovalkey Cluster',
    async (prefix) => {
      const client = new ValkeyCluster(clusterPorts.map((port) => ({ host: '127.0.0.1', port })))
      client.on('error', () => undefined)
      closers.push(async () => client.disconnect())
      return new RedisStrategy({ client, prefix })
    },
    true,
  ],
  [
    'node-redis',
    async (prefix) => {
      const client = createClient({ url: singleUrl })
      client.on('error', () => undefined)
      await client.connect()
      closers.push(async () => client.destroy())
      return new RedisStrategy({ client, prefix })
    },
    true,
  ],
  [
    'node-redis createCluster',
    async (prefix) => {
      const client = createCluster({ rootNodes: clusterPorts.map((port) => ({ url: `redis://127.0.0.1:${port}` })) })
      client.on('error', () => undefined)
      await client.connect()
      closers.push(async () => client.destroy())
      return new RedisStrategy({ client, prefix })
    },
    true,
  ],
]

const SIZE = 10_000
const LIMIT = 20
const NAMESPACE = 'esc:ns'
// a minute ahead of the real time, on a window boundary
const T0 = Math.ceil(Date.now() / 60_000) * 60_000 + 60_000

/**
 * `n` keys of one hash slot: with an epoch key per slot, each slot counts the processes that
 * called it, so the keys share one for the counts to be the memory store's (one per namespace).
 */
function keysOfOneSlot(n: number): string[] {
  const head = `${encodeNamespace(NAMESPACE)}:`
  const slot = tagSlot(`${head}k0`)
  const keys = ['k0']
  for (let i = 1; keys.length < n; i++) if (tagSlot(`${head}u${i}`) === slot) keys.push(`u${i}`)
  return keys
}

function strip(reply: EscrowReply): unknown {
  return { ...reply, rows: reply.rows.map((r) => ({ ...r })), grants: reply.grants.map((g) => ({ ...g })) }
}

/** A random sequence of escrow batches from three processes; `learnMs` after the first call, every process called once. */
function* workload(seed: number, keys: readonly string[]): Generator<EscrowBatch> {
  const random = seededRandom(seed)
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T
  const nodes = ['node-a', 'node-b', 'node-c']
  const seqs = new Map(nodes.map((n) => [n, 0]))
  const learnMs = 60_000
  let now = T0
  for (const nodeId of nodes) {
    const seq = (seqs.get(nodeId) as number) + 1
    seqs.set(nodeId, seq)
    // a read of a key: on a Cluster, the call goes to the keys' slot, whose epoch then begins
    const refresh = [{ key: keys[0] as string, windowStartMs: now, windowSizeMs: SIZE }]
    yield { namespace: NAMESPACE, nodeId, seq, nowMs: now, learnMs, windows: [], refresh, grants: [] }
  }
  // past the learning period (and past the processes' memory of the warm-up's count)
  now += learnMs + 1
  for (let step = 0; step < 300; step++) {
    now += Math.floor(random() * 400)
    const nodeId = pick(nodes)
    let seq = (seqs.get(nodeId) as number) + 1
    seqs.set(nodeId, seq)
    // now and then a call whose seq is not newer (a late or retried one): nothing it writes or grants lands
    if (random() < 0.1) seq -= 1 + Math.floor(random() * 3)
    const start = Math.floor(now / SIZE) * SIZE
    const windows: WindowPush[] = []
    const refresh: WindowRef[] = []
    const grants: GrantRequest[] = []
    const used = new Set<string>()
    for (const key of keys) {
      const r = random()
      if (r < 0.3) {
        const minimum = Math.floor(random() * 8) + (random() < 0.2 ? 0.5 : 0)
        const countRefused = random() < 0.3
        // several hits of the key in one turn: as many as fit are granted
        const wanted = random() < 0.3 ? minimum + Math.floor(random() * 6) : undefined
        grants.push({
          key,
          windowStartMs: start,
          windowSizeMs: SIZE,
          minimum,
          target: Math.max(wanted ?? minimum, LIMIT),
          limit: LIMIT,
          countRefused,
          ...(wanted === undefined ? {} : { wanted }),
        })
        used.add(key)
      } else if (r < 0.45) {
        const count = Math.floor(random() * 10) + (random() < 0.2 ? 0.25 : 0)
        windows.push({ key, windowStartMs: random() < 0.7 ? start : start - SIZE, windowSizeMs: SIZE, count, diff: 0 })
      } else if (r < 0.55) {
        refresh.push({ key, windowStartMs: random() < 0.5 ? start : start - SIZE, windowSizeMs: SIZE })
      }
    }
    // a key-window is never both written and granted in one batch
    const writes = windows.filter((w) => !(used.has(w.key) && w.windowStartMs === start))
    yield { namespace: NAMESPACE, nodeId, seq, nowMs: now, learnMs, windows: writes, refresh, grants }
  }
}

for (const [name, make, perSlot] of clients) {
  describe(`RedisStrategy.escrow through ${name}`, () => {
    it('answers every batch as MemoryStrategy.escrow does (rows, grants, processes, learning)', async () => {
      const prefix = `${runPrefix}-${randomUUID().slice(0, 6)}`
      // a strategy per process, as in a fleet; the memory store is shared
      const redis = new Map<string, Strategy>()
      const memory = new MemoryStrategy()
      const keys = perSlot ? keysOfOneSlot(4) : ['k0', 'k1', 'k2', 'k3']
      let grantsRaised = 0
      let refusals = 0
      for (const batch of workload(7, keys)) {
        let strategy = redis.get(batch.nodeId)
        if (strategy === undefined) redis.set(batch.nodeId, (strategy = await make(prefix)))
        const [got, want] = await Promise.all([(strategy.escrow as NonNullable<Strategy['escrow']>)(batch), memory.escrow(batch)])
        assert.deepEqual(strip(got), strip(want), `batch of ${batch.nodeId} seq ${batch.seq} at +${batch.nowMs - T0} ms`)
        for (const g of want.grants) {
          if (g.own > 0) grantsRaised++
          if (g.refused === true) refusals++
        }
      }
      assert.ok(grantsRaised > 50, `the workload raised ${grantsRaised} reservations`)
      assert.ok(refusals > 10, `the workload was refused ${refusals} grants`)
    })
  })
}

describe('RedisStrategy.escrow epochs', () => {
  const makeSingle = clients[1]?.[1] as Make
  const makeWhole = clients[0]?.[1] as Make
  const grant = (key: string, nowMs: number): GrantRequest => ({
    key,
    windowStartMs: Math.floor(nowMs / SIZE) * SIZE,
    windowSizeMs: SIZE,
    minimum: 1,
    target: LIMIT,
    limit: LIMIT,
  })
  const batch = (nodeId: string, seq: number, nowMs: number, grants: GrantRequest[], windows: WindowPush[] = []): EscrowBatch => ({
    namespace: NAMESPACE,
    nodeId,
    seq,
    nowMs,
    learnMs: 1000,
    windows,
    refresh: [],
    grants,
  })
  const call = (s: RedisStrategy, b: EscrowBatch) => s.escrow(b)

  for (const [mode, make] of [
    ['an epoch key per slot', makeSingle],
    ['one epoch key', makeWhole],
  ] as const) {
    it(`${mode}: grants nothing for learnMs after the epoch begins, then grants`, async () => {
      const s = await make(`${runPrefix}-${randomUUID().slice(0, 6)}`)
      const first = await call(s, batch('a', 1, T0, [grant('k', T0)]))
      assert.equal(first.learning, true)
      assert.equal(first.epochMs, T0)
      assert.equal(first.grants[0]?.own, 0)
      const later = await call(s, batch('a', 2, T0 + 999, [grant('k', T0 + 999)]))
      assert.equal(later.learning, true)
      const done = await call(s, batch('a', 3, T0 + 1000, [grant('k', T0 + 1000)]))
      assert.equal(done.learning, false)
      assert.equal(done.epochMs, T0)
      // the hit, then a quarter of what is left: 1 + floor(19 / 4)
      assert.equal(done.grants[0]?.own, 5)
    })

    it(`${mode}: a store that lost its data answers a newer epoch, and learns again`, async () => {
      const prefix = `${runPrefix}-${randomUUID().slice(0, 6)}`
      const s = await make(prefix)
      await call(s, batch('a', 1, T0, [grant('k', T0)]))
      const held = await call(s, batch('a', 2, T0 + 1500, [grant('k', T0 + 1500)]))
      assert.equal(held.grants[0]?.own, 5)
      // the data is gone, as after a restart without persistence
      const admin = new Redis(singleUrl)
      for (const name of await admin.keys(`${prefix}*`)) await admin.unlink(name)
      admin.disconnect()
      const after = await call(s, batch('a', 3, T0 + 2000, [grant('k', T0 + 2000)]))
      assert.ok(after.epochMs > held.epochMs, `epoch ${after.epochMs} after ${held.epochMs}`)
      assert.equal(after.learning, true)
      assert.equal(after.grants[0]?.own, 0)
      // another process, new to the namespace, sees the same learning period
      const other = await make(prefix)
      assert.equal((await call(other, batch('b', 1, T0 + 2500, [grant('k', T0 + 2500)]))).learning, true)
      // `a` last called more than learnMs ago: `b` is the one process, and gets 1 + floor(19 / 4)
      assert.equal((await call(other, batch('b', 2, T0 + 4000, [grant('k', T0 + 4000)]))).grants[0]?.own, 5)
    })

    it(`${mode}: lost writes (the generation went back, as after a failover) raise the epoch and renew the store's`, async () => {
      const prefix = `${runPrefix}-${randomUUID().slice(0, 6)}`
      const s = await make(prefix)
      const other = await make(prefix)
      await call(s, batch('a', 1, T0, [grant('k', T0)]))
      await call(other, batch('b', 1, T0, [], [{ key: 'k', windowStartMs: T0, windowSizeMs: SIZE, count: 0, diff: 0 }]))
      const held = await call(s, batch('a', 2, T0 + 1500, [grant('k', T0 + 1500)]))
      const admin = new Redis(singleUrl)
      const [group] = (await admin.keys(`${prefix}*escrow*`)) as [string]
      // the replica missed the last calls: the generation is behind what `a` was answered
      await admin.hset(group, 'g', '1')
      const lost = await call(s, batch('a', 3, T0 + 1600, []))
      assert.ok(lost.epochMs > held.epochMs)
      // the next call replaces the store's epoch: every process learns it, and grants wait
      const renewed = await call(s, batch('a', 4, T0 + 1700, [grant('k', T0 + 1700)]))
      assert.equal(renewed.learning, true)
      assert.equal(renewed.epochMs, lost.epochMs, 'the renewal it asked for is no second loss')
      const seen = await call(other, batch('b', 2, T0 + 1800, [grant('k', T0 + 1800)]))
      assert.equal(seen.learning, true)
      assert.ok(seen.epochMs > T0, 'the other process sees a newer epoch')
      admin.disconnect()
    })
  }

  it('keeps the epoch key alive: an expiry from the start, pushed back at most once per quarter of learnMs', async () => {
    const prefix = `${runPrefix}-${randomUUID().slice(0, 6)}`
    const s = await makeSingle(prefix)
    await call(s, batch('a', 1, T0, [grant('k', T0)]))
    const admin = new Redis(singleUrl)
    const [group] = (await admin.keys(`${prefix}*escrow*`)) as [string]
    const ttl = await admin.pttl(group)
    assert.ok(ttl > 590_000 && ttl <= 600_000, `pttl ${ttl}`)
    await admin.pexpire(group, 5000)
    // within a quarter of learnMs (250 ms) of the last push: left alone
    await call(s, batch('b', 1, T0 + 200, [grant('k', T0 + 200)]))
    assert.ok((await admin.pttl(group)) <= 5000)
    await call(s, batch('a', 2, T0 + 250, [grant('k', T0 + 250)]))
    assert.ok((await admin.pttl(group)) > 590_000)
    admin.disconnect()
  })

  it('an epoch key that expired after the process last called is no loss', async () => {
    const prefix = `${runPrefix}-${randomUUID().slice(0, 6)}`
    const s = await makeSingle(prefix)
    const first = await call(s, batch('a', 1, T0, [grant('k', T0)]))
    const admin = new Redis(singleUrl)
    for (const name of await admin.keys(`${prefix}*`)) await admin.unlink(name)
    admin.disconnect()
    // past the key's lifetime (10 minutes at least): nothing held then counts now
    const later = T0 + 3_600_000
    const again = await call(s, batch('a', 2, later, [grant('k', later)]))
    assert.equal(again.epochMs, first.epochMs)
    assert.equal(again.learning, true)
  })

  it('refuses a batch it cannot send, as a STORE_ERROR', async () => {
    const s = await makeSingle(`${runPrefix}-${randomUUID().slice(0, 6)}`)
    await assert.rejects(
      call(s, batch('a', 1, T0, [{ ...grant('k', T0), limit: Number.NaN }])),
      (err: unknown) => err instanceof StoreError && err.code === 'STORE_ERROR' && /limit/.test(err.message),
    )
    await assert.rejects(
      call(s, batch('a', 1, T0, [], [{ key: 'k', windowStartMs: T0, windowSizeMs: SIZE, count: Number.POSITIVE_INFINITY, diff: 1 }])),
      (err: unknown) => err instanceof StoreError && err.code === 'STORE_ERROR',
    )
  })
})
