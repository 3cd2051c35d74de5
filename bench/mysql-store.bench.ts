/**
 * The example MySQL store (examples/mysql-store.ts) against the PostgreSQL store, through the
 * engine in synchronous mode (every decision is one push to the store), at 1 and 64 decisions in
 * flight; plus the same MySQL push sent as separate queries (one round trip per statement), to
 * show what sending its three statements as one query saves. Reports decisions per second
 * (median of the rounds, rounds of the subjects interleaved) and queries per decision.
 *
 *   node --import tsx bench/mysql-store.bench.ts           full run (5 rounds of 1.5 s)
 *   node --import tsx bench/mysql-store.bench.ts --quick   a smoke run in seconds
 *
 * Works in tables of its own (RL_BENCH_MYSQL_URL, default mysql://root@127.0.0.1:3306/test, and a
 * schema in RL_BENCH_POSTGRES_URL, default postgres://postgres@127.0.0.1:5432/test), dropped at
 * the end. Prints a Markdown table; docs/STORES.md records a run.
 */
import { randomUUID } from 'node:crypto'
import { cpus, loadavg } from 'node:os'
import mysql from 'mysql2/promise'
import pg from 'pg'
import { MysqlStrategy } from '../examples/mysql-store.js'
import { RateLimiting } from '../src/core/rate-limiting.js'
import type { Strategy } from '../src/core/strategy.js'
import { PostgresStrategy } from '../src/strategies/postgres/index.js'
import { median } from './lib/harness.js'
import { log, measureDecisions } from './lib/stores.js'

const quick = process.argv.includes('--quick')
const MYSQL_URL = process.env.RL_BENCH_MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test'
const POSTGRES_URL = process.env.RL_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const ROUNDS = quick ? 1 : 5
const ROUND_MS = quick ? 300 : 1500
const IN_FLIGHT = [1, 64]
const POOL_SIZE = 10
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)
const LIMIT = 1e9 // every hit allowed: this measures the cost of a decision, not of a refusal

interface Subject {
  readonly name: string
  readonly batch: number
  readonly decide: (key: string) => unknown
  /** Queries sent so far (each is one round trip). */
  readonly queries: () => number
  close(): Promise<void>
}

const table = `rl_bench_${randomUUID().replaceAll('-', '').slice(0, 10)}`
const schema = table
const pgAdmin = new pg.Pool({ connectionString: POSTGRES_URL, max: 2 })
const mysqlAdmin = await mysql.createConnection(MYSQL_URL)

// A pool whose connections send a multi-statement query as one query per statement, in order:
// the same statements, a round trip each. (The values are escaped into the text first; none of
// them holds the ";\n" that separates the statements.)
function splittingPool(pool: mysql.Pool, count: () => void): mysql.Pool {
  const getConnection = pool.getConnection.bind(pool)
  return Object.assign(Object.create(pool) as mysql.Pool, {
    async getConnection() {
      const conn = await getConnection()
      const query = conn.query.bind(conn) as (sql: string) => Promise<[unknown, unknown]>
      return Object.assign(Object.create(conn) as mysql.PoolConnection, {
        async query(sql: string, values: unknown[]) {
          const results: unknown[] = []
          for (const statement of conn.format(sql, values).split(';\n')) {
            count()
            results.push((await query(statement))[0])
          }
          return [results.length === 1 ? results[0] : results, undefined]
        },
      })
    },
  })
}

async function engineSubject(name: string, strategy: Strategy, queries: () => number, close: () => Promise<void>): Promise<Subject> {
  const ns = `ns-${randomUUID().slice(0, 8)}`
  const rl = RateLimiting.newInstance(`bench-${name}`)
  rl.new({ namespace: ns, windowSizes: [60], syncRate: 0, strategy })
  const limiter = rl.limiter({ namespace: ns, limits: [{ limit: LIMIT, window: 60 }] })
  return {
    name,
    batch: 1,
    decide: (key) => limiter.hit(key),
    queries,
    close: async () => {
      await rl.close()
      await close()
    },
  }
}

const subjects: Array<() => Promise<Subject>> = [
  async () => {
    const store = new MysqlStrategy({ uri: MYSQL_URL, table, poolSize: POOL_SIZE })
    return engineSubject(
      'MySQL example store, one query per push',
      store,
      () => store.calls.push,
      () => store.close(),
    )
  },
  async () => {
    const pool = mysql.createPool({ uri: MYSQL_URL, connectionLimit: POOL_SIZE, multipleStatements: true })
    let queries = 0
    const store = new MysqlStrategy({ pool: splittingPool(pool, () => queries++), table })
    return engineSubject(
      'MySQL example store, push as separate queries',
      store,
      () => queries,
      async () => {
        await store.close()
        await pool.end()
      },
    )
  },
  async () => {
    const pool = new pg.Pool({ connectionString: POSTGRES_URL, max: POOL_SIZE })
    const store = new PostgresStrategy({ pool, schema, purgeIntervalMs: 0 })
    return engineSubject(
      'PostgreSQL store',
      store,
      () => store.calls.push,
      async () => {
        await store.close()
        await pool.end()
      },
    )
  },
]

const rows: string[] = []
try {
  const loadAtStart = loadavg()[0] as number
  const setup = new MysqlStrategy({ uri: MYSQL_URL, table })
  await setup.migrate()
  await setup.close()
  await new PostgresStrategy({ pool: pgAdmin, schema }).migrate()
  for (const inFlight of IN_FLIGHT) {
    const made: Subject[] = []
    for (const make of subjects) made.push(await make())
    const rates = made.map(() => [] as number[])
    const perDecision = made.map(() => [] as number[])
    // warm-up: connections, the keys' rows
    for (const subject of made) await measureDecisions(subject, KEYS, inFlight, quick ? 100 : 500)
    for (let r = 0; r < ROUNDS; r++) {
      for (const [i, subject] of made.entries()) {
        const before = subject.queries()
        const { decisions, seconds } = await measureDecisions(subject, KEYS, inFlight, ROUND_MS)
        rates[i]?.push(decisions / seconds)
        perDecision[i]?.push((subject.queries() - before) / decisions)
      }
    }
    const base = median(rates[0] ?? [])
    for (const [i, subject] of made.entries()) {
      await subject.close()
      const rate = median(rates[i] ?? [])
      const line = `| ${subject.name} | ${inFlight} | ${Math.round(rate).toLocaleString('en-US')} | ${(rate / base).toFixed(2)} | ${median(perDecision[i] ?? []).toFixed(3)} |`
      log(line)
      rows.push(line)
    }
  }
  const [version] = await mysqlAdmin.query('SELECT VERSION() AS v')
  const { rows: pgVersion } = await pgAdmin.query('SHOW server_version')
  process.stdout.write(`Synchronous mode (syncRate 0), one limit of a 60 s window over 1,000 keys, every hit allowed;
median decisions/s of ${ROUNDS} rounds of ${ROUND_MS / 1000} s, pools of ${POOL_SIZE} connections, ratio to the first row of each group.

| subject | in flight | decisions/s | ratio | queries/decision |
|---|---:|---:|---:|---:|
${rows.join('\n')}

${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores; load ${loadAtStart.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end),
${(version as Array<{ v: string }>)[0]?.v} and PostgreSQL ${pgVersion[0]?.server_version} on loopback.
`)
} finally {
  await mysqlAdmin.query(`DROP TABLE IF EXISTS \`${table}\``)
  await mysqlAdmin.end()
  await pgAdmin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await pgAdmin.end()
}
