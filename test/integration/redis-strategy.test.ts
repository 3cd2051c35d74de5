/**
 * The Redis strategy against real servers: the contract suite on the shared single node
 * (127.0.0.1:6379) and on the local 3-master cluster (scripts/redis-cluster.sh), then what is
 * particular to Redis (hash tags, expiry, scripts by SHA, one round trip per synchronous hit) on
 * servers of the test's own.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Cluster, Redis } from 'ioredis'
import { ConfigError } from '../../src/core/errors.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { type BlockWrite, type CounterRow, type DiffBatch, type Strategy, windowExpiresAtMs } from '../../src/core/strategy.js'
import { windowStartMs } from '../../src/core/window.js'
import { MemoryStrategy } from '../../src/strategies/memory.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { keySlot } from '../../src/strategies/redis/key-slot.js'
import { PUSH, PUSH_BLOCKS, SYNC_PUSH, SYNC_PUSH_BLOCKS } from '../../src/strategies/redis/lua.js'
import { runStrategyContract } from '../../src/testing/strategy-contract.js'
import { type RedisServerHandle, sharedClusterPorts, sharedRedisUrl, startRedisServer } from '../support/redis-server.js'

// Every key this file writes on the shared servers starts with this prefix, deleted at the end.
const runPrefix = `rltest-${randomUUID().slice(0, 8)}`

async function deleteByPrefix(nodes: readonly Redis[], prefix: string): Promise<void> {
  for (const node of nodes) {
    let cursor = '0'
    do {
      const [next, names] = await node.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000)
      cursor = next
      // one UNLINK per name: names of different slots cannot share a command on a cluster
      await Promise.all(names.map((name) => node.unlink(name)))
    } while (cursor !== '0')
  }
}

const singleUrl = await sharedRedisUrl()
const single = new Redis(singleUrl)
runStrategyContract({
  name: 'redis (single node, one call per slot: batchAcrossSlots false)',
  make: () => new RedisStrategy({ client: single, prefix: `${runPrefix}-single`, batchAcrossSlots: false }),
  teardown: async () => {
    await deleteByPrefix([single], `${runPrefix}-single`)
    await single.quit()
  },
})

const singleAcross = new Redis(singleUrl)
runStrategyContract({
  name: 'redis (single node, batchAcrossSlots: the default)',
  make: () => new RedisStrategy({ client: singleAcross, prefix: `${runPrefix}-across` }),
  teardown: async () => {
    await deleteByPrefix([singleAcross], `${runPrefix}-across`)
    await singleAcross.quit()
  },
})

const clusterPorts = await sharedClusterPorts()
const cluster = new Cluster(clusterPorts.map((port) => ({ host: '127.0.0.1', port })))
runStrategyContract({
  name: 'redis (cluster)',
  make: () => new RedisStrategy({ client: cluster, prefix: `${runPrefix}-cluster` }),
  teardown: async () => {
    await deleteByPrefix(cluster.nodes('master'), `${runPrefix}-cluster`)
    await cluster.quit()
  },
})

const nowMs = () => Date.now()
const batch = (
  namespace: string,
  nodeId: string,
  seq: number,
  windows: Array<{ key: string; windowStartMs: number; windowSizeMs: number; count: number }>,
) => ({
  namespace,
  nodeId,
  seq,
  nowMs: nowMs(),
  windows: windows.map((w) => ({ ...w, diff: w.count })),
  refresh: [],
})

describe('redis strategy: data model on a cluster', () => {
  let client: Cluster
  let strategy: RedisStrategy
  const prefix = `${runPrefix}-model`
  before(() => {
    client = new Cluster(clusterPorts.map((port) => ({ host: '127.0.0.1', port })))
    strategy = new RedisStrategy({ client, prefix })
  })
  after(async () => {
    await deleteByPrefix(client.nodes('master'), prefix)
    await client.quit()
  })

  it("keeps a key's windows in one slot and spreads a namespace's keys over every master", async () => {
    const start = windowStartMs(nowMs(), 60_000)
    const keys = Array.from({ length: 60 }, (_, i) => `user-${i}`)
    const windows = keys.flatMap((key) => [
      { key, windowStartMs: start, windowSizeMs: 60_000, count: 1 },
      { key, windowStartMs: start - 60_000, windowSizeMs: 60_000, count: 2 },
      { key, windowStartMs: windowStartMs(nowMs(), 3_600_000), windowSizeMs: 3_600_000, count: 3 },
    ])
    const rows = await strategy.pushDiffs(batch('spread', 'n1', 1, windows))
    assert.equal(rows.length, windows.length)
    const perMaster: number[] = []
    for (const node of client.nodes('master')) {
      const names: string[] = []
      let cursor = '0'
      do {
        const [next, page] = await node.scan(cursor, 'MATCH', `${prefix}:{spread:*`, 'COUNT', 1000)
        cursor = next
        names.push(...page)
      } while (cursor !== '0')
      perMaster.push(names.length)
      for (const name of names) {
        const key = /\{spread:(.*)\}/.exec(name)?.[1] as string
        const slots = new Set(
          [`${start}`, `${start - 60_000}`].map((s) => keySlot(`${prefix}:{spread:${key}}:60000:${s}`)).concat(keySlot(name)),
        )
        assert.equal(slots.size, 1, `every window of ${key} is in one slot`)
        assert.equal(Number(await node.call('CLUSTER', 'KEYSLOT', name)), keySlot(name), 'our slot is the server slot')
      }
    }
    assert.equal(perMaster.length, 3)
    assert.equal(
      perMaster.reduce((a, b) => a + b, 0),
      windows.length,
    )
    for (const n of perMaster) assert.ok(n > 0, `every master holds some keys: ${perMaster.join(', ')}`)
  })

  it("getCounters reads every master's keys", async () => {
    const start = windowStartMs(nowMs(), 60_000)
    const keys = Array.from({ length: 200 }, (_, i) => `k${i}`)
    await strategy.pushDiffs(
      batch(
        'scan',
        'n1',
        1,
        keys.map((key, i) => ({ key, windowStartMs: start, windowSizeMs: 60_000, count: i + 1 })),
      ),
    )
    const seen = new Map<string, number>()
    for await (const row of strategy.getCounters('scan', [60_000], nowMs(), 'n1')) seen.set(row.key, row.count)
    assert.equal(seen.size, 200)
    assert.equal(seen.get('k199'), 200)
  })

  it('escapes the namespace in SCAN patterns and keeps look-alike namespaces apart', async () => {
    const start = windowStartMs(nowMs(), 60_000)
    await strategy.pushDiffs(batch('a*', 'n1', 1, [{ key: 'x', windowStartMs: start, windowSizeMs: 60_000, count: 1 }]))
    await strategy.pushDiffs(batch('ab', 'n1', 1, [{ key: 'y', windowStartMs: start, windowSizeMs: 60_000, count: 2 }]))
    await strategy.pushDiffs(batch('a', 'n1', 1, [{ key: 'b:c', windowStartMs: start, windowSizeMs: 60_000, count: 3 }]))
    await strategy.pushDiffs(batch('a:b', 'n1', 1, [{ key: 'c', windowStartMs: start, windowSizeMs: 60_000, count: 4 }]))
    const read = async (ns: string) => {
      const out: string[] = []
      for await (const row of strategy.getCounters(ns, [60_000], nowMs())) out.push(`${row.key}=${row.count}`)
      return out.sort()
    }
    assert.deepEqual(await read('a*'), ['x=1'])
    assert.deepEqual(await read('a'), ['b:c=3'])
    assert.deepEqual(await read('a:b'), ['c=4'])
    // braces in a namespace or key are escaped: the hash tag stays exactly <namespace>:<key>
    await strategy.pushDiffs(batch('{b}', 'n1', 1, [{ key: '}{%7D', windowStartMs: start, windowSizeMs: 60_000, count: 5 }]))
    assert.deepEqual(await read('{b}'), ['}{%7D=5'])
    assert.equal((await strategy.getWindow('}{%7D', '{b}', start, 60_000)).count, 5)
  })

  it("keeps a key's block in its windows' slot, and getCounters never takes a block for a window", async () => {
    const now = nowMs()
    const start = windowStartMs(now, 60_000)
    const keys = Array.from({ length: 60 }, (_, i) => (i % 7 === 0 ? `{u}-${i}` : `user-${i}`))
    // blocks of every third key, some of keys without a window in the batch (their own calls)
    const blocks = keys.filter((_, i) => i % 3 === 0).map((key, i) => ({ key, untilMs: now + 30_000 + i }))
    const rows = await strategy.pushDiffs({
      ...batch(
        'blk',
        'n1',
        1,
        keys.slice(0, 40).map((key) => ({ key, windowStartMs: start, windowSizeMs: 60_000, count: 2 })),
      ),
      nowMs: now,
      refresh: keys.slice(40).map((key) => ({ key, windowStartMs: start, windowSizeMs: 60_000 })),
      blocks,
      readBlocks: true,
    })
    const ends = new Map(blocks.map((b) => [b.key, b.untilMs]))
    assert.deepEqual(
      rows.map((r) => [r.key, r.count, r.blockedUntilMs]),
      keys.map((key, i) => [key, i < 40 ? 2 : 0, ends.get(key) ?? 0]),
    )
    const master = client.nodes('master')[0] as Redis
    for (const key of keys.filter((_, i) => i % 3 === 0)) {
      const encoded = key.replace(/[{}]/g, (c) => (c === '{' ? '%7B' : '%7D'))
      const block = `${prefix}:{blk:${encoded}}:b`
      assert.equal(keySlot(block), keySlot(`${prefix}:{blk:${encoded}}:60000:${start}`), 'one slot for the block and the windows')
      assert.equal(Number(await master.call('CLUSTER', 'KEYSLOT', block)), keySlot(block), 'our slot is the server slot')
      assert.equal(await client.get(block), String(ends.get(key)))
    }
    const counted: CounterRow[] = []
    for await (const row of strategy.getCounters('blk', [60_000], now, 'n1')) counted.push(row)
    assert.deepEqual(counted.map((r) => r.key).sort(), keys.slice(0, 40).sort(), 'windows only, no block')
    assert.ok(counted.every((r) => r.count === 2 && r.windowStartMs === start))
  })
})

describe('redis strategy: on a server of its own', () => {
  let server: RedisServerHandle
  let client: Redis
  let strategy: RedisStrategy
  before(async () => {
    server = await startRedisServer()
    client = new Redis(server.url)
    // one call per slot, as on a cluster: the batched path has strategies of its own below
    strategy = new RedisStrategy({ client, graceMs: 5000, batchAcrossSlots: false })
  })
  after(async () => {
    await client.quit()
    await server.stop()
  })

  it('sets an absolute expiry covering the previous window plus grace on every write', async () => {
    const start = windowStartMs(nowMs(), 60_000)
    await strategy.pushDiffs(batch('exp', 'n1', 1, [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: 1 }]))
    const name = `rl:{exp:k}:60000:${start}`
    assert.equal(Number(await client.call('PEXPIRETIME', name)), windowExpiresAtMs(start, 60_000, 5000))
    await strategy.pushDiffs(batch('exp', 'n2', 1, [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: 1 }]))
    assert.equal(Number(await client.call('PEXPIRETIME', name)), windowExpiresAtMs(start, 60_000, 5000), 'the same absolute time again')
    assert.deepEqual(await client.hgetall(name), { 'c:n1': '1', 's:n1': '1', 'c:n2': '1', 's:n2': '1', t: '2' })
  })

  it('keeps a block as a string expiring a grace after its end: lengthened, never shortened, lifted by a delete', async () => {
    const now = nowMs()
    const name = 'rl:{ttl:k}:b'
    const push = (blocks: BlockWrite[]) => strategy.pushDiffs({ ...batch('ttl', 'n1', 1, []), nowMs: now, blocks })
    const pttl = async () => Number(await client.pttl(name))
    await push([{ key: 'k', untilMs: now + 60_000 }])
    assert.equal(await client.type(name), 'string')
    assert.equal(await client.get(name), String(now + 60_000))
    // PX is untilMs - nowMs + graceMs (5 s here), counted from the batch's clock
    const first = await pttl()
    assert.ok(first <= 65_000 && first > 64_000, `pttl ${first}`)
    await push([{ key: 'k', untilMs: now + 10_000 }])
    assert.equal(await client.get(name), String(now + 60_000), 'an earlier end leaves the block')
    assert.ok((await pttl()) <= first, 'and its expiry')
    await push([{ key: 'k', untilMs: now + 120_000 }])
    assert.equal(await client.get(name), String(now + 120_000))
    assert.ok((await pttl()) > 124_000)
    // a reset and a purge leave it; nothing reads it as a window
    await strategy.resetKey('ttl', 'k', [60_000], now)
    await strategy.purge('ttl', [60_000], now + 10 * 60_000)
    assert.equal(await client.get(name), String(now + 120_000))
    for await (const row of strategy.getCounters('ttl', [60_000], now)) assert.fail(`a row from a block: ${JSON.stringify(row)}`)
    await push([{ key: 'k', untilMs: 0 }])
    assert.equal(await client.exists(name), 0, 'a lift deletes it')
    // an end already past still expires by itself, a grace later
    await push([{ key: 'k', untilMs: now - 1_000 }])
    assert.ok((await pttl()) <= 4_000)
    await assert.rejects(push([{ key: 'k', untilMs: -1 }]), (err: unknown) => err instanceof Error && /untilMs/.test(err.message))
  })

  it('sends a batch without blocks exactly as before, and one call per push with blocks', async () => {
    const marker = `done-${randomUUID()}`
    const now = nowMs()
    const start = windowStartMs(now, 60_000)
    const w = (key: string, windowSizeMs = 60_000) => ({ key, windowStartMs: windowStartMs(now, windowSizeMs), windowSizeMs, count: 1 })
    const prev = { key: 'k', windowStartMs: start - 60_000, windowSizeMs: 60_000 }
    // every script once before the monitor: a client's first call of a script is an EVAL of its
    // source (strategies/redis/scripts.ts), the EVALSHAs below are the calls after it
    const keys = Array.from({ length: 20 }, (_, i) => `k${i}`)
    const sendAll = async (ns: string) => {
      const sync = { ...batch(ns, 'n1', 1, [w('k')]), nowMs: now, refresh: [prev] }
      await strategy.pushDiffs(sync)
      await strategy.pushDiffs({ ...batch(ns, 'n1', 2, [w('k'), w('k', 3_600_000)]), nowMs: now })
      await strategy.pushDiffs({ ...sync, seq: 3, readBlocks: true })
      await strategy.pushDiffs({
        ...batch(ns, 'n1', 4, [w('k'), w('k', 3_600_000)]),
        nowMs: now,
        blocks: [{ key: 'k', untilMs: now + 1 }],
      })
      await strategy.pushDiffs({
        ...batch(
          ns,
          'n1',
          5,
          keys.slice(0, 10).map((key) => w(key)),
        ),
        nowMs: now,
        blocks: keys.slice(10).map((key) => ({ key, untilMs: now + 1 })),
        readBlocks: true,
      })
    }
    await sendAll('mon-warm')
    const monitor = await client.monitor()
    const seen: string[][] = []
    monitor.on('monitor', (_time: string, args: string[]) => seen.push(args))
    await sendAll('mon')
    await client.echo(marker)
    while (!seen.some((args) => args[1] === marker)) await new Promise((resolve) => setTimeout(resolve, 5))
    monitor.disconnect()
    const calls = seen.filter((args) => args[0]?.toLowerCase() === 'evalsha')
    const [plainSync, plainPush, blockSync, blockPush, ...many] = calls as string[][]
    const head = 'rl:{mon:k}'
    // the path without blocks: SYNC_PUSH and PUSH with the arguments they always had
    assert.deepEqual(plainSync?.slice(0, 5), ['evalsha', SYNC_PUSH.sha, '2', `${head}:60000:${start}`, `${head}:60000:${start - 60_000}`])
    assert.equal(plainSync?.length, 3 + 2 + 5, 'names, then nonce, nodeId, seq, count, expire-at')
    assert.deepEqual(plainPush?.slice(0, 3), ['evalsha', PUSH.sha, '2'])
    assert.equal(plainPush?.length, 3 + 2 + 4 + 2 * 2, 'names, then nonce, nodeId, seq, n, count and expire-at of each')
    // with blocks: their own scripts, the key's block name last in KEYS, still one call
    assert.deepEqual(blockSync?.slice(0, 6), [
      'evalsha',
      SYNC_PUSH_BLOCKS.sha,
      '3',
      `${head}:60000:${start}`,
      `${head}:60000:${start - 60_000}`,
      `${head}:b`,
    ])
    assert.deepEqual(blockPush?.slice(0, 3), ['evalsha', PUSH_BLOCKS.sha, '3'])
    assert.equal(blockPush?.[5], `${head}:b`)
    // several keys: one PUSH_BLOCKS per hash slot, the blocks in the call of their slot
    const slots = new Set(keys.map((key) => keySlot(`rl:{mon:${key}}:b`)))
    assert.equal(many.length, slots.size)
    assert.ok(many.every((args) => args[1] === PUSH_BLOCKS.sha))
  })

  it('applies blocks and lifts in the order sent, as the memory store does, in calls per slot and in chunks', async () => {
    // a seeded generator: a failure replays
    let seed = 0x2f6b
    const rand = () => {
      seed = (seed + 0x6d2b79f5) | 0
      let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
      t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296
    }
    const pick = <T>(items: readonly T[]) => items[Math.floor(rand() * items.length)] as T
    const across = new RedisStrategy({ client, batchAcrossSlots: true, graceMs: 5000, prefix: 'rl-across' })
    const stores: Strategy[] = [new MemoryStrategy({ graceMs: 5000 }), strategy, across]
    const few = ['a', 'b', '{c}', 'd e', '', 'ключ']
    const many = Array.from({ length: 700 }, (_, i) => `ip-${i}`)
    let now = nowMs()
    for (let round = 0; round < 150; round++) {
      now += Math.floor(rand() * 3000)
      const big = round % 10 === 9
      const keys = big ? many : few
      const blocks: BlockWrite[] = []
      for (let i = big ? 600 : Math.floor(rand() * 4); i > 0; i--)
        blocks.push({ key: pick(keys), untilMs: rand() < 0.3 ? 0 : Math.max(0, now + Math.floor(rand() * 20_000) - 2_000) })
      const start = windowStartMs(now, 60_000)
      const shuffled = [...keys].sort(() => rand() - 0.5)
      const written = shuffled.slice(0, big ? 300 : Math.floor(rand() * 3))
      const read = shuffled.slice(written.length, written.length + (big ? 300 : 1 + Math.floor(rand() * 3)))
      const b: DiffBatch = {
        namespace: 'race',
        nodeId: pick(['n1', 'n2', 'n3']),
        seq: round + 1,
        nowMs: now,
        windows: written.map((key) => ({ key, windowStartMs: start, windowSizeMs: 60_000, count: round, diff: 1 })),
        refresh: read.map((key) => ({ key, windowStartMs: start, windowSizeMs: 60_000 })),
        blocks,
        readBlocks: rand() < 0.8,
      }
      const [expected, ...answers] = await Promise.all(stores.map((s) => s.pushDiffs(b)))
      for (const answer of answers) assert.deepEqual(answer, expected, `round ${round}`)
    }
  })

  it('runs its scripts again after the server forgot them (SCRIPT FLUSH)', async () => {
    const start = windowStartMs(nowMs(), 60_000)
    await strategy.pushDiffs(batch('flush', 'n1', 1, [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: 2 }]))
    await client.script('FLUSH')
    const rows = await strategy.pushDiffs(batch('flush', 'n1', 2, [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: 5 }]))
    assert.equal(rows[0]?.count, 5)
    await client.script('FLUSH')
    await strategy.resetKey('flush', 'k', [60_000], nowMs())
    assert.equal((await strategy.getWindow('k', 'flush', start, 60_000)).count, 0)
    const loaded = (await client.script('EXISTS', '0000000000000000000000000000000000000000')) as number[]
    assert.deepEqual(loaded, [0])
  })

  it('warms a new process up from the store with fetch()', async () => {
    const writer = RateLimiting.newInstance('redis-warm-writer')
    const reader = RateLimiting.newInstance('redis-warm-reader')
    for (const rl of [writer, reader]) rl.new({ namespace: 'warm', windowSizes: [60, 3600], syncRate: 1, autoSync: false, strategy })
    for (let i = 0; i < 30; i++) writer.increment(`ip-${i % 3}`, 60, 1, 'warm')
    writer.increment('ip-0', 3600, 2.5, 'warm')
    await writer.sync('warm')
    await reader.fetch('warm')
    // current + previous: exact even if a window boundary passes during the test
    const seen = (key: string, size: number) => {
      const { current, previous } = reader.namespace('warm').table(size).counts(key, Date.now())
      return current + previous
    }
    assert.equal(seen('ip-1', 60), 10)
    assert.equal(seen('ip-0', 3600), 2.5)
    await writer.close()
    await reader.close()
  })

  it('holds decimal counts and sums them like the memory store', async () => {
    const start = windowStartMs(nowMs(), 60_000)
    await strategy.pushDiffs(batch('dec', 'n1', 1, [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: 0.1 }]))
    const rows = await strategy.pushDiffs(batch('dec', 'n2', 1, [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: 0.2 }]))
    assert.equal(rows[0]?.count, 0.1 + 0.2)
    assert.equal(rows[0]?.own, 0.2)
    await strategy.resetKey('dec', 'k', [60_000], nowMs())
    assert.equal((await strategy.getWindow('k', 'dec', start, 60_000)).count, 0)
  })

  it('costs one script call per hit in synchronous mode', async () => {
    const rl = RateLimiting.newInstance('redis-sync-cost')
    rl.new({ namespace: 'sync', windowSizes: [1, 60, 3600], syncRate: 0, strategy, autoSync: false })
    const limiter = rl.limiter({
      namespace: 'sync',
      limits: [
        { limit: 1000, window: 60 },
        { limit: 5000, window: 3600 },
      ],
    })
    await client.script('FLUSH')
    await client.config('RESETSTAT')
    for (let i = 0; i < 50; i++) {
      const d = await limiter.hit(`user-${i % 5}`)
      assert.equal(d.allowed, true)
    }
    for (let i = 0; i < 20; i++) await rl.increment(`user-${i % 5}`, 1, 1, 'sync')
    const stats = await client.info('commandstats')
    const stat = (command: string, field: string) => Number(new RegExp(`cmdstat_${command}:.*\\b${field}=(\\d+)`).exec(stats)?.[1] ?? 0)
    // the first EVALSHA of each script finds no script (flushed above) and fails; EVAL then sends
    // its source once: PUSH for the hits (three windows written), SYNC_PUSH for the increments
    // (one window written, the others read)
    assert.equal(stat('evalsha', 'failed_calls'), 2)
    assert.equal(stat('eval', 'calls'), 2)
    assert.equal(stat('evalsha', 'calls') - stat('evalsha', 'failed_calls') + stat('eval', 'calls'), 70, 'one script call per hit')
    await rl.close()
  })

  it('sends a sync as one script call per hash slot, or per 512 key-windows with batchAcrossSlots (the default)', async () => {
    const start = windowStartMs(nowMs(), 60_000)
    const windows = Array.from({ length: 1000 }, (_, i) => ({ key: `k${i}`, windowStartMs: start, windowSizeMs: 60_000, count: 1 }))
    const slots = new Set(windows.map((w) => keySlot(`rl:{calls:${w.key}}:60000:${start}`)))
    const scriptCalls = async (s: RedisStrategy, namespace: string) => {
      await client.config('RESETSTAT')
      const rows = await s.pushDiffs(batch(namespace, 'n1', 1, windows))
      assert.equal(rows.length, 1000)
      assert.ok(rows.every((r, i) => r.key === `k${i}` && r.count === 1 && r.own === 1))
      const stats = await client.info('commandstats')
      return Number(/cmdstat_evalsha:calls=(\d+)/.exec(stats)?.[1] ?? 0) + Number(/cmdstat_eval:calls=(\d+)/.exec(stats)?.[1] ?? 0)
    }
    assert.equal(await scriptCalls(strategy, 'calls'), slots.size)
    const across = new RedisStrategy({ client })
    assert.equal(await scriptCalls(across, 'calls-across'), 2)
  })

  it('creates and closes its own client from a url, and never closes a client it was given', async () => {
    const owned = new RedisStrategy({ url: server.url })
    const start = windowStartMs(nowMs(), 60_000)
    await owned.pushDiffs(batch('own', 'n1', 1, [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: 1 }]))
    await owned.close()
    await assert.rejects(owned.getWindow('k', 'own', start, 60_000))
    await strategy.close()
    assert.equal((await strategy.getWindow('k', 'own', start, 60_000)).count, 1, 'the given client still works')
  })

  it('refuses bad options with errors that name them', () => {
    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [{}, /needs client .*, url or sentinels/],
      [{ client, url: server.url }, /either client or url/],
      [{ client, prefix: 'a{b}' }, /prefix must be a non-empty string without braces/],
      [{ client, prefix: '' }, /prefix/],
      [{ client, graceMs: -1 }, /graceMs/],
      [{ url: 'http://x' }, /url must be a redis:\/\//],
      [{ client: {} }, /client must be an ioredis Redis or Cluster/],
      [{ client: Object.assign(Object.create(client), { options: { keyPrefix: 'app:' } }) }, /keyPrefix "app:"/],
      [{ client, batchAcrossSlots: 'yes' }, /batchAcrossSlots must be a boolean/],
      [{ client: cluster, batchAcrossSlots: true }, /batchAcrossSlots cannot be used with a cluster client/],
    ]
    for (const [options, message] of bad) {
      assert.throws(
        () => new RedisStrategy(options),
        (err: unknown) => err instanceof ConfigError && message.test(err.message),
      )
    }
  })
})
