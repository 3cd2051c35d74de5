/**
 * What one escrow call costs on PostgreSQL (src/strategies/postgres/escrow.ts): the time of
 * `PostgresStrategy.escrow()`, one statement (a call of the escrow function) and one round trip,
 * with 1 and 100 grants, against a push (`pushDiffs`) of as many windows for scale. Calls go one
 * at a time on one connection; each figure is the median (and p90) of the repeats, after a
 * warm-up, in rounds that interleave the calls (the median of the rounds'); the function's own
 * time (EXPLAIN ANALYZE: no round trip, no commit) beside them. Then grants of one hot key from 8 connections at once: the key-window's lock makes
 * them take turns.
 *
 *   node --import tsx bench/postgres-escrow.bench.ts           5 rounds of every call: 100 repeats (1 grant), 30 (100 grants)
 *   node --import tsx bench/postgres-escrow.bench.ts --quick   a smoke run
 *
 * Works in a schema of its own in the database of RL_BENCH_POSTGRES_URL
 * (default postgres://postgres@127.0.0.1:5432/test) and drops it at the end. Prints only.
 */
import { randomUUID } from 'node:crypto'
import pg from 'pg'
import type { EscrowBatch, GrantRequest, WindowPush } from '../src/core/strategy.js'
import { windowStartMs } from '../src/core/window.js'
import { escrowParams, escrowSql } from '../src/strategies/postgres/escrow.js'
import { PostgresStrategy } from '../src/strategies/postgres/index.js'
import { median } from './lib/harness.js'

const quick = process.argv.includes('--quick')
const URL_ = process.env.RL_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const SIZE = 60_000
const LEARN = 3_000
const REPEATS = { one: quick ? 20 : 100, hundred: quick ? 10 : 30 }
const ROUNDS = quick ? 1 : 5

const schema = `rl_bench_escrow_${randomUUID().replaceAll('-', '').slice(0, 8)}`
const admin = new pg.Pool({ connectionString: URL_, max: 1 })
const store = new PostgresStrategy({ connectionString: URL_, schema, poolSize: 1, purgeIntervalMs: 0 })
const ns = 'bench'
const node = 'n1'
let seq = 0
let keyNo = 0
const now = Date.now()
const start = windowStartMs(now, SIZE)

const grant = (key: string): GrantRequest => ({ key, windowStartMs: start, windowSizeMs: SIZE, target: 1e9, limit: 1e9, minimum: 1 })
const write = (key: string): WindowPush => ({ key, windowStartMs: start - SIZE, windowSizeMs: SIZE, count: 1, diff: 1 })
const batch = (grants: GrantRequest[], windows: WindowPush[] = []): EscrowBatch => ({
  namespace: ns,
  nodeId: node,
  seq: ++seq,
  nowMs: now,
  learnMs: LEARN,
  windows,
  refresh: [],
  grants,
})
const fresh = (n: number): string[] => Array.from({ length: n }, () => `key-${keyNo++}`)

// ms per call: median and p90 of `repeats` calls, after a tenth as many unmeasured
async function time(repeats: number, call: () => Promise<unknown>): Promise<{ median: number; p90: number }> {
  for (let i = 0; i < Math.max(3, repeats / 10); i++) await call()
  const samples: number[] = []
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now()
    await call()
    samples.push(performance.now() - t0)
  }
  samples.sort((a, b) => a - b)
  return { median: median(samples), p90: samples[Math.floor(samples.length * 0.9)] as number }
}

async function main(): Promise<void> {
  await store.migrate()
  const settings = await admin.query(
    "SELECT current_setting('server_version') v, current_setting('synchronous_commit') sc, current_setting('fsync') f",
  )
  const s = settings.rows[0] as { v: string; sc: string; f: string }
  console.log(`PostgreSQL ${s.v}, synchronous_commit ${s.sc}, fsync ${s.f}; one connection, calls one at a time`)
  // the namespace's epoch began long enough ago: grants are applied
  await store.escrow({ ...batch([]), nowMs: now - LEARN - 1 })
  const hot = fresh(100)
  await store.escrow(batch(hot.map(grant)))
  const push = (windows: WindowPush[]) =>
    store.pushDiffs({ namespace: 'plain', nodeId: node, seq: ++seq, nowMs: now, windows, refresh: [] })
  // the function's own time (no round trip, no commit): EXPLAIN ANALYZE of the statement the strategy sends
  const explain = async (grants: GrantRequest[]): Promise<number> => {
    const b = batch(grants)
    const plan = await admin.query({ text: `EXPLAIN (ANALYZE, FORMAT JSON) ${escrowSql(store.names)}`, values: escrowParams(b) })
    return (plan.rows[0] as { 'QUERY PLAN': Array<{ 'Execution Time': number }> })['QUERY PLAN'][0]?.['Execution Time'] as number
  }
  const scenarios: Array<[string, number, () => Promise<unknown>]> = [
    ['escrow, empty (lease renewal)', REPEATS.one, () => store.escrow(batch([]))],
    ['escrow, 1 grant, a new key (insert)', REPEATS.one, () => store.escrow(batch(fresh(1).map(grant)))],
    ['escrow, 1 grant, a held key (update)', REPEATS.one, () => store.escrow(batch([grant(hot[0] as string)]))],
    ['escrow, 100 grants, new keys', REPEATS.hundred, () => store.escrow(batch(fresh(100).map(grant)))],
    ['escrow, 100 grants, held keys', REPEATS.hundred, () => store.escrow(batch(hot.map(grant)))],
    ['escrow, 100 writes (returns), no grant', REPEATS.hundred, () => store.escrow(batch([], hot.map(write)))],
    ['pushDiffs, 1 window (periodic sync)', REPEATS.one, () => push([write('p')])],
    ['pushDiffs, 100 windows (periodic sync)', REPEATS.hundred, () => push(hot.map(write))],
  ]
  // rounds interleave the scenarios (this machine's load drifts); each figure is the median of the rounds' medians
  const medians = scenarios.map(() => [] as number[])
  const p90s = scenarios.map(() => [] as number[])
  const inside = { one: [] as number[], hundred: [] as number[] }
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, [, repeats, call]] of scenarios.entries()) {
      const t = await time(repeats, call)
      medians[i]?.push(t.median)
      p90s[i]?.push(t.p90)
    }
    for (let i = 0; i < 10; i++) {
      inside.one.push(await explain([grant(hot[0] as string)]))
      inside.hundred.push(await explain(hot.map(grant)))
    }
  }
  const width = Math.max(...scenarios.map(([name]) => name.length))
  console.log(`${'call'.padEnd(width)}  median ms  p90 ms`)
  for (const [i, [name]] of scenarios.entries())
    console.log(
      `${name.padEnd(width)}  ${median(medians[i] ?? [])
        .toFixed(3)
        .padStart(9)}  ${median(p90s[i] ?? [])
        .toFixed(3)
        .padStart(6)}`,
    )
  console.log(
    `the function's own time (EXPLAIN ANALYZE, no round trip, no commit): 1 grant ${median(inside.one).toFixed(3)} ms, 100 grants ${median(inside.hundred).toFixed(3)} ms`,
  )

  // one hot key, 8 connections asking at once, each for one more hit than it holds
  const racers = Array.from({ length: 8 }, () => new PostgresStrategy({ connectionString: URL_, schema, poolSize: 1, purgeIntervalMs: 0 }))
  const perRacer = quick ? 20 : 200
  const t0 = performance.now()
  await Promise.all(
    racers.map(async (r, i) => {
      let held = 0
      for (let j = 0; j < perRacer; j++) {
        const reply = await r.escrow({
          ...batch([]),
          nodeId: `racer-${i}`,
          seq: j + 1,
          grants: [{ ...grant('one-hot-key'), minimum: held + 1 }],
        })
        held = reply.grants[0]?.own ?? held
      }
    }),
  )
  const elapsed = performance.now() - t0
  console.log(
    `one hot key, 8 connections at once: ${Math.round((8 * perRacer * 1000) / elapsed)} grants/s (${(elapsed / perRacer).toFixed(3)} ms per round of 8)`,
  )
  for (const r of racers) await r.close()
}

try {
  await main()
} finally {
  await store.close()
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await admin.end()
}
