/**
 * Synchronous hits on PostgreSQL (src/strategies/postgres/hits.ts): hits that find every
 * connection of the pool busy go out together in one statement, each answered as if alone;
 * and the option `synchronousCommit`.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, describe, it } from 'node:test'
import pg from 'pg'
import { StoreError } from '../../src/core/errors.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import type { CounterRow, DiffBatch, WindowPush, WindowRef } from '../../src/core/strategy.js'
import { windowStartMs } from '../../src/core/window.js'
import { hitsSql } from '../../src/strategies/postgres/hits.js'
import { PostgresStrategy, type PostgresStrategyOptions } from '../../src/strategies/postgres/index.js'
import { pushOneSql } from '../../src/strategies/postgres/sql.js'
import { createTestSchema, SHARED_POSTGRES_URL, type TestSchema } from '../support/postgres-server.js'

const db: TestSchema = await createTestSchema()
const pools: pg.Pool[] = []
const stores: PostgresStrategy[] = []
after(async () => {
  await Promise.all(stores.map((s) => s.close()))
  await Promise.all(pools.map((p) => p.end()))
  await db.drop()
})

const SIZE = 60_000
const now = Date.now()
const start = windowStartMs(now, SIZE)
const previous = start - SIZE

// A strategy on a pool of its own of `connections`: past them, hits queue in the strategy.
async function store(connections: number, options: Partial<PostgresStrategyOptions> = {}): Promise<PostgresStrategy> {
  const pool = new pg.Pool({ connectionString: SHARED_POSTGRES_URL, max: connections })
  pools.push(pool)
  const made = new PostgresStrategy({ pool, schema: db.schema, table: 'hits', purgeIntervalMs: 0, ...options })
  await made.migrate()
  stores.push(made)
  return made
}

let seq = 0
const win = (key: string, count: number, windowStart = start): WindowPush => ({
  key,
  windowStartMs: windowStart,
  windowSizeMs: SIZE,
  count,
  diff: count,
})
const ref = (key: string, windowStart = previous): WindowRef => ({ key, windowStartMs: windowStart, windowSizeMs: SIZE })
const batch = (namespace: string, nodeId: string, w: WindowPush, refresh: WindowRef[] = [], more: Partial<DiffBatch> = {}): DiffBatch => ({
  namespace,
  nodeId,
  seq: ++seq,
  nowMs: now,
  windows: [w],
  refresh,
  ...more,
})
const counts = (rows: CounterRow[]) => rows.map((r) => [r.key, r.windowStartMs === start ? 'current' : 'previous', r.count, r.own])

describe('PostgreSQL synchronous hits', () => {
  it('sends the hits that find every connection busy in one statement, each answered as if alone', async () => {
    const s = await store(1)
    const ns = `many-${randomUUID().slice(0, 8)}`
    const odd = 'k\u0000odd'
    await s.pushDiffs(batch(ns, 'other', win('k1', 3)))
    await s.pushDiffs({ ...batch(ns, 'other', win('k1', 4, previous)), windows: [win('k1', 4, previous), win('k2', 1, previous)] })
    await s.pushDiffs(batch(ns, 'B', win('k1', 2, previous)))
    const statements = s.calls.push
    // the first takes the one connection; the others wait and go out together when it ends
    const first = s.pushDiffs(batch(ns, 'B', win('k0', 1)))
    const newer = batch(ns, 'B', win('k1', 2))
    const older = { ...newer, seq: newer.seq - 100, windows: [win('k1', 1)], refresh: [ref('k1')] }
    const answers = await Promise.all([
      first,
      s.pushDiffs(newer),
      s.pushDiffs(batch(ns, 'C', win('k1', 5), [ref('k2')])),
      s.pushDiffs(older),
      s.pushDiffs(batch(ns, 'B', win(odd, 0.1), [ref(odd)])),
    ])
    assert.equal(s.calls.push - statements, 2, 'the four waiting hits went out in one statement')
    assert.deepEqual(answers.map(counts), [
      [['k0', 'current', 1, 1]],
      // the others in the statement's snapshot (C's row is written by the same statement) + the count pushed
      [['k1', 'current', 5, 2]],
      [
        ['k1', 'current', 8, 5],
        ['k2', 'previous', 1, 0],
      ],
      // refused for its older seq, still answered with the count it pushed
      [
        ['k1', 'current', 4, 1],
        ['k1', 'previous', 6, 2],
      ],
      [
        [odd, 'current', 0.1, 0.1],
        [odd, 'previous', 0, 0],
      ],
    ])
    // one row per node: B's holds the newest seq's count, whatever the order in the queue
    assert.equal((await s.getWindow('k1', ns, start, SIZE, 'B')).own, 2)
    assert.deepEqual(await s.getWindow('k1', ns, start, SIZE, 'C'), {
      key: 'k1',
      windowStartMs: start,
      windowSizeMs: SIZE,
      count: 10,
      own: 5,
    })
    assert.equal((await s.getWindow(odd, ns, start, SIZE, 'B')).own, 0.1)
  })

  it('answers a lone hit that reads no other window, and one refused for its older seq, as a hit with a read would be', async () => {
    const s = await store(4)
    const ns = `lone-${randomUUID().slice(0, 8)}`
    await s.pushDiffs(batch(ns, 'other', win('k', 3)))
    await s.pushDiffs(batch(ns, 'other', win('k', 7, previous)))
    const newer = batch(ns, 'B', win('k', 2))
    const older = { ...newer, seq: newer.seq - 100, windows: [win('k', 1)] }
    // one at a time, each alone on a free connection: the statement without the read
    assert.deepEqual(counts(await s.pushDiffs(newer)), [['k', 'current', 5, 2]])
    assert.deepEqual(counts(await s.pushDiffs(older)), [['k', 'current', 4, 1]], 'refused, answered with the count it pushed')
    // the same key with its previous window read: the statement with the read, alike
    assert.deepEqual(counts(await s.pushDiffs(batch(ns, 'B', win('k', 3), [ref('k')]))), [
      ['k', 'current', 6, 3],
      ['k', 'previous', 7, 0],
    ])
    assert.equal((await s.getWindow('k', ns, start, SIZE, 'B')).own, 3, 'the newest seq holds')
  })

  it('admits exactly the limit of concurrent synchronous hits that share statements', async () => {
    const s = await store(2)
    const ns = `conc-${randomUUID().slice(0, 8)}`
    const rl = RateLimiting.newInstance('pg-hits-concurrent')
    rl.new({ namespace: ns, windowSizes: [60], syncRate: 0, strategy: s })
    const limiter = rl.limiter({ namespace: ns, limits: [{ limit: 3, window: 60 }] })
    const statements = s.calls.push
    for (let round = 0; round < 20; round++) {
      const decisions = await Promise.all(Array.from({ length: 8 }, (_, i) => limiter.hit(i % 2 === 0 ? `a${round}` : `b${round}`)))
      for (const key of ['a', 'b']) {
        const mine = decisions.filter((_, i) => (i % 2 === 0) === (key === 'a'))
        assert.equal(mine.filter((d) => d.allowed).length, 3, `round ${round}, key ${key}: ${mine.map((d) => d.rate).join(' ')}`)
      }
    }
    assert.ok(s.calls.push - statements < 8 * 20, `${s.calls.push - statements} statements for ${8 * 20} hits`)
    assert.equal(await rl.slidingWindow('a0', 60, undefined, ns), 4, 'every hit counted once (denied ones too)')
    await rl.close()
  })

  it('answers every waiting hit its key block, and sends those that read blocks apart from the others', async () => {
    const s = await store(1)
    const ns = `blk-${randomUUID().slice(0, 8)}`
    await s.pushDiffs({ ...batch(ns, 'A', win('x', 1)), windows: [], blocks: [{ key: 'blocked', untilMs: now + 5000 }] })
    const statements = s.calls.push
    const answers = await Promise.all([
      s.pushDiffs(batch(ns, 'A', win('first', 1))),
      s.pushDiffs(batch(ns, 'A', win('blocked', 1), [ref('free')], { readBlocks: true })),
      s.pushDiffs(batch(ns, 'A', win('free', 1), [ref('blocked')], { readBlocks: true })),
      s.pushDiffs(batch(ns, 'A', win('plain', 1))),
      s.pushDiffs(batch(ns, 'A', win('plain2', 1))),
    ])
    assert.equal(s.calls.push - statements, 3, 'the first alone, then one statement reading blocks and one not')
    assert.deepEqual(
      answers.map((rows) => rows.map((r) => [r.key, r.count, r.blockedUntilMs])),
      [
        [['first', 1, undefined]],
        [
          ['blocked', 1, now + 5000],
          ['free', 0, 0],
        ],
        [
          ['free', 1, 0],
          ['blocked', 0, now + 5000],
        ],
        [['plain', 1, undefined]],
        [['plain2', 1, undefined]],
      ],
    )
  })

  it('fails a hit that waits queryTimeoutMs for a connection, and never sends it', async () => {
    const s = await store(1, { queryTimeoutMs: 300 })
    const ns = `late-${randomUUID().slice(0, 8)}`
    await s.pushDiffs(batch(ns, 'A', win('held', 1)))
    // another session holds the row's lock: the next write of it hangs, and the hits behind it wait
    const locker = await db.pool.connect()
    try {
      await locker.query('BEGIN')
      await locker.query(`SELECT * FROM "${db.schema}"."hits" WHERE namespace = $1 FOR UPDATE`, [ns])
      const results = await Promise.allSettled([
        s.pushDiffs(batch(ns, 'A', win('held', 2))),
        s.pushDiffs(batch(ns, 'A', win('queued', 1))),
        s.pushDiffs(batch(ns, 'A', win('queued2', 1))),
      ])
      const messages = results.map((r) =>
        r.status === 'rejected' && r.reason instanceof StoreError ? `${r.reason.code}: ${r.reason.message}` : r.status,
      )
      assert.match(messages[0] as string, /^STORE_TIMEOUT: .*pushDiffs/)
      assert.match(messages[1] as string, /^STORE_TIMEOUT: .*connection checkout.*nothing was written/)
      assert.match(messages[2] as string, /^STORE_TIMEOUT: .*connection checkout/)
    } finally {
      await locker.query('ROLLBACK')
      locker.release()
    }
    assert.equal((await s.getWindow('queued', ns, start, SIZE)).count, 0)
    assert.equal((await s.getWindow('queued2', ns, start, SIZE)).count, 0)
    // the strategy goes on
    assert.deepEqual(counts(await s.pushDiffs(batch(ns, 'A', win('after', 1)))), [['after', 'current', 1, 1]])
  })

  it('synchronousCommit sets synchronous_commit for the hit transactions alone', async () => {
    assert.throws(
      () => new PostgresStrategy({ pool: db.pool, synchronousCommit: 'sometimes' as 'off' }),
      /synchronousCommit must be one of on, off/,
    )
    const s = await store(1, { synchronousCommit: 'off' })
    const ns = `async-${randomUUID().slice(0, 8)}`
    const answers = await Promise.all([1, 2, 3].map((n) => s.pushDiffs(batch(ns, 'A', win(`k${n}`, n), [ref(`k${n}`)]))))
    assert.deepEqual(answers.map(counts), [
      [
        ['k1', 'current', 1, 1],
        ['k1', 'previous', 0, 0],
      ],
      [
        ['k2', 'current', 2, 2],
        ['k2', 'previous', 0, 0],
      ],
      [
        ['k3', 'current', 3, 3],
        ['k3', 'previous', 0, 0],
      ],
    ])
    // inside a transaction of their own, both statements set it for that transaction only
    const client = await db.pool.connect()
    try {
      const setting = async () => (await client.query('SHOW synchronous_commit')).rows[0].synchronous_commit as string
      const server = await setting()
      const one = [ns, 'Z', 1, 'z', SIZE, start, '1', null, null, null]
      const many = [[ns], ['Z'], [2], ['z'], [SIZE], [start], ['1'], [1], ['1'], [null], [null], [null]]
      for (const [text, values] of [
        [pushOneSql(s.names, undefined, 'off'), one],
        [hitsSql(s.names, false, 'off'), many],
      ] as const) {
        await client.query('BEGIN')
        await client.query(text, [...values])
        assert.equal(await setting(), 'off')
        await client.query('COMMIT')
        assert.equal(await setting(), server)
      }
    } finally {
      client.release()
    }
  })
})
