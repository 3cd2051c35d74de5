/**
 * Escrow on PostgreSQL under real faults: a grant applied whose reply is lost (a TCP proxy that
 * swallows replies after the request went through), the store unreachable and back (decisions
 * follow `onStoreError`, `share` included), a private server killed and restarted (PostgreSQL
 * keeps the epoch and the reservations: no learning period, no budget lost), and a worker process
 * killed while it holds budget (the others never over-admit; they under-admit by its stranded
 * budget, exactly).
 */
import assert from 'node:assert/strict'
import { type ChildProcess, fork } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { after, before, describe, it } from 'node:test'
import { createFakeClock } from '../../src/core/clock.js'
import type { Limiter } from '../../src/core/limiter.js'
import type { OnStoreError } from '../../src/core/options.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { windowStartMs } from '../../src/core/window.js'
import { PostgresStrategy } from '../../src/strategies/postgres/index.js'
import { startTcpProxy, type TcpProxy } from '../../src/testing/tcp-proxy.js'
import { createTestSchema, SHARED_POSTGRES_URL, startPrivatePostgres, type TestSchema } from '../support/postgres-server.js'
import type { EscrowWorkerCommand, EscrowWorkerReply } from '../support/postgres-escrow-worker.js'

const SIZE = 60_000
// learnMs = 2 × syncRate + 2 × storeTimeoutMs
const LEARN_MS = 2 * 500 + 2 * 400

const db: TestSchema = await createTestSchema('rl_escrow_faults')
after(() => db.drop())
const shared = new URL(SHARED_POSTGRES_URL)

interface Process {
  readonly rl: RateLimiting
  readonly store: PostgresStrategy
  readonly limiter: Limiter
}

// RateLimiting instances (processes) on one fake clock 5 s into a window, each with its own
// strategy to `urls[i]`, past the learning period of a new namespace's epoch.
async function fleet(urls: string[], schema: string, limit: number, onStoreError: OnStoreError, countDenied = true) {
  const namespace = `faults-${randomUUID().slice(0, 8)}`
  const clock = createFakeClock(windowStartMs(Date.now(), SIZE) + 5_000)
  const processes: Process[] = urls.map((url, i) => {
    const store = new PostgresStrategy({ connectionString: url, schema, poolSize: 2, queryTimeoutMs: 300, purgeIntervalMs: 0 })
    const rl = RateLimiting.newInstance(`pg-escrow-faults-${i}`)
    rl.new({
      namespace,
      windowSizes: [60],
      syncRate: 0.5,
      storeTimeoutMs: 400,
      strategy: store,
      escrow: true,
      onStoreError,
      clock: clock.now,
      autoSync: false,
      onError: () => undefined,
    })
    return { rl, store, limiter: rl.limiter({ namespace, limits: [{ limit, window: 60 }], countDenied }) }
  })
  await processes[0]?.store.migrate()
  for (const p of processes) await p.limiter.hit('warm-up')
  clock.advance(LEARN_MS)
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

const at = (url: string, port: number): string => {
  const u = new URL(url)
  u.port = String(port)
  return u.toString()
}

describe('PostgreSQL escrow: faults through a proxy', () => {
  let proxy: TcpProxy
  before(async () => {
    proxy = await startTcpProxy(Number(shared.port || 5432), shared.hostname)
  })
  after(() => proxy.close())

  it('takes back a grant whose reply was lost: the next grant answers it, nothing is granted twice or stranded', async () => {
    const f = await fleet([at(SHARED_POSTGRES_URL, proxy.port), SHARED_POSTGRES_URL], db.schema, 20, 'deny', false)
    const [a, b] = f.processes as [Process, Process]
    try {
      proxy.mode = 'swallow-replies'
      const lost = await a.limiter.hit('k')
      assert.deepEqual([lost.allowed, lost.reason], [false, 'store-error'])
      const start = windowStartMs(f.clock.now(), SIZE)
      const held = await b.store.getWindow('k', f.namespace, start, SIZE, a.rl.namespace(f.namespace).nodeId)
      assert.ok(held.own > 0, 'the grant landed although its reply was lost')
      proxy.mode = 'pass'
      proxy.cutConnections()
      f.clock.advance(600) // past the quiet spell after a failure
      let admitted = 0
      for (let i = 0; i < 100; i++) {
        const d = await (i % 2 === 0 ? a : b).limiter.hit('k')
        assert.notEqual(d.reason, 'store-error')
        if (d.allowed) admitted++
      }
      assert.equal(admitted, 20, 'the limit exactly: the lost grant was neither applied twice nor stranded')
      assert.equal((await b.store.getWindow('k', f.namespace, start, SIZE)).count, 20)
    } finally {
      proxy.mode = 'pass'
      await f.close()
    }
  })

  for (const [policy, expected] of [
    ['deny', [false, false, false]],
    ['allow', [true, true, true]],
    ['local', [true, true, false]],
    ['share', [true, false, false]],
  ] as const) {
    it(`follows onStoreError ${policy} while the store is unreachable, and grants again once it is back`, async () => {
      // limit 2 and 2 processes: share admits 1 (limit / n); local counts this process's hits only
      const f = await fleet([at(SHARED_POSTGRES_URL, proxy.port), SHARED_POSTGRES_URL], db.schema, 2, policy)
      const [a, b] = f.processes as [Process, Process]
      try {
        await b.limiter.hit('other')
        await a.limiter.hit('seen') // a learns that 2 processes call the store
        proxy.mode = 'refuse'
        proxy.cutConnections()
        const got: boolean[] = []
        for (let i = 0; i < 3; i++) {
          const d = await a.limiter.hit('k')
          assert.equal(d.reason, 'store-error')
          got.push(d.allowed)
        }
        assert.deepEqual(got, expected)
        proxy.mode = 'pass'
        f.clock.advance(600)
        const back = await a.limiter.hit('fresh')
        assert.deepEqual([back.allowed, back.reason === 'store-error'], [true, false])
      } finally {
        proxy.mode = 'pass'
        await f.close()
      }
    })
  }
})

describe('PostgreSQL escrow: a server killed and restarted', () => {
  it('keeps the epoch and every reservation: grants resume without learning, and the fleet admits the limit exactly', async () => {
    const server = await startPrivatePostgres()
    const f = await fleet([server.url, server.url], 'public', 30, 'deny', false)
    const [a, b] = f.processes as [Process, Process]
    try {
      let admitted = 0
      const round = async (hits: number) => {
        for (let i = 0; i < hits; i++) if ((await (i % 2 === 0 ? a : b).limiter.hit('k')).allowed) admitted++
      }
      await round(10)
      assert.equal(admitted, 10)
      const epoch = await a.store.escrow({
        namespace: f.namespace,
        nodeId: 'probe',
        seq: 1,
        nowMs: f.clock.now(),
        learnMs: LEARN_MS,
        windows: [],
        refresh: [],
        grants: [],
      })
      await server.kill()
      await round(6) // budgets held are spent while their lease lasts; then the store's failure decides (deny)
      await server.start()
      f.clock.advance(600)
      const restarted = await a.store
        .escrow({
          namespace: f.namespace,
          nodeId: 'probe',
          seq: 2,
          nowMs: f.clock.now(),
          learnMs: LEARN_MS,
          windows: [],
          refresh: [],
          grants: [],
        })
        .catch(async () => {
          // the pool's first checkout may still hold a dead connection
          return await a.store.escrow({
            namespace: f.namespace,
            nodeId: 'probe',
            seq: 3,
            nowMs: f.clock.now(),
            learnMs: LEARN_MS,
            windows: [],
            refresh: [],
            grants: [],
          })
        })
      assert.deepEqual([restarted.epochMs, restarted.learning], [epoch.epochMs, false])
      await round(200)
      assert.equal(admitted, 30)
    } finally {
      await f.close()
      await server.destroy()
    }
  })
})

describe('PostgreSQL escrow: a process killed while it holds budget', () => {
  const workerPath = path.join(path.dirname(fileURLToPath(import.meta.url)), '../support/postgres-escrow-worker.ts')
  const workers: ChildProcess[] = []
  after(() => {
    for (const w of workers) if (w.exitCode === null) w.kill('SIGKILL')
  })

  const next = (w: ChildProcess, type: EscrowWorkerReply['type']): Promise<EscrowWorkerReply> =>
    new Promise((resolve, reject) => {
      const onMessage = (m: EscrowWorkerReply) => {
        if (m.type !== type) return
        w.off('message', onMessage)
        w.off('exit', onExit)
        resolve(m)
      }
      const onExit = (code: number | null) => reject(new Error(`worker exited (${code}) before "${type}"`))
      w.on('message', onMessage)
      w.once('exit', onExit)
    })
  const hit = async (w: ChildProcess, key: string) => {
    const answer = next(w, 'hit')
    w.send({ type: 'hit', key } satisfies EscrowWorkerCommand)
    return (await answer) as Extract<EscrowWorkerReply, { type: 'hit' }>
  }

  it('never over-admits: the others lose at most the budget it stranded', async () => {
    const limit = 30
    const namespace = `killed-${randomUUID().slice(0, 8)}`
    await new PostgresStrategy({ pool: db.pool, schema: db.schema }).migrate()
    // the fleet's clock: 1 s into a window, so that the test never crosses its end
    const offset = windowStartMs(Date.now(), SIZE) + SIZE + 1000 - Date.now()
    const env = {
      ...process.env,
      RL_URL: SHARED_POSTGRES_URL,
      RL_SCHEMA: db.schema,
      RL_NAMESPACE: namespace,
      RL_LIMIT: String(limit),
      RL_CLOCK_OFFSET_MS: String(offset),
    }
    for (let i = 0; i < 3; i++)
      workers.push(fork(workerPath, [], { env, execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }))
    const ids = (await Promise.all(workers.map((w) => next(w, 'ready')))).map((r) => (r as { nodeId: string }).nodeId)
    for (const w of workers) await hit(w, 'warm-up')
    await new Promise((resolve) => setTimeout(resolve, LEARN_MS + 300))
    const [victim, ...others] = workers as [ChildProcess, ChildProcess, ChildProcess]
    let admitted = 0
    for (let i = 0; i < 2; i++) if ((await hit(victim, 'k')).allowed) admitted++
    assert.equal(admitted, 2)
    const start = windowStartMs(Date.now() + offset, SIZE)
    const held = Number(
      (
        await db.pool.query(
          `SELECT count FROM "${db.schema}".ratelimiting_counters WHERE namespace = $1 AND key = 'k' AND window_start_ms = $2 AND node_id = $3`,
          [namespace, start, ids[0]],
        )
      ).rows[0]?.count,
    )
    assert.ok(held > admitted, `the victim holds budget it has not spent (${held} reserved, ${admitted} admitted)`)
    victim.kill('SIGKILL')
    await once(victim, 'exit')
    let survivors = 0
    for (let i = 0; i < 120; i++) {
      const d = await hit(others[i % 2] as ChildProcess, 'k')
      assert.notEqual(d.reason, 'store-error')
      if (d.allowed) survivors++
    }
    assert.ok(admitted + survivors <= limit, `${admitted + survivors} admitted, limit ${limit}`)
    assert.equal(survivors, limit - held, 'under-admission by exactly the budget the dead process stranded')
    for (const w of others) {
      w.send({ type: 'exit' } satisfies EscrowWorkerCommand)
      await once(w, 'exit')
    }
  })
})
