/**
 * The example store written outside src/ (examples/mysql-store.ts) under the same suites every
 * built-in store passes, imported as a store author would import them (`ratelimiting/testing`):
 * the contract against the shared MariaDB (a table of its own, dropped after), the fault suite
 * against a private mariadbd that is killed and restarted, and two engine instances that share
 * the store and must agree on exact counts, periodic and synchronous.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import mysql from 'mysql2/promise'
import { MysqlStrategy, RESET_NODE } from '../../examples/mysql-store.js'
import { ConfigError, type CounterRow, createFakeClock, type Decision, RateLimiting, StoreError, windowStartMs } from '../../src/index.js'
import { readWindow, runFaultSuite, runStrategyContract } from '../../src/testing/index.js'
import { createTestTable, SHARED_MYSQL_URL, startPrivateMariadb, type TestTable } from '../support/mariadb-server.js'

const db: TestTable = await createTestTable()
after(() => db.drop())

async function collect(rows: AsyncIterable<CounterRow>): Promise<CounterRow[]> {
  const out: CounterRow[] = []
  for await (const row of rows) out.push(row)
  return out
}

runStrategyContract({
  name: 'mysql (examples/mysql-store.ts)',
  make: async () => {
    const s = new MysqlStrategy({ uri: SHARED_MYSQL_URL, table: db.table })
    await s.migrate()
    return s
  },
})

runFaultSuite({
  name: 'mysql (examples/mysql-store.ts)',
  losesData: false,
  async start() {
    const server = await startPrivateMariadb()
    return { port: server.port, kill: () => server.kill(), start: () => server.start(), stop: () => server.destroy() }
  },
  strategy: (port) => new MysqlStrategy({ uri: `mysql://root@127.0.0.1:${port}/test`, timeoutMs: 300, poolSize: 2 }),
  prepare: (strategy) => (strategy as MysqlStrategy).migrate(),
})

describe('MysqlStrategy (examples/mysql-store.ts)', () => {
  let s: MysqlStrategy
  const table = `${db.table}_unit`
  const now = Date.now()
  const start = windowStartMs(now, 60_000)
  const write = (key: string, count: number, windowStart = start) => ({
    key,
    windowStartMs: windowStart,
    windowSizeMs: 60_000,
    count,
    diff: count,
  })

  before(async () => {
    s = new MysqlStrategy({ uri: SHARED_MYSQL_URL, table, pageSize: 7, purgeBatchSize: 40 })
    await s.migrate()
  })
  after(() => s.close())

  it('refuses bad options when built, naming the option, and connects to nothing there', async () => {
    assert.throws(() => new MysqlStrategy({}), ConfigError)
    assert.throws(() => new MysqlStrategy({ uri: SHARED_MYSQL_URL, table: 'x`; DROP TABLE y; --' }), /table must be a plain identifier/)
    assert.throws(() => new MysqlStrategy({ uri: SHARED_MYSQL_URL, timeoutMs: 0 }), /timeoutMs must be an integer >= 1/)
    assert.throws(() => new MysqlStrategy({ uri: SHARED_MYSQL_URL, graceMs: -1 }), /graceMs/)
    const plain = mysql.createPool({ uri: SHARED_MYSQL_URL })
    try {
      assert.throws(() => new MysqlStrategy({ pool: plain, uri: SHARED_MYSQL_URL }), /exactly one of pool/)
      assert.throws(() => new MysqlStrategy({ pool: plain }), /multipleStatements: true/)
    } finally {
      await plain.end()
    }
    // a URI to nowhere: nothing is opened until a call, and the call fails as unavailable
    const lazy = new MysqlStrategy({ uri: 'mysql://root@127.0.0.1:1/none', timeoutMs: 500 })
    await assert.rejects(
      lazy.getWindow('k', 'ns', 0, 60_000),
      (err: unknown) => err instanceof StoreError && err.code === 'STORE_UNAVAILABLE',
    )
    await lazy.close()
  })

  it('migrates idempotently, also from several processes at once', async () => {
    const name = `${db.table}_m`
    const strategies = Array.from({ length: 4 }, () => new MysqlStrategy({ uri: SHARED_MYSQL_URL, table: name }))
    try {
      await Promise.all(strategies.map((m) => m.migrate()))
      await strategies[0]?.migrate()
      const conn = await mysql.createConnection(SHARED_MYSQL_URL)
      const [rows] = await conn.query(
        'SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?',
        [name],
      )
      await conn.end()
      assert.equal((rows as Array<{ n: number }>)[0]?.n, 1)
      assert.match(strategies[0]?.ddl() ?? '', new RegExp(`CREATE TABLE IF NOT EXISTS \`${name}\``))
    } finally {
      await Promise.all(strategies.map((m) => m.close()))
    }
  })

  it('says to run migrate() when the table is missing', async () => {
    const missing = new MysqlStrategy({ uri: SHARED_MYSQL_URL, table: `${db.table}_missing` })
    try {
      for (const call of [
        () => missing.getWindow('k', 'ns', 0, 60_000),
        () => missing.pushDiffs({ namespace: 'ns', nodeId: 'n', seq: 1, nowMs: now, windows: [write('k', 1)], refresh: [] }),
      ])
        await assert.rejects(
          call(),
          (err: unknown) => err instanceof StoreError && err.code === 'STORE_ERROR' && /run migrate\(\) first/.test(err.message),
        )
    } finally {
      await missing.close()
    }
  })

  it('refuses a push from the node id reserved for reset offsets', async () => {
    await assert.rejects(
      s.pushDiffs({ namespace: 'ns', nodeId: RESET_NODE, seq: 1, nowMs: now, windows: [write('k', 1)], refresh: [] }),
      /reserved for reset offsets/,
    )
  })

  it('binds hostile keys, namespaces and node ids as values: nothing is executed, everything round-trips', async () => {
    const ns = `'); DROP TABLE \`${table}\`;--`
    const node = `n'1\\`
    const keys = [`'); DROP TABLE x;--`, `\`; DELETE FROM \`${table}\`;--`, '?', '??', 'nul\u0000byte', '\\', "O'Reilly", '\ud800?\udfff']
    const rows = await s.pushDiffs({
      namespace: ns,
      nodeId: node,
      seq: 1,
      nowMs: now,
      windows: keys.map((k, i) => write(k, i + 1)),
      refresh: [],
    })
    assert.deepEqual(rows.map((r) => [r.key, r.count, r.own]).sort(), keys.map((k, i) => [k, i + 1, i + 1]).sort())
    const read = await collect(s.getCounters(ns, [60_000], now, node))
    assert.deepEqual(read.map((r) => r.key).sort(), [...keys].sort())
    for (const [i, key] of keys.entries()) assert.equal((await s.getWindow(key, ns, start, 60_000, node)).own, i + 1)
  })

  it('holds a key of 100,000 characters, and keys that differ only past their first 64 KiB', async () => {
    const ns = `long-${randomUUID().slice(0, 8)}`
    const long = 'x'.repeat(100_000)
    const keys = [long, `${long}a`, `${long}b`]
    await s.pushDiffs({ namespace: ns, nodeId: 'n1', seq: 1, nowMs: now, windows: keys.map((k, i) => write(k, i + 1)), refresh: [] })
    const stored = await collect(s.getCounters(ns, [60_000], now, 'n1'))
    assert.deepEqual(stored.map((r) => [r.key.length, r.key.slice(-1), r.count]).sort(), [
      [100_000, 'x', 1],
      [100_001, 'a', 2],
      [100_001, 'b', 3],
    ])
  })

  it('sums decimals exactly in DECIMAL(65,30): 2^52 + 0.1 + 0.2 is 4503599627370496.3', async () => {
    const ns = `dec-${randomUUID().slice(0, 8)}`
    for (const [node, count] of [
      ['a', 2 ** 52],
      ['b', 0.1],
      ['c', 0.2],
    ] as const)
      await s.pushDiffs({ namespace: ns, nodeId: node, seq: 1, nowMs: now, windows: [write('k', count)], refresh: [] })
    const conn = await mysql.createConnection(SHARED_MYSQL_URL)
    const [rows] = await conn.query(
      `SELECT CAST(SUM(hits) AS CHAR) AS total FROM \`${table}\` WHERE key_bytes = ? AND ns_hash = UNHEX(SHA2(CONVERT(? USING utf16le), 256))`,
      [Buffer.from('k', 'utf16le'), ns],
    )
    await conn.end()
    assert.equal((rows as Array<{ total: string }>)[0]?.total, '4503599627370496.300000000000000000000000000000')
    const w = await s.getWindow('k', ns, start, 60_000, 'a')
    assert.equal(w.own, 2 ** 52)
    assert.equal(w.count, 2 ** 52, 'the number nearest the exact sum (2^52 has no fractions)')
  })

  it('pages getCounters by key hash and yields every key once', async () => {
    const ns = `page-${randomUUID().slice(0, 8)}`
    const windows = Array.from({ length: 50 }, (_, i) => write(`k${String(i).padStart(2, '0')}`, 1))
    await s.pushDiffs({ namespace: ns, nodeId: 'a', seq: 1, nowMs: now, windows, refresh: [] })
    await s.pushDiffs({ namespace: ns, nodeId: 'b', seq: 1, nowMs: now, windows: windows.slice(0, 10), refresh: [] })
    const before = s.calls.page
    const rows = await collect(s.getCounters(ns, [60_000], now, 'b'))
    assert.equal(rows.length, 50)
    assert.equal(new Set(rows.map((r) => r.key)).size, 50)
    assert.equal(rows.filter((r) => r.count === 2 && r.own === 1).length, 10)
    // 50 keys in pages of 7 for the current window (8 pages), one empty page for the previous one
    assert.equal(s.calls.page - before, 9)
  })

  it('purges expired windows in bounded batches and keeps live ones, reset offsets included', async () => {
    const ns = `purge-${randomUUID().slice(0, 8)}`
    const old = start - 10 * 60_000
    const windows = Array.from({ length: 100 }, (_, i) => write(`k${i}`, 1, old))
    await s.pushDiffs({ namespace: ns, nodeId: 'a', seq: 1, nowMs: now, windows, refresh: [] })
    await s.pushDiffs({ namespace: ns, nodeId: 'a', seq: 2, nowMs: now, windows: [write('live', 2)], refresh: [] })
    await s.resetKey(ns, 'k1', [60_000], old + 1)
    const before = s.calls.purge
    await s.purge(ns, [60_000], now)
    // 101 rows (100 and k1's reset offset) in batches of 40, the last one short; then one for
    // ended blocks (none here)
    assert.equal(s.calls.purge - before, 4)
    assert.equal((await s.getWindow('live', ns, start, 60_000)).count, 2)
    assert.equal((await s.getWindow('k1', ns, old, 60_000)).count, 0)
    assert.deepEqual(await collect(s.getCounters(ns, [60_000], old + 1)), [])
  })

  it('costs one query per synchronous hit', async () => {
    const ns = `sync-${randomUUID().slice(0, 8)}`
    const rl = RateLimiting.newInstance('mysql-sync')
    rl.new({ namespace: ns, windowSizes: [60], syncRate: 0, strategy: s })
    try {
      const before = s.calls.push
      for (let i = 0; i < 20; i++) await rl.increment('k', 60, 1, ns)
      assert.equal(s.calls.push - before, 20)
      assert.equal(await rl.slidingWindow('k', 60, undefined, ns), 20)
    } finally {
      await rl.close()
    }
  })

  it('ends a pool it opened from a URI, and never one it was given', async () => {
    const pool = mysql.createPool({ uri: SHARED_MYSQL_URL, multipleStatements: true, connectionLimit: 2 })
    const given = new MysqlStrategy({ pool, table })
    const own = new MysqlStrategy({ uri: SHARED_MYSQL_URL, table })
    try {
      assert.equal((await given.getWindow('x', 'none', 0, 60_000)).count, 0)
      assert.equal((await own.getWindow('x', 'none', 0, 60_000)).count, 0)
      await given.close()
      await own.close()
      await assert.rejects(own.getWindow('x', 'none', 0, 60_000), /closed/)
      const [rows] = await pool.query('SELECT 1 AS one')
      assert.equal((rows as Array<{ one: number }>)[0]?.one, 1, 'the pool given to the strategy still works')
    } finally {
      await pool.end()
    }
  })
})

describe('MysqlStrategy: two engine instances sharing the store', () => {
  let store: MysqlStrategy
  const table = `${db.table}_fleet`
  before(async () => {
    store = new MysqlStrategy({ uri: SHARED_MYSQL_URL, table })
    await store.migrate()
  })
  after(() => store.close())

  it('converge on exact counts in periodic mode', async () => {
    const ns = `periodic-${randomUUID().slice(0, 8)}`
    const clock = createFakeClock(windowStartMs(Date.now(), 60_000) + 1_000)
    const fleet = ['a', 'b'].map((name) => {
      const rl = RateLimiting.newInstance(`mysql-periodic-${name}`)
      rl.new({ namespace: ns, windowSizes: [60], syncRate: 1, autoSync: false, clock: clock.now, strategy: store })
      return rl
    })
    const truth = new Map<string, number>()
    try {
      for (let round = 0; round < 5; round++) {
        for (const [i, rl] of fleet.entries()) {
          for (let k = 0; k < 10; k++) {
            const key = `key-${k}`
            const hits = 1 + ((round * 7 + i * 3 + k) % 4)
            for (let h = 0; h < hits; h++) rl.increment(key, 60, 1, ns)
            truth.set(key, (truth.get(key) ?? 0) + hits)
          }
        }
        await Promise.all(fleet.map((rl) => rl.sync(ns)))
      }
      // one more round each: every process has read what the other pushed last
      for (const rl of fleet) await rl.sync(ns)
      for (const [key, total] of truth) {
        for (const [i, rl] of fleet.entries()) assert.equal(rl.slidingWindow(key, 60, undefined, ns), total, `process ${i}, ${key}`)
        const stored = await readWindow(store, {
          namespace: ns,
          key,
          windowStartMs: windowStartMs(clock.now(), 60_000),
          windowSizeMs: 60_000,
        })
        assert.equal(stored.count, total, `the store holds ${key}`)
      }
    } finally {
      await Promise.all(fleet.map((rl) => rl.close()))
    }
  })

  it('converge on exact counts in synchronous mode, and admit no more than the limit however the hits interleave', async () => {
    const ns = `sync-${randomUUID().slice(0, 8)}`
    const fleet = ['a', 'b'].map((name) => {
      const rl = RateLimiting.newInstance(`mysql-sync-${name}`)
      rl.new({ namespace: ns, windowSizes: [60], syncRate: 0, strategy: store })
      return rl
    })
    try {
      // one after the other: exactly the limit is admitted
      const limiters = fleet.map((rl) => rl.limiter({ namespace: ns, limits: [{ limit: 10, window: 60 }] }))
      const sequential: boolean[] = []
      for (let i = 0; i < 16; i++) sequential.push((await (limiters[i % 2]?.hit('one-by-one') as Promise<Decision>)).allowed)
      assert.deepEqual(sequential, [...Array(10).fill(true), ...Array(6).fill(false)])
      // all at once, 60 hits from both processes on a limit of 25: each reply follows the
      // write it answers and every write committed before it, so no hit is admitted on a
      // count that misses one admitted before it
      const wide = fleet.map((rl) => rl.limiter({ namespace: ns, limits: [{ limit: 25, window: 60 }] }))
      const concurrent = await Promise.all(Array.from({ length: 60 }, (_, i) => wide[i % 2]?.hit('at-once') as Promise<Decision>))
      const admitted = concurrent.filter((d) => d.allowed).length
      assert.ok(admitted <= 25 && admitted > 0, `admitted ${admitted} of 60 on a limit of 25`)
      // the counts are exact whatever was decided (denied hits count too, countDenied: true)
      for (const rl of fleet) {
        assert.equal(await rl.slidingWindow('one-by-one', 60, undefined, ns), 16)
        assert.equal(await rl.slidingWindow('at-once', 60, undefined, ns), 60)
      }
    } finally {
      await Promise.all(fleet.map((rl) => rl.close()))
    }
  })
})
