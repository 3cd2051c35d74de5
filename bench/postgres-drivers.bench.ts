/**
 * Issue 14 asked, for synchronous hits at 1 in flight on PostgreSQL: if the `pg` driver is the
 * bound, would `postgres` (porsager's postgres.js, which pipelines) be a faster driver for a user
 * to pass? This times the same statements, one at a time on one connection, through each driver:
 * a round trip (`SELECT $1`), RateLimiterPostgres's upsert, and our hit statement (the one a hit
 * that reads no other window sends). Both drivers prepare them (pg: named; postgres.js:
 * `prepare: true`). Rounds rotate the subjects; medians of rounds: wall µs and this process's CPU
 * µs per statement. Prints only (docs/BENCHMARKS-postgres.md cites it).
 *
 *   node --import tsx bench/postgres-drivers.bench.ts [--commit-off] [--rounds N] [--statements N]
 *
 * `--commit-off` runs every session with synchronous_commit off, so that the commit's wait for
 * the WAL flush, the same for every subject, does not hide what the drivers differ by.
 */
import { cpus, loadavg } from 'node:os'
import pg from 'pg'
import postgres from 'postgres'
import { RateLimiterPostgres } from 'rate-limiter-flexible'
import { newNodeId } from '../src/core/namespace.js'
import { PostgresStrategy } from '../src/strategies/postgres/index.js'
import { pushOneSql } from '../src/strategies/postgres/sql.js'
import { median, positiveIntOption } from './lib/harness.js'

const args = process.argv.slice(2)
const commitOff = args.includes('--commit-off')
const ROUNDS = positiveIntOption(args, '--rounds', 9)
const STATEMENTS = positiveIntOption(args, '--statements', 1500)
const URL_ = process.env.RL_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const schema = `rl_bench_drivers_${process.pid}`
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)

const admin = new pg.Pool({ connectionString: URL_, max: 2 })
const pgClient = new pg.Client({ connectionString: URL_, ...(commitOff && { options: '-c synchronous_commit=off' }) })
const sql = postgres(URL_, { max: 1, onnotice: () => {}, ...(commitOff && { connection: { synchronous_commit: 'off' } }) })

try {
  const setup = new PostgresStrategy({ pool: admin, schema, purgeIntervalMs: 0 })
  await setup.migrate()
  // RateLimiterPostgres makes its table when constructed
  await new Promise<void>((resolveReady, reject) => {
    const made = new RateLimiterPostgres(
      {
        storeClient: admin,
        storeType: 'pool',
        schemaName: schema,
        tableName: 'rlflx',
        points: 1e9,
        duration: 60,
        clearExpiredByTimeout: false,
      },
      (err?: Error) => (err ? reject(err) : resolveReady()),
    )
    void made
  })
  await pgClient.connect()

  // the statements as each library sends them
  const flexTable = `"${schema}"."rlflx"`
  const flexText = `INSERT INTO ${flexTable} VALUES ($1, $2, $3) ON CONFLICT(key) DO UPDATE SET points = CASE WHEN (${flexTable}.expire <= $4 OR 1=0) THEN $2 ELSE ${flexTable}.points + ($2) END, expire = CASE WHEN ${flexTable}.expire <= $4 THEN $3 ELSE ${flexTable}.expire END RETURNING points, expire;`
  const hitText = pushOneSql(setup.names, undefined, undefined, false)
  const nodeId = newNodeId()
  const start = Math.floor(Date.now() / 60_000) * 60_000
  let seq = 0
  const hitValues = (key: string) => ['drivers', nodeId, ++seq, key, 60_000, start, String(seq)]
  const flexValues = (key: string) => [key, 1, Date.now() + 60_000, Date.now()]

  const subjects: Array<[string, (key: string) => Promise<unknown>]> = [
    ['pg: a round trip, SELECT $1', (key) => pgClient.query({ name: 'rt', text: 'SELECT $1::text', values: [key] })],
    ['postgres.js: a round trip, SELECT $1', (key) => sql.unsafe('SELECT $1::text', [key], { prepare: true })],
    ['pg: RateLimiterPostgres upsert', (key) => pgClient.query({ name: 'fx', text: flexText, values: flexValues(key) })],
    ['postgres.js: RateLimiterPostgres upsert', (key) => sql.unsafe(flexText, flexValues(key), { prepare: true })],
    ['pg: our hit statement', (key) => pgClient.query({ name: 'hit', text: hitText, values: hitValues(key) })],
    ['postgres.js: our hit statement', (key) => sql.unsafe(hitText, hitValues(key), { prepare: true })],
  ]
  const load = loadavg()[0] as number
  for (const [, run] of subjects) for (let i = 0; i < 300; i++) await run(KEYS[i % KEYS.length] as string) // warm-up
  const wall = subjects.map((): number[] => [])
  const cpu = subjects.map((): number[] => [])
  for (let r = 0; r < ROUNDS; r++) {
    for (let j = 0; j < subjects.length; j++) {
      const s = (j + r) % subjects.length
      const run = (subjects[s] as [string, (key: string) => Promise<unknown>])[1]
      const cpuBefore = process.cpuUsage()
      const began = performance.now()
      for (let i = 0; i < STATEMENTS; i++) await run(KEYS[i % KEYS.length] as string)
      ;(wall[s] as number[]).push(((performance.now() - began) * 1000) / STATEMENTS)
      const used = process.cpuUsage(cpuBefore)
      ;(cpu[s] as number[]).push((used.user + used.system) / STATEMENTS)
    }
  }
  console.log(`| statement, one at a time (synchronous_commit ${commitOff ? 'off' : "the server's"}) | wall µs | client CPU µs |`)
  console.log('|---|---:|---:|')
  for (const [i, [name]] of subjects.entries()) {
    console.log(`| ${name} | ${median(wall[i] as number[]).toFixed(1)} | ${median(cpu[i] as number[]).toFixed(1)} |`)
  }
  console.log(
    `\n${ROUNDS} rounds of ${STATEMENTS} statements per subject, order rotated per round; medians. ${cpus().length} cores (${cpus()[0]?.model.trim() ?? 'unknown'}), load average ${load.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end; Node ${process.version}.`,
  )
} finally {
  await sql.end()
  await pgClient.end().catch(() => {})
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await admin.end()
}
