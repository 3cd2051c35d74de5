import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { createFakeClock } from '../../src/core/clock.js'
import { ConfigError } from '../../src/core/errors.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import type { WindowPush } from '../../src/core/strategy.js'
import { windowStartMs } from '../../src/core/window.js'
import { MemcachedClient, MemcachedStrategy } from '../../src/strategies/memcached/index.js'
import { exptime, KeySpace, MAX_RELATIVE_TTL_SEC, parseLog } from '../../src/strategies/memcached/keys.js'
import { runStrategyContract } from '../../src/testing/strategy-contract.js'
import { requireSharedMemcached, startPrivateMemcached } from '../support/memcached-server.js'

const server = await requireSharedMemcached()
const prefix = `rl-test-${randomUUID().slice(0, 8)}:`

runStrategyContract({
  name: 'memcached',
  make: () => new MemcachedStrategy({ servers: [server], prefix }),
})

function win(key: string, windowStartMs: number, count: number, windowSizeMs = 60_000): WindowPush {
  return { key, windowStartMs, windowSizeMs, count, diff: count }
}

describe('MemcachedStrategy', () => {
  let client: MemcachedClient
  let s: MemcachedStrategy
  before(() => {
    client = new MemcachedClient({ servers: [server] })
    s = new MemcachedStrategy({ client, prefix, compactAfter: 8 })
  })
  after(async () => {
    await s.close()
    client.close()
  })

  it('refuses bad options when built, naming the option', () => {
    assert.throws(() => new MemcachedStrategy({}), ConfigError)
    assert.throws(() => new MemcachedStrategy({ servers: [server], client }), /exactly one of servers/)
    assert.throws(() => new MemcachedStrategy({ servers: ['nohost'] }), /host:port/)
    assert.throws(() => new MemcachedStrategy({ servers: [server], prefix: 'has space' }), /prefix must be printable ASCII/)
    assert.throws(() => new MemcachedStrategy({ servers: [server], indexShards: 0 }), /indexShards/)
  })

  it('hashes keys of any length and characters into names memcached accepts, one per key-window', () => {
    const keys = new KeySpace('p'.repeat(64))
    const names = new Set<string>()
    const hostile = ['', ' ', 'a b', '\r\n', 'k'.repeat(10_000), 'ключ-🔑', 'x\u0000y', 'mg x v']
    for (const key of hostile) {
      for (const ns of ['ns', 'ns2']) {
        const name = keys.window(ns, key, 86_400, 1_700_000_000)
        assert.ok(Buffer.byteLength(name) <= 250, `${name.length} bytes`)
        assert.match(name, /^[\x21-\x7e]+$/, 'printable, no whitespace or control characters')
        names.add(name)
        assert.equal(name, keys.window(ns, key, 86_400, 1_700_000_000), 'stable')
      }
    }
    assert.equal(names.size, hostile.length * 2, 'no two key-windows share a name')
    assert.notEqual(keys.window('ns', 'k', 60, 0), keys.window('ns', 'k', 60, 60))
    assert.notEqual(keys.window('ns', 'k', 60, 0), keys.window('ns', 'k', 1, 0))
  })

  it('computes TTLs: relative up to 30 days, absolute epoch seconds beyond, never under 2 s', () => {
    const now = 1_700_000_000_000
    assert.equal(exptime(now + 60_000, now), 60)
    assert.equal(exptime(now + 60_001, now), 61, 'rounded up: an item never dies before its window')
    assert.equal(exptime(now + 500, now), 2)
    assert.equal(exptime(now - 5_000, now), 2, 'an expired window still lives 2 s')
    assert.equal(exptime(now + MAX_RELATIVE_TTL_SEC * 1000, now), MAX_RELATIVE_TTL_SEC)
    const real = 1_800_000_000_000
    assert.equal(exptime(now + (MAX_RELATIVE_TTL_SEC + 1) * 1000, now, real), 1_800_000_000 + MAX_RELATIVE_TTL_SEC + 1)
  })

  it('keeps a window longer than 30 days alive on the server (sent as an absolute time)', async () => {
    const ns = `ttl-${randomUUID().slice(0, 8)}`
    const size = 40 * 86_400_000 // 40-day windows live 40 to 80 days
    const now = Date.now()
    const start = windowStartMs(now, size)
    await s.pushDiffs({
      namespace: ns,
      nodeId: 'n',
      seq: 1,
      nowMs: now,
      windows: [win('k', start, 3, size)],
      refresh: [],
    })
    const item = s.keys.window(ns, 'k', size, start)
    const [reply] = await client.exec([{ key: item, line: `mg ${item} t v` }])
    assert.equal(reply?.code, 'VA', 'the item did not expire at once')
    const ttl = Number(reply?.flags.find((f) => f.startsWith('t'))?.slice(1))
    const expected = Math.ceil((start + 2 * size + 10_000 - now) / 1000)
    assert.ok(ttl > MAX_RELATIVE_TTL_SEC && Math.abs(ttl - expected) <= 2, `ttl ${ttl}, expected about ${expected}`)
    assert.equal((await s.getWindow('k', ns, start, size)).count, 3)
  })

  it('creates a window under concurrent first writes from many connections without losing a hit', async () => {
    const ns = `race-${randomUUID().slice(0, 8)}`
    const now = Date.now()
    const start = windowStartMs(now, 60_000)
    const clients = Array.from({ length: 8 }, () => new MemcachedClient({ servers: [server] }))
    const writers = clients.map((c) => new MemcachedStrategy({ client: c, prefix }))
    try {
      for (let round = 0; round < 20; round++) {
        const key = `k${round}`
        await Promise.all(
          writers.map((w, i) =>
            w.pushDiffs({
              namespace: ns,
              nodeId: `n${i}`,
              seq: 1,
              nowMs: now,
              windows: [win(key, start, i + 1)],
              refresh: [],
            }),
          ),
        )
        assert.equal((await s.getWindow(key, ns, start, 60_000)).count, 36, `round ${round}`)
      }
    } finally {
      for (const w of writers) await w.close()
      for (const c of clients) c.close()
    }
  })

  it('compacts a long log with CAS and keeps its totals', async () => {
    const ns = `compact-${randomUUID().slice(0, 8)}`
    const now = Date.now()
    const start = windowStartMs(now, 60_000)
    const newest = new Map<string, number>()
    for (let seq = 1; seq <= 60; seq++) {
      const nodeId = `n${seq % 3}`
      newest.set(nodeId, seq)
      const rows = await s.pushDiffs({
        namespace: ns,
        nodeId,
        seq,
        nowMs: now,
        windows: [win('k', start, seq)],
        refresh: [],
      })
      assert.equal(
        rows[0]?.count,
        [...newest.values()].reduce((a, b) => a + b, 0),
        `seq ${seq}`,
      )
    }
    await s.close() // waits for background compactions
    s = new MemcachedStrategy({ client, prefix, compactAfter: 8 })
    const item = s.keys.window(ns, 'k', 60_000, start)
    const [reply] = await client.exec([{ key: item, line: `mg ${item} v` }])
    const log = parseLog(reply?.value?.toString() ?? '')
    assert.ok(log.entries < 60, `compacted: ${log.entries} entries for 60 pushes`)
    assert.equal((await s.getWindow('k', ns, start, 60_000)).count, 58 + 59 + 60)
  })

  it('refuses decimal counts, and the engine says so on the hit', async () => {
    assert.equal(s.supportsDecimals, false)
    const now = Date.now()
    await assert.rejects(
      s.pushDiffs({
        namespace: 'd',
        nodeId: 'n',
        seq: 1,
        nowMs: now,
        windows: [win('k', windowStartMs(now, 60_000), 0.5)],
        refresh: [],
      }),
      /not an integer.*supportsDecimals is false/,
    )
    const rl = RateLimiting.newInstance('mc-decimals')
    rl.new({
      namespace: 'd',
      windowSizes: [60],
      syncRate: 1,
      autoSync: false,
      strategy: s,
    })
    assert.throws(() => rl.increment('k', 60, 0.5, 'd'), /integer.*memcached.*0\.5|memcached.*integer.*0\.5/)
    assert.equal(rl.increment('k', 60, 2, 'd'), 2)
    await rl.close()
  })

  it('costs one round trip per synchronous hit', async () => {
    const ns = `sync-${randomUUID().slice(0, 8)}`
    const own = new MemcachedClient({ servers: [server] })
    const store = new MemcachedStrategy({ client: own, prefix })
    const rl = RateLimiting.newInstance('mc-sync')
    rl.new({ namespace: ns, windowSizes: [60], syncRate: 0, strategy: store })
    // the first hit also indexes the key-window, in the same pipeline
    for (let i = 0; i < 20; i++) await rl.increment('k', 60, 1, ns)
    assert.equal(own.stats.roundTrips, 20)
    assert.equal(await rl.slidingWindow('k', 60, undefined, ns), 20)
    await rl.close()
    await store.close()
    // (past compactAfter entries a log is compacted: one more round trip, in the background)
    own.close()
  })

  it('warms a new process up from the index with fetch', async () => {
    const ns = `fetch-${randomUUID().slice(0, 8)}`
    const clock = createFakeClock(windowStartMs(Date.now(), 60_000) + 5_000)
    const a = RateLimiting.newInstance('mc-fetch-a')
    const b = RateLimiting.newInstance('mc-fetch-b')
    for (const rl of [a, b]) rl.new({ namespace: ns, windowSizes: [60], syncRate: 1, autoSync: false, clock: clock.now, strategy: s })
    for (let i = 0; i < 30; i++) a.increment(`k${i % 10}`, 60, 1, ns)
    await a.sync(ns)
    await b.fetch(ns)
    for (let i = 0; i < 10; i++) assert.equal(b.slidingWindow(`k${i}`, 60, undefined, ns), 3, `k${i} as process a counted it`)
    await a.close()
    await b.close()
  })

  it('spreads key-windows over several servers and answers one row per window, in order', async () => {
    const servers = [await startPrivateMemcached(), await startPrivateMemcached()]
    const two = new MemcachedStrategy({ servers: servers.map((m) => m.server) })
    try {
      const ns = `multi-${randomUUID().slice(0, 8)}`
      const now = Date.now()
      const start = windowStartMs(now, 60_000)
      const windows = Array.from({ length: 200 }, (_, i) => win(`k${i}`, start, i + 1))
      const refresh = [{ key: 'absent', windowStartMs: start, windowSizeMs: 60_000 }]
      const rows = await two.pushDiffs({ namespace: ns, nodeId: 'n', seq: 1, nowMs: now, windows, refresh })
      assert.deepEqual(
        rows.map((r) => [r.key, r.count, r.own]),
        [...windows.map((w) => [w.key, w.count, w.count]), ['absent', 0, 0]],
      )
      const used = new Set(windows.map((w) => two.client.serverOf(two.keys.window(ns, w.key, 60_000, start))))
      assert.equal(used.size, 2, 'both servers hold windows')
      assert.equal(two.client.stats.roundTrips, 2, 'one round trip per server')
      const read = []
      for await (const row of two.getCounters(ns, [60_000], now, 'n')) read.push(row)
      assert.equal(read.length, 200)
    } finally {
      await two.close()
      for (const m of servers) await m.kill()
    }
  })

  describe('blocks', () => {
    const SIZE = 60_000
    // the block item as the server holds it: its end and its remaining TTL, s
    const stored = async (ns: string, key: string): Promise<{ end: number; ttl: number } | undefined> => {
      const item = s.keys.block(ns, key)
      const [reply] = await client.exec([{ key: item, line: `mg ${item} t v` }])
      if (reply?.code === 'EN') return undefined
      assert.equal(reply?.code, 'VA')
      return { end: Number(reply?.value?.toString()), ttl: Number(reply?.flags.find((f) => f.startsWith('t'))?.slice(1)) }
    }
    const block = (store: MemcachedStrategy, ns: string, nowMs: number, key: string, untilMs: number, nodeId = 'n') =>
      store.pushDiffs({ namespace: ns, nodeId, seq: 1, nowMs, windows: [], refresh: [], blocks: [{ key, untilMs }] })

    it('stores a block as one item expiring graceMs after its end, and a later end extends it', async () => {
      const ns = `bttl-${randomUUID().slice(0, 8)}`
      const now = Date.now()
      await block(s, ns, now, 'k', now + 60_000)
      let item = await stored(ns, 'k')
      assert.equal(item?.end, now + 60_000)
      assert.ok(item !== undefined && Math.abs(item.ttl - 70) <= 2, `ttl ${item?.ttl}, expected 60 s + 10 s of grace`)
      await block(s, ns, now, 'k', now + 200_000)
      await block(s, ns, now, 'k', now + 30_000) // earlier: neither the end nor the TTL moves
      item = await stored(ns, 'k')
      assert.equal(item?.end, now + 200_000)
      assert.ok(item !== undefined && Math.abs(item.ttl - 210) <= 2, `ttl ${item?.ttl}, expected 210`)
      // a 40-day block is sent as an absolute exptime (memcached would read 40 days as 1970)
      await block(s, ns, now, 'long', now + 40 * 86_400_000)
      item = await stored(ns, 'long')
      assert.ok(item !== undefined && Math.abs(item.ttl - (40 * 86_400 + 10)) <= 2, `ttl ${item?.ttl}`)
      await block(s, ns, now, 'k', 0)
      assert.equal(await stored(ns, 'k'), undefined, 'a lift deletes the item')
      // a block is neither a window nor an index entry: getCounters and resetKey never touch it
      const rows = []
      for await (const row of s.getCounters(ns, [SIZE], now)) rows.push(row)
      assert.deepEqual(rows, [])
      await s.resetKey(ns, 'long', [SIZE], now)
      assert.equal((await stored(ns, 'long'))?.end, now + 40 * 86_400_000)
    })

    it('costs no command without blocks, and one round trip with them (a CAS round only to raise an earlier end)', async () => {
      const ns = `brt-${randomUUID().slice(0, 8)}`
      const own = new MemcachedClient({ servers: [server] })
      const store = new MemcachedStrategy({ client: own, prefix })
      const sent: string[] = []
      const exec = own.exec.bind(own)
      own.exec = (commands) => {
        for (const c of commands) sent.push(c.line)
        return exec(commands)
      }
      try {
        const now = Date.now()
        const start = windowStartMs(now, SIZE)
        const batch = {
          namespace: ns,
          nodeId: 'n',
          nowMs: now,
          windows: [win('k', start, 1)],
          refresh: [{ key: 'k', windowStartMs: start - SIZE, windowSizeMs: SIZE }],
        }
        await store.pushDiffs({ ...batch, seq: 1 })
        assert.equal(own.stats.roundTrips, 1)
        assert.ok(!sent.some((line) => line.includes(`${prefix}b:`)), `no block item named: ${sent.join(' | ')}`)
        const plain = sent.length
        sent.length = 0
        await store.pushDiffs({ ...batch, seq: 2, readBlocks: true, windows: [win('k', start, 2)] })
        assert.equal(own.stats.roundTrips, 2, 'readBlocks: one round trip still')
        assert.equal(sent.length, plain - 2 + 1, 'one block read for the two rows of the key (and no index append now)')
        const rows = await store.pushDiffs({ ...batch, seq: 3, blocks: [{ key: 'k', untilMs: now + 5_000 }], readBlocks: true })
        assert.equal(own.stats.roundTrips, 3, 'a new block: written and read in the same round trip')
        assert.deepEqual(
          rows.map((r) => r.blockedUntilMs),
          [now + 5_000, now + 5_000],
        )
        await store.pushDiffs({ ...batch, seq: 4, blocks: [{ key: 'k', untilMs: now + 9_000 }], readBlocks: true })
        assert.equal(own.stats.roundTrips, 5, 'raising an earlier end: one CAS round more')
        assert.equal((await stored(ns, 'k'))?.end, now + 9_000)
      } finally {
        await store.close()
        own.close()
      }
    })

    it('keeps the latest end when many connections block a key at once, and a racing lift leaves a consistent item', async () => {
      const ns = `brace-${randomUUID().slice(0, 8)}`
      const clients = Array.from({ length: 8 }, () => new MemcachedClient({ servers: [server] }))
      const writers = clients.map((c) => new MemcachedStrategy({ client: c, prefix }))
      try {
        const now = Date.now()
        for (let round = 0; round < 20; round++) {
          const key = `k${round}`
          const ends = writers.map((_, i) => now + 10_000 + ((i * 7 + round) % 8) * 1_000)
          // a stored earlier end first, so that every writer goes through the CAS path
          await block(s, ns, now, key, now + 1_000)
          const rows = await Promise.all(
            writers.map((w, i) =>
              w.pushDiffs({
                namespace: ns,
                nodeId: `n${i}`,
                seq: 1,
                nowMs: now,
                windows: [],
                refresh: [{ key, windowStartMs: windowStartMs(now, SIZE), windowSizeMs: SIZE }],
                blocks: [{ key, untilMs: ends[i] as number }],
                readBlocks: true,
              }),
            ),
          )
          for (const [i, r] of rows.entries()) assert.ok((r[0]?.blockedUntilMs ?? 0) >= (ends[i] as number), `round ${round}, writer ${i}`)
          const item = await stored(ns, key)
          assert.equal(item?.end, Math.max(...ends), `round ${round}`)
          assert.ok(item !== undefined && Math.abs(item.ttl - Math.ceil((item.end - now + 10_000) / 1000)) <= 2, 'its TTL is its own')
        }
        for (let round = 0; round < 20; round++) {
          const key = `lift${round}`
          const ends = writers.map((_, i) => now + 10_000 + i * 1_000)
          await Promise.all([
            ...writers.map((w, i) => block(w, ns, now, key, ends[i] as number, `n${i}`)),
            block(writers[round % 8] as MemcachedStrategy, ns, now, key, 0),
          ])
          // any order of the lift among the blocks: none left, or the latest of those after it
          const item = await stored(ns, key)
          if (item !== undefined) {
            assert.ok(ends.includes(item.end), `round ${round}: ${item.end}`)
            assert.ok(Math.abs(item.ttl - Math.ceil((item.end - now + 10_000) / 1000)) <= 2, 'its TTL is its own')
          }
        }
      } finally {
        for (const w of writers) await w.close()
        for (const c of clients) c.close()
      }
    })

    it('reads blocks held on another server than the key-windows, in one round trip per server', async () => {
      const servers = [await startPrivateMemcached(), await startPrivateMemcached()]
      const two = new MemcachedStrategy({ servers: servers.map((m) => m.server) })
      try {
        const ns = `bmulti-${randomUUID().slice(0, 8)}`
        const now = Date.now()
        const start = windowStartMs(now, SIZE)
        const keys = Array.from({ length: 50 }, (_, i) => `k${i}`)
        await two.pushDiffs({
          namespace: ns,
          nodeId: 'n',
          seq: 1,
          nowMs: now,
          windows: [],
          refresh: [],
          blocks: keys.map((key, i) => ({ key, untilMs: now + 1_000 * (i + 1) })),
        })
        const split = keys.filter(
          (k) => two.client.serverOf(two.keys.block(ns, k)) !== two.client.serverOf(two.keys.window(ns, k, SIZE, start)),
        )
        assert.ok(split.length > 0, 'some blocks live away from their windows')
        const before = two.client.stats.roundTrips
        const rows = await two.pushDiffs({
          namespace: ns,
          nodeId: 'n',
          seq: 2,
          nowMs: now,
          windows: keys.map((k) => win(k, start, 1)),
          refresh: [],
          readBlocks: true,
        })
        assert.deepEqual(
          rows.map((r) => r.blockedUntilMs),
          keys.map((_, i) => now + 1_000 * (i + 1)),
        )
        assert.equal(two.client.stats.roundTrips - before, 2)
      } finally {
        await two.close()
        for (const m of servers) await m.kill()
      }
    })
  })
})
