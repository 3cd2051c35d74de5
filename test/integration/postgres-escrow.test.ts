/**
 * Escrow on PostgreSQL (src/strategies/postgres/escrow.ts): the escrow contract against the
 * shared server, one round trip per batch, the tables `migrate()` adds to an earlier version's,
 * the epoch kept across strategies (processes), grants that race on one key from many
 * connections, and a fleet of RateLimiting instances hammering one key. Faults are in
 * postgres-escrow-faults.test.ts.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, describe, it } from 'node:test'
import { createFakeClock } from '../../src/core/clock.js'
import { StoreError } from '../../src/core/errors.js'
import type { Limiter } from '../../src/core/limiter.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import type { EscrowBatch, GrantRequest } from '../../src/core/strategy.js'
import { windowStartMs } from '../../src/core/window.js'
import { type PgClientLike, type PgPoolLike, PostgresStrategy } from '../../src/strategies/postgres/index.js'
import { runEscrowContract } from '../../src/testing/escrow-contract.js'
import { createTestSchema, SHARED_POSTGRES_URL as URL, type TestSchema } from '../support/postgres-server.js'

const db: TestSchema = await createTestSchema('rl_escrow')
after(() => db.drop())

runEscrowContract('postgres', async () => {
  const s = new PostgresStrategy({ pool: db.pool, schema: db.schema, purgeIntervalMs: 0 })
  await s.migrate()
  return s
})

const SIZE = 60_000
const LEARN = 4_000

function batch(ns: string, nodeId: string, seq: number, nowMs: number, grants: GrantRequest[] = []): EscrowBatch {
  return { namespace: ns, nodeId, seq, nowMs, learnMs: LEARN, windows: [], refresh: [], grants }
}

function grant(key: string, start: number, minimum: number, limit: number): GrantRequest {
  return { key, windowStartMs: start, windowSizeMs: SIZE, target: limit, limit, minimum }
}

// A pool that counts the statements sent through it.
function countingPool(pool: PgPoolLike): { pool: PgPoolLike; statements: () => number } {
  let statements = 0
  return {
    pool: {
      async connect(): Promise<PgClientLike> {
        const client = await pool.connect()
        return {
          query: ((...args: unknown[]) => {
            statements++
            return (client.query as (...a: unknown[]) => unknown)(...args)
          }) as PgClientLike['query'],
          release: (err?: Error | boolean) => client.release(err),
        }
      },
    },
    statements: () => statements,
  }
}

describe('PostgreSQL escrow: the strategy', () => {
  it('sends one statement per batch, whatever it writes and grants', async () => {
    const counted = countingPool(db.pool)
    const s = new PostgresStrategy({ pool: counted.pool, schema: db.schema, purgeIntervalMs: 0 })
    await s.migrate()
    const ns = `one-${randomUUID().slice(0, 8)}`
    const now = Date.now()
    const start = windowStartMs(now, SIZE)
    const before = counted.statements()
    await s.escrow(batch(ns, 'n1', 1, now - LEARN - 1))
    const grants = Array.from({ length: 100 }, (_, i) => grant(`k${i}`, start, 1, 10))
    const reply = await s.escrow({
      ...batch(ns, 'n1', 2, now, grants),
      windows: [{ key: 'w', windowStartMs: start - SIZE, windowSizeMs: SIZE, count: 4, diff: 0 }],
    })
    assert.equal(reply.grants.length, 100)
    assert.equal(counted.statements() - before, 2)
    assert.equal(s.calls.escrow, 2)
    await s.close()
  })

  it('adds its tables and function to a database migrated by an earlier version, keeping the counts', async () => {
    const table = `old_${randomUUID().slice(0, 8)}`
    const s = new PostgresStrategy({ pool: db.pool, schema: db.schema, table, purgeIntervalMs: 0 })
    await s.migrate()
    // what an earlier version left: the counters (with a count) and the blocks, no escrow objects
    await db.pool.query(
      `DROP FUNCTION "${db.schema}"."${table}_escrow"; DROP TABLE "${db.schema}"."${table}_epochs", "${db.schema}"."${table}_callers"`,
    )
    const now = Date.now()
    const start = windowStartMs(now, SIZE)
    await s.pushDiffs({
      namespace: 'ns',
      nodeId: 'old',
      seq: 1,
      nowMs: now,
      windows: [{ key: 'k', windowStartMs: start, windowSizeMs: SIZE, count: 7, diff: 7 }],
      refresh: [],
    })
    await assert.rejects(
      s.escrow(batch('ns', 'n1', 1, now)),
      (err: unknown) => err instanceof StoreError && /run migrate\(\) first/.test(err.message),
    )
    await s.migrate()
    await s.migrate() // idempotent
    await s.escrow(batch('ns', 'n1', 1, now - LEARN))
    const reply = await s.escrow(batch('ns', 'n1', 2, now, [grant('k', start, 1, 10)]))
    // 7 held by the old node (which never called escrow: one caller), room 3: 1 + floor(2 / 4) = 1
    assert.deepEqual([reply.grants[0]?.count, reply.grants[0]?.own], [8, 1])
    await s.close()
  })

  it('refuses the reserved node id', async () => {
    const s = new PostgresStrategy({ pool: db.pool, schema: db.schema, purgeIntervalMs: 0 })
    await assert.rejects(s.escrow(batch('ns', '~reset', 1, Date.now())), /reserved/)
    await s.close()
  })

  it('keeps the epoch for every process (a strategy of its own) and begins a new one only when the epochs table loses it', async () => {
    const ns = `epoch-${randomUUID().slice(0, 8)}`
    const a = new PostgresStrategy({ pool: db.pool, schema: db.schema, purgeIntervalMs: 0 })
    await a.migrate()
    const t0 = Date.now()
    assert.equal((await a.escrow(batch(ns, 'a', 1, t0))).epochMs, t0)
    await a.close()
    // another process, later: the same epoch, past its learning
    const b = new PostgresStrategy({ connectionString: URL, schema: db.schema, poolSize: 1 })
    const later = await b.escrow(batch(ns, 'b', 1, t0 + LEARN))
    assert.deepEqual([later.epochMs, later.learning], [t0, false])
    await db.pool.query(`DELETE FROM "${db.schema}"."ratelimiting_counters_epochs" WHERE namespace = $1`, [ns])
    const fresh = await b.escrow(batch(ns, 'b', 2, t0 + LEARN + 5))
    assert.deepEqual([fresh.epochMs, fresh.learning], [t0 + LEARN + 5, true])
    await b.close()
  })

  it('never grants past the limit when many connections race for one key, and hands out all of it', async () => {
    // 8 processes with 3 connections each, 3 lanes each asking 8 times for one more hit than the
    // process holds: without the key-window's lock, calls would read the same room and each take it
    const ns = `race-${randomUUID().slice(0, 8)}`
    const now = Date.now()
    const start = windowStartMs(now, SIZE)
    const limit = 50
    const stores = Array.from(
      { length: 8 },
      () => new PostgresStrategy({ connectionString: URL, schema: db.schema, poolSize: 3, purgeIntervalMs: 0 }),
    )
    try {
      await stores[0]?.migrate()
      await stores[0]?.escrow(batch(ns, 'opener', 1, now - LEARN - 1))
      const seqs = stores.map(() => 0)
      const held = stores.map(() => 0)
      const ask = async (p: number): Promise<boolean> => {
        const s = stores[p] as PostgresStrategy
        const before = held[p] as number
        const reply = await s.escrow(batch(ns, `p${p}`, ++(seqs[p] as number), now, [grant('hot', start, before + 1, limit)]))
        const own = reply.grants[0]?.own ?? 0
        if (own > (held[p] as number)) held[p] = own
        return own > before
      }
      await Promise.all(
        stores.flatMap((_, p) =>
          Array.from({ length: 3 }, async () => {
            for (let i = 0; i < 8; i++) await ask(p)
          }),
        ),
      )
      const raced = held.reduce((a, b) => a + b, 0)
      // then one at a time until every process is refused: no room was lost
      for (let p = 0; p < stores.length; p++) while (await ask(p));
      const stored = await stores[0]?.getWindow('hot', ns, start, SIZE)
      assert.ok(raced <= limit, `${raced} reserved by the race, limit ${limit}`)
      assert.equal(
        held.reduce((a, b) => a + b, 0),
        stored?.count,
        'every reservation a process was answered is stored',
      )
      assert.equal(stored?.count, limit, 'the room is handed out to the last hit')
    } finally {
      for (const s of stores) await s.close()
    }
  })
})

interface Fleet {
  readonly namespace: string
  readonly clock: ReturnType<typeof createFakeClock>
  readonly processes: Array<{ rl: RateLimiting; limiter: Limiter; store: PostgresStrategy }>
  close(): Promise<void>
}

// `n` RateLimiting instances (processes), each with its own strategy and pool, past the learning
// period of a new namespace's epoch, on a fake clock 5 s into a 60 s window.
async function fleet(n: number, limit: number, countDenied: boolean): Promise<Fleet> {
  const namespace = `fleet-${randomUUID().slice(0, 8)}`
  const clock = createFakeClock(windowStartMs(Date.now(), SIZE) + 5_000)
  const processes: Fleet['processes'] = []
  for (let i = 0; i < n; i++) {
    const store = new PostgresStrategy({ connectionString: URL, schema: db.schema, poolSize: 4, purgeIntervalMs: 0 })
    if (i === 0) await store.migrate()
    const rl = RateLimiting.newInstance(`pg-escrow-fleet-${i}`)
    rl.new({
      namespace,
      windowSizes: [60],
      syncRate: 0.5,
      strategy: store,
      escrow: true,
      clock: clock.now,
      autoSync: false,
      onError: () => undefined,
    })
    processes.push({ rl, store, limiter: rl.limiter({ namespace, limits: [{ limit, window: 60 }], countDenied }) })
  }
  // the epoch begins with the first call (a hit that asks for a grant); grants start once its
  // learning period (2 × syncRate + 2 × storeTimeoutMs) is over
  for (const p of processes) await p.limiter.hit('warm-up')
  clock.advance(2 * 500 + 2 * 1000)
  for (const p of processes) await p.rl.namespace(namespace).sync(true)
  return {
    namespace,
    clock,
    processes,
    async close() {
      for (const p of processes) {
        await p.rl.close().catch(() => undefined)
        await p.store.close()
      }
    },
  }
}

describe('PostgreSQL escrow: a fleet', () => {
  it('admits exactly the limit across 4 processes taking turns, with far fewer calls than hits and none per denial', async () => {
    const f = await fleet(4, 100, true)
    try {
      const calls = () => f.processes.reduce((sum, p) => sum + p.store.calls.escrow, 0)
      const before = calls()
      let admitted = 0
      let waited = 0
      for (let i = 0; i < 1000; i++) {
        const d = f.processes[i % 4]?.limiter.hit('k')
        if (d instanceof Promise) waited++
        if ((await d)?.allowed) admitted++
      }
      assert.equal(admitted, 100)
      assert.equal(calls() - before, waited, 'a hit decided locally makes no call')
      assert.ok(waited < 60, `${waited} grants for 1,000 hits`)
    } finally {
      await f.close()
    }
  })

  for (const countDenied of [false, true]) {
    it(`admits at most the limit when 200 callers on 4 processes hammer one key, and stores what was counted (countDenied: ${countDenied})`, async () => {
      const limit = 100
      const f = await fleet(4, limit, countDenied)
      try {
        let admitted = 0
        let denied = 0
        await Promise.all(
          f.processes.flatMap((p) =>
            Array.from({ length: 50 }, async () => {
              for (let h = 0; h < 10; h++) {
                const decision = await p.limiter.hit('hot')
                // time passes (1 ms a decision, 2 s in all: the window holds)
                f.clock.advance(1)
                if (decision.allowed) admitted++
                else denied++
                assert.notEqual(decision.reason, 'store-error')
              }
            }),
          ),
        )
        assert.equal(admitted + denied, 2000)
        assert.ok(admitted <= limit, `${admitted} admitted, limit ${limit}`)
        assert.ok(admitted > 0)
        // the window closes; every process gives back what it did not spend and writes what it counted
        const start = windowStartMs(f.clock.now(), SIZE)
        f.clock.advance(SIZE)
        for (const p of f.processes) await p.rl.sync(f.namespace)
        const stored = await f.processes[0]?.store.getWindow('hot', f.namespace, start, SIZE)
        assert.equal(stored?.count, countDenied ? admitted + denied : admitted)
      } finally {
        await f.close()
      }
    })
  }
})
