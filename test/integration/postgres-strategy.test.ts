import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import type pg from 'pg'
import { ConfigError, StoreError } from '../../src/core/errors.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import type { CounterRow, DiffBatch } from '../../src/core/strategy.js'
import { windowStartMs } from '../../src/core/window.js'
import {
  createPostgresStrategy,
  type PgClientLike,
  type PgPoolLike,
  PostgresStrategy,
  type PostgresStrategyOptions,
} from '../../src/strategies/postgres/index.js'
import { pushOneSql, pushSql } from '../../src/strategies/postgres/sql.js'
import { runStrategyContract } from '../../src/testing/strategy-contract.js'
import { createTestSchema, type TestSchema } from '../support/postgres-server.js'

const db: TestSchema = await createTestSchema()
after(() => db.drop())

async function collect(rows: AsyncIterable<CounterRow>): Promise<CounterRow[]> {
  const out: CounterRow[] = []
  for await (const row of rows) out.push(row)
  return out
}

runStrategyContract({
  name: 'postgres',
  make: async () => {
    const s = new PostgresStrategy({ pool: db.pool, schema: db.schema })
    await s.migrate()
    return s
  },
})

describe('PostgresStrategy', () => {
  let s: PostgresStrategy
  before(async () => {
    s = new PostgresStrategy({
      pool: db.pool,
      schema: db.schema,
      table: 'counters',
      pageSize: 7,
      purgeIntervalMs: 0,
    })
    await s.migrate()
  })
  after(() => s.close())

  it('refuses bad options when built, naming the option, and touches no database there', () => {
    assert.throws(() => new PostgresStrategy({}), ConfigError)
    assert.throws(
      () =>
        new PostgresStrategy({
          pool: db.pool,
          connectionString: 'postgres://x',
        }),
      /exactly one of pool/,
    )
    assert.throws(
      () =>
        new PostgresStrategy({
          pool: db.pool,
          schema: 'a"; DROP SCHEMA public;--',
        }),
      /schema must be a plain identifier/,
    )
    assert.throws(() => new PostgresStrategy({ pool: db.pool, table: 'x y' }), /table must be a plain identifier/)
    assert.throws(() => new PostgresStrategy({ pool: db.pool, purgeBatchSize: 0 }), /purgeBatchSize/)
    // a connection string to nowhere: no connection is opened until a call
    const lazy = new PostgresStrategy({
      connectionString: 'postgres://postgres@127.0.0.1:1/none',
    })
    return lazy.close()
  })

  it('migrates idempotently, also from several callers at once', async () => {
    const schema = `${db.schema}_m`
    const a = new PostgresStrategy({ pool: db.pool, schema })
    const b = new PostgresStrategy({ pool: db.pool, schema })
    try {
      await Promise.all([a.migrate(), b.migrate(), a.migrate()])
      await a.migrate()
      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'ratelimiting_counters'`,
        [schema],
      )
      assert.equal(rows[0].n, 1)
      assert.match(a.ddl(), /CREATE TABLE IF NOT EXISTS "rl_test_\w+_m"\."ratelimiting_counters"/)
    } finally {
      await db.pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
    }
  })

  it('upgrades a table of version 0.1 (windows in seconds) in place, keeping its counts', async () => {
    const table = 'counters_v01'
    const qualified = `"${db.schema}"."${table}"`
    // the 0.1 layout, with one stored window of 60 s
    await db.pool.query(`CREATE TABLE ${qualified} (
      namespace text COLLATE "C" NOT NULL, window_size integer NOT NULL, window_start bigint NOT NULL,
      key text COLLATE "C" NOT NULL, node_id text COLLATE "C" NOT NULL, count numeric NOT NULL, seq bigint NOT NULL,
      CONSTRAINT "${table}_pkey" PRIMARY KEY (namespace, window_size, window_start, key, node_id))`)
    const now = Date.now()
    const startMs = windowStartMs(now, 60_000)
    await db.pool.query(`INSERT INTO ${qualified} VALUES ('old', 60, $1, 'k', 'n1', 7, 1)`, [startMs / 1000])
    const upgraded = new PostgresStrategy({ pool: db.pool, schema: db.schema, table, purgeIntervalMs: 0 })
    await upgraded.migrate()
    await upgraded.migrate() // idempotent once upgraded
    assert.deepEqual(await upgraded.getWindow('k', 'old', startMs, 60_000, 'n1'), {
      key: 'k',
      windowStartMs: startMs,
      windowSizeMs: 60_000,
      count: 7,
      own: 7,
    })
    const { rows } = await db.pool.query(
      `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name LIKE 'window%' ORDER BY 1`,
      [db.schema, table],
    )
    assert.deepEqual(rows, [
      { column_name: 'window_size_ms', data_type: 'bigint' },
      { column_name: 'window_start_ms', data_type: 'bigint' },
    ])
    await upgraded.close()
  })

  it('says to run migrate() when the table is missing', async () => {
    const missing = new PostgresStrategy({
      pool: db.pool,
      schema: db.schema,
      table: 'not_migrated',
    })
    await assert.rejects(
      missing.getWindow('k', 'ns', 0, 60_000),
      (err: unknown) => err instanceof StoreError && /run migrate\(\) first/.test(err.message),
    )
  })

  it('binds hostile keys and namespaces as values: nothing is executed, everything round-trips', async () => {
    const ns = `'); DROP TABLE counters;--`
    const now = Date.now()
    const start = windowStartMs(now, 60_000)
    const keys = [
      `'); DROP TABLE x;--`,
      `"; DELETE FROM "${db.schema}"."counters";--`,
      '$1',
      'nul\u0000byte',
      '\u0001escaped',
      '\\',
      "O'Reilly",
    ]
    const rows = await s.pushDiffs({
      namespace: ns,
      nodeId: `n'1`,
      seq: 1,
      nowMs: now,
      windows: keys.map((key, i) => ({
        key,
        windowStartMs: start,
        windowSizeMs: 60_000,
        count: i + 1,
        diff: i + 1,
      })),
      refresh: [],
    })
    assert.deepEqual(rows.map((r) => [r.key, r.count, r.own]).sort(), keys.map((k, i) => [k, i + 1, i + 1]).sort())
    const read = await collect(s.getCounters(ns, [60_000], now, `n'1`))
    assert.deepEqual(read.map((r) => r.key).sort(), [...keys].sort())
    for (const key of keys) assert.equal((await s.getWindow(key, ns, start, 60_000, `n'1`)).own, keys.indexOf(key) + 1)
    const { rows: tables } = await db.pool.query(`SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = $1`, [
      db.schema,
    ])
    assert.ok(tables[0].n >= 1, 'the table is still there')
  })

  it('holds 64-bit counts and sums beyond them exactly, and decimals exactly', async () => {
    const ns = `big-${randomUUID().slice(0, 8)}`
    const now = Date.now()
    const start = windowStartMs(now, 60_000)
    const big = 2 ** 52
    await s.pushDiffs({
      namespace: ns,
      nodeId: 'a',
      seq: 1,
      nowMs: now,
      windows: [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: big, diff: big }],
      refresh: [],
    })
    await s.pushDiffs({
      namespace: ns,
      nodeId: 'b',
      seq: 1,
      nowMs: now,
      windows: [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: 0.1, diff: 0.1 }],
      refresh: [],
    })
    await s.pushDiffs({
      namespace: ns,
      nodeId: 'c',
      seq: 1,
      nowMs: now,
      windows: [{ key: 'k', windowStartMs: start, windowSizeMs: 60_000, count: 0.2, diff: 0.2 }],
      refresh: [],
    })
    const { rows } = await db.pool.query(`SELECT sum(count)::text AS total FROM "${db.schema}"."counters" WHERE namespace = $1`, [ns])
    assert.equal(rows[0].total, '4503599627370496.3', 'numeric sums decimals exactly')
    const w = await s.getWindow('k', ns, start, 60_000, 'a')
    assert.equal(w.own, big)
    const d = await s.getWindow('k', `${ns}-d`, start, 60_000)
    assert.equal(d.count, 0)
  })

  it('pages getCounters with a cursor and yields every key once', async () => {
    const ns = `page-${randomUUID().slice(0, 8)}`
    const now = Date.now()
    const start = windowStartMs(now, 60_000)
    const windows = Array.from({ length: 50 }, (_, i) => ({
      key: `k${String(i).padStart(2, '0')}`,
      windowStartMs: start,
      windowSizeMs: 60_000,
      count: 1,
      diff: 1,
    }))
    await s.pushDiffs({
      namespace: ns,
      nodeId: 'a',
      seq: 1,
      nowMs: now,
      windows,
      refresh: [],
    })
    await s.pushDiffs({
      namespace: ns,
      nodeId: 'b',
      seq: 1,
      nowMs: now,
      windows: windows.slice(0, 10),
      refresh: [],
    })
    const before = s.calls.page
    const rows = await collect(s.getCounters(ns, [60_000], now, 'b'))
    assert.equal(rows.length, 50)
    assert.equal(new Set(rows.map((r) => r.key)).size, 50)
    assert.equal(rows.filter((r) => r.count === 2 && r.own === 1).length, 10)
    // 50 rows in pages of 7 for the current window (8 pages), one empty page for the previous one
    assert.equal(s.calls.page - before, 9)
  })

  it('purges expired windows in bounded batches and keeps live ones', async () => {
    const ns = `purge-${randomUUID().slice(0, 8)}`
    const small = new PostgresStrategy({
      pool: db.pool,
      schema: db.schema,
      table: 'counters',
      purgeBatchSize: 40,
      purgeIntervalMs: 0,
    })
    const now = Date.now()
    const start = windowStartMs(now, 60_000)
    const old = start - 10 * 60_000
    const windows = Array.from({ length: 100 }, (_, i) => ({
      key: `k${i}`,
      windowStartMs: old,
      windowSizeMs: 60_000,
      count: 1,
      diff: 1,
    }))
    await small.pushDiffs({
      namespace: ns,
      nodeId: 'a',
      seq: 1,
      nowMs: now,
      windows,
      refresh: [],
    })
    await small.pushDiffs({
      namespace: ns,
      nodeId: 'a',
      seq: 2,
      nowMs: now,
      windows: [{ key: 'live', windowStartMs: start, windowSizeMs: 60_000, count: 1, diff: 1 }],
      refresh: [],
    })
    const report = await small.purgeNow(ns, [60_000], now)
    assert.deepEqual(report, { locked: true, deleted: 100, blocksDeleted: 0, batches: 4 })
    assert.equal((await small.getWindow('live', ns, start, 60_000)).count, 1)
    assert.equal((await small.getWindow('k1', ns, old, 60_000)).count, 0)
    await small.close()
  })

  it('purges under an advisory lock: one of two concurrent purgers runs, the other skips', async () => {
    const ns = `lock-${randomUUID().slice(0, 8)}`
    const a = new PostgresStrategy({
      pool: db.pool,
      schema: db.schema,
      table: 'counters',
      purgeBatchSize: 50,
      purgeIntervalMs: 0,
    })
    const b = new PostgresStrategy({
      pool: db.pool,
      schema: db.schema,
      table: 'counters',
      purgeBatchSize: 50,
      purgeIntervalMs: 0,
    })
    const now = Date.now()
    const old = windowStartMs(now, 60_000) - 10 * 60_000
    const windows = Array.from({ length: 2000 }, (_, i) => ({
      key: `k${i}`,
      windowStartMs: old,
      windowSizeMs: 60_000,
      count: 1,
      diff: 1,
    }))
    await a.pushDiffs({
      namespace: ns,
      nodeId: 'a',
      seq: 1,
      nowMs: now,
      windows,
      refresh: [],
    })

    // while another session holds the lock, a purge deletes nothing
    const holder = await db.pool.connect()
    const lockKey = `ratelimiting:purge:"${db.schema}"."counters":${ns}`
    await holder.query('SELECT pg_advisory_lock(hashtextextended($1, 0))', [lockKey])
    assert.deepEqual(await a.purgeNow(ns, [60_000], now), {
      locked: false,
      deleted: 0,
      blocksDeleted: 0,
      batches: 0,
    })
    await holder.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [lockKey])
    holder.release()

    const [ra, rb] = await Promise.all([a.purgeNow(ns, [60_000], now), b.purgeNow(ns, [60_000], now)])
    const ran = [ra, rb].filter((r) => r.locked)
    assert.equal(ran.length, 1, `exactly one purger ran: ${JSON.stringify([ra, rb])}`)
    assert.equal(ran[0]?.deleted, 2000)
    assert.equal(ran[0]?.batches, 42, '2000 rows in batches of 50, the empty batch that ends the run, and one of blocks')
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM "${db.schema}"."counters" WHERE namespace = $1`, [ns])
    assert.equal(rows[0].n, 0)
    await a.close()
    await b.close()
  })

  it('purges automatically from the pushes, at most once per purgeIntervalMs', async () => {
    const ns = `auto-${randomUUID().slice(0, 8)}`
    const errors: Error[] = []
    const auto = new PostgresStrategy({
      pool: db.pool,
      schema: db.schema,
      table: 'counters',
      purgeIntervalMs: 1000,
      onError: (e) => errors.push(e),
    })
    const t0 = Date.now()
    const old = windowStartMs(t0, 60_000) - 10 * 60_000
    await auto.pushDiffs({
      namespace: ns,
      nodeId: 'a',
      seq: 1,
      nowMs: t0,
      windows: [{ key: 'old', windowStartMs: old, windowSizeMs: 60_000, count: 1, diff: 1 }],
      refresh: [],
    })
    assert.equal(auto.calls.purge, 0, 'not due yet')
    const start = windowStartMs(t0 + 1000, 60_000)
    await auto.pushDiffs({
      namespace: ns,
      nodeId: 'a',
      seq: 2,
      nowMs: t0 + 1000,
      windows: [{ key: 'new', windowStartMs: start, windowSizeMs: 60_000, count: 1, diff: 1 }],
      refresh: [],
    })
    await auto.close() // waits for the background purge
    assert.deepEqual(errors, [])
    assert.ok(auto.calls.purge >= 1)
    const check = new PostgresStrategy({
      pool: db.pool,
      schema: db.schema,
      table: 'counters',
    })
    assert.equal((await check.getWindow('old', ns, old, 60_000)).count, 0)
    assert.equal((await check.getWindow('new', ns, start, 60_000)).count, 1)
    await check.close()
  })

  it('admits exactly the limit of concurrent synchronous hits from one process (a refused older push answers its own count)', async () => {
    // Concurrent pushes of one node commit in any order: a push refused because a newer one of
    // the same node committed after its snapshot must still count its own hits, or it answers
    // a rate of 0 and the hit is admitted past the limit.
    const ns = `conc-${randomUUID().slice(0, 8)}`
    const rl = RateLimiting.newInstance('pg-concurrent')
    rl.new({ namespace: ns, windowSizes: [60], syncRate: 0, strategy: s })
    const limiter = rl.limiter({ namespace: ns, limits: [{ limit: 2, window: 60 }] })
    for (let round = 0; round < 20; round++) {
      const decisions = await Promise.all(Array.from({ length: 5 }, () => limiter.hit(`k${round}`)))
      assert.equal(decisions.filter((d) => d.allowed).length, 2, `round ${round}: ${decisions.map((d) => d.rate).join(' ')}`)
    }
    await rl.close()
  })

  it('costs one statement per synchronous hit', async () => {
    const ns = `sync-${randomUUID().slice(0, 8)}`
    const rl = RateLimiting.newInstance('pg-sync')
    rl.new({ namespace: ns, windowSizes: [60], syncRate: 0, strategy: s })
    const before = s.calls.push
    for (let i = 0; i < 20; i++) await rl.increment('k', 60, 1, ns)
    assert.equal(s.calls.push - before, 20)
    assert.equal(await rl.slidingWindow('k', 60, undefined, ns), 20 + 0)
    await rl.close()
  })

  it('ends a pool it opened from a connection string, and only that one', async () => {
    const own = await createPostgresStrategy({
      connectionString: process.env.RL_TEST_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
      schema: db.schema,
      migrate: true,
    })
    assert.equal((await own.getWindow('x', 'none', 0, 60_000)).count, 0)
    await own.close()
    await assert.rejects(own.getWindow('x', 'none', 0, 60_000), /closed/)
    // the shared pool given to other strategies still works
    assert.equal((await db.pool.query('SELECT 1 AS one')).rows[0].one, 1)
  })
})

describe('PostgresStrategy blocks', () => {
  const SIZE = 60_000
  // a pool that records the statements sent through it
  const sent: Array<{ name?: string; text: string }> = []
  const spy: PgPoolLike = {
    async connect() {
      const client = await db.pool.connect()
      const query = (config: pg.QueryConfig | string, values?: unknown[]) => {
        if (typeof config === 'string') return client.query(config, values)
        sent.push({ name: config.name, text: config.text })
        return client.query(config)
      }
      return { query: query as unknown as PgClientLike['query'], release: (err?: Error | boolean) => client.release(err) }
    },
  }
  const stores: PostgresStrategy[] = []
  const store = async (options: Partial<PostgresStrategyOptions> = {}): Promise<PostgresStrategy> => {
    const made = new PostgresStrategy({ pool: db.pool, schema: db.schema, table: 'blk', purgeIntervalMs: 0, ...options })
    await made.migrate()
    stores.push(made)
    return made
  }
  after(() => Promise.all(stores.map((x) => x.close())))

  let ns = ''
  let now = 0
  let start = 0
  let seq = 0
  const fresh = () => {
    ns = `blk-${randomUUID().slice(0, 8)}`
    now = Date.now()
    start = windowStartMs(now, SIZE)
  }
  const push = (on: PostgresStrategy, batch: Partial<DiffBatch>): Promise<CounterRow[]> =>
    on.pushDiffs({ namespace: ns, nodeId: 'n1', seq: ++seq, nowMs: now, windows: [], refresh: [], ...batch })
  const win = (key: string, count: number) => ({ key, windowStartMs: start, windowSizeMs: SIZE, count, diff: count })
  const ref = (key: string, windowStart = start) => ({ key, windowStartMs: windowStart, windowSizeMs: SIZE })
  const blockOf = async (on: PostgresStrategy, key: string, nowMs = now): Promise<number | undefined> =>
    (await push(on, { nodeId: 'reader', nowMs, refresh: [ref(key)], readBlocks: true }))[0]?.blockedUntilMs
  const stored = async (table: string, namespace = ns): Promise<Array<{ key: string; until_ms: string }>> =>
    (await db.pool.query(`SELECT key, until_ms FROM "${db.schema}"."${table}" WHERE namespace = $1 ORDER BY key`, [namespace])).rows

  it('sends the statements of before when a push has no blocks, and one statement per push with them', async () => {
    fresh()
    const s = await store({ pool: spy })
    sent.length = 0
    await push(s, { windows: [win('a', 1)], refresh: [ref('a', start - SIZE)] })
    await push(s, { windows: [win('a', 2), win('b', 1)] })
    await push(s, { windows: [win('a', 3)], blocks: [], readBlocks: false })
    assert.deepEqual(
      sent.map((q) => q.text),
      // a hit that reads no other window: the statement without the read
      [pushOneSql(s.names), pushSql(s.names, true), pushOneSql(s.names, undefined, undefined, false)],
    )
    sent.length = 0
    const written = await push(s, { windows: [win('a', 4)], blocks: [{ key: 'a', untilMs: now + 5000 }], readBlocks: true })
    const hit = await push(s, { windows: [win('a', 5)], refresh: [ref('a', start - SIZE)], readBlocks: true })
    const alone = await push(s, { blocks: [{ key: 'b', untilMs: now + 1 }] })
    assert.equal(sent.length, 3, 'one statement (one round trip) per push')
    assert.deepEqual(
      written.map((r) => [r.count, r.blockedUntilMs]),
      [[4, now + 5000]],
    )
    assert.deepEqual(
      hit.map((r) => [r.count, r.blockedUntilMs]),
      [
        [5, now + 5000],
        [0, now + 5000],
      ],
    )
    assert.deepEqual(alone, [])
  })

  it('applies the writes of one key in a batch in order: a lift then a shorter block replaces; a block then a lift deletes', async () => {
    fresh()
    const s = await store()
    await push(s, { blocks: [{ key: 'k', untilMs: now + 90_000 }] })
    await push(s, {
      blocks: [
        { key: 'k', untilMs: 0 },
        { key: 'k', untilMs: now + 10_000 },
        { key: 'k', untilMs: now + 5_000 },
      ],
    })
    assert.equal(await blockOf(s, 'k'), now + 10_000)
    await push(s, {
      blocks: [
        { key: 'k', untilMs: now + 20_000 },
        { key: 'k', untilMs: 0 },
      ],
    })
    assert.equal(await blockOf(s, 'k'), 0)
    assert.deepEqual(await stored('blk_blocks'), [], 'a lift deletes the row')
  })

  it('keeps ended blocks (reading 0) until the purge deletes them graceMs after their end; a new block overwrites one', async () => {
    fresh()
    const s = await store()
    await push(s, {
      blocks: [
        { key: 'old', untilMs: now - 20_000 },
        { key: 'recent', untilMs: now - 5_000 },
        { key: 'live', untilMs: now + 60_000 },
        { key: 'again', untilMs: now - 30_000 },
      ],
    })
    assert.equal(await blockOf(s, 'old'), 0)
    await push(s, { blocks: [{ key: 'again', untilMs: now + 1_000 }] })
    assert.deepEqual(
      (await stored('blk_blocks')).map((r) => [r.key, Number(r.until_ms)]),
      [
        ['again', now + 1_000],
        ['live', now + 60_000],
        ['old', now - 20_000],
        ['recent', now - 5_000],
      ],
    )
    const other = ns
    fresh() // another namespace's ended block is not this purge's
    await push(s, { blocks: [{ key: 'old', untilMs: now - 20_000 }] })
    const report = await s.purgeNow(other, [], now)
    assert.deepEqual(report, { locked: true, deleted: 0, blocksDeleted: 1, batches: 1 })
    await s.purge(other, [SIZE], now + 20_000)
    assert.deepEqual(
      (await stored('blk_blocks', other)).map((r) => r.key),
      ['live'],
    )
    assert.equal((await stored('blk_blocks')).length, 1)
  })

  it('lets processes block and lift the same keys at once: no push fails, no block is shortened', async () => {
    fresh()
    const [a, b] = [await store(), await store()]
    const keys = Array.from({ length: 30 }, (_, i) => `k${i}`)
    for (let round = 0; round < 10; round++) {
      const until = now + 10_000 * (round + 1)
      // the same keys in opposite orders from two processes, with shorter ends besides
      await Promise.all([
        push(a, { nodeId: 'a', blocks: keys.map((key) => ({ key, untilMs: until })) }),
        push(b, { nodeId: 'b', blocks: [...keys].reverse().map((key) => ({ key, untilMs: until - 5_000 })) }),
        push(a, { nodeId: 'c', windows: [win('k0', round + 1)], blocks: [{ key: 'k1', untilMs: until - 1 }], readBlocks: true }),
      ])
      for (const key of keys) assert.equal(await blockOf(a, key), until, `round ${round}, ${key}`)
      // a lift racing a block: either order is a valid outcome
      await Promise.all([
        push(a, { nodeId: 'a', blocks: [{ key: 'k0', untilMs: 0 }] }),
        push(b, { nodeId: 'b', blocks: [{ key: 'k0', untilMs: until + 1 }] }),
      ])
      assert.ok([0, until + 1].includes((await blockOf(b, 'k0')) ?? -1))
    }
  })

  it('migrates a database whose counters table predates blocks, and names the blocks table within 63 bytes', async () => {
    fresh()
    const table = 'counters_before_blocks'
    const old = new PostgresStrategy({ pool: db.pool, schema: db.schema, table, purgeIntervalMs: 0 })
    stores.push(old)
    await old.migrate()
    await db.pool.query(`DROP TABLE "${db.schema}"."${table}_blocks"`) // as an earlier version left it
    await push(old, { windows: [win('k', 3)] })
    assert.deepEqual(await old.purgeNow(ns, [SIZE], now), { locked: true, deleted: 0, blocksDeleted: 0, batches: 2 })
    await assert.rejects(push(old, { refresh: [ref('k')], readBlocks: true }), /run migrate\(\) first/)
    await old.migrate()
    await push(old, { blocks: [{ key: 'k', untilMs: now + 1_000 }] })
    const [row] = await push(old, { refresh: [ref('k')], readBlocks: true })
    assert.deepEqual([row?.count, row?.blockedUntilMs], [3, now + 1_000])

    const long = 'x'.repeat(56)
    const [s1, s2] = [await store({ table: `${long}ab` }), await store({ table: `${long}ac` })]
    assert.notEqual(s1.names.blocksTable, s2.names.blocksTable)
    assert.ok(s1.names.blocksTable.length <= 63 && s1.names.blocksTable.endsWith('_blocks'))
    await push(s1, { blocks: [{ key: 'k', untilMs: now + 1_000 }] })
    assert.deepEqual([await blockOf(s1, 'k'), await blockOf(s2, 'k')], [now + 1_000, 0])
  })
})
