/**
 * PostgreSQL benchmark: our periodic mode, our synchronous mode and rate-limiter-flexible's
 * RateLimiterPostgres, side by side in one run against the local server, at 1 and 256 decisions
 * in flight. Reports decisions per second (median of the rounds) and statements (round trips)
 * per decision.
 *
 *   node --import tsx bench/postgres.bench.ts              full run, rewrites docs/BENCHMARKS-postgres.md
 *   node --import tsx bench/postgres.bench.ts --quick      a smoke run in seconds, prints only
 *
 * Works in a schema of its own in the database of RL_BENCH_POSTGRES_URL
 * (default postgres://postgres@127.0.0.1:5432/test) and drops it at the end.
 */
import { randomUUID } from 'node:crypto'
import { writeFileSync } from 'node:fs'
import { cpus, loadavg } from 'node:os'
import { relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { RateLimiterPostgres } from 'rate-limiter-flexible'
import { RateLimiting } from '../src/core/rate-limiting.js'
import { PostgresStrategy } from '../src/strategies/postgres/index.js'
import { median } from './lib/harness.js'
import { log, measureDecisions } from './lib/stores.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const write = args.includes('--write') || (!quick && !args.includes('--no-write'))
const URL_ = process.env.RL_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const ROUNDS = quick ? 1 : 5
const ROUND_MS = quick ? 300 : 1500
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)
const IN_FLIGHT = [1, 256]
const POOL_SIZE = 10
const LIMIT = 1e9 // every hit allowed: this measures the cost of a decision, not of a refusal

type Decide = (key: string) => unknown

interface Subject {
  readonly name: string
  /** Check the clock every `batch` decisions (cheap local decisions need a large batch). */
  readonly batch: number
  readonly decide: Decide
  /** Store statements sent so far. */
  readonly statements: () => number
}

interface Made extends Subject {
  close(): Promise<void>
}

const admin = new pg.Pool({ connectionString: URL_, max: 2 })
const schema = `rl_bench_${randomUUID().replaceAll('-', '').slice(0, 10)}`
const rows: string[] = []

try {
  await admin.query(`CREATE SCHEMA "${schema}"`)
  const loadAtStart = loadavg()[0] as number

  // Each subject is built for its measurement and closed after it, so that no background work
  // (the periodic sync) runs during another subject's rounds.
  const setup = new PostgresStrategy({ pool: admin, schema })
  await setup.migrate()
  const pushes = (s: PostgresStrategy) => () => s.calls.push + s.calls.page + s.calls.window + s.calls.reset + s.calls.purge
  const ours = (name: string, syncRate: number, batch: number) => async (): Promise<Made> => {
    const pool = new pg.Pool({ connectionString: URL_, max: POOL_SIZE })
    const store = new PostgresStrategy({ pool, schema, purgeIntervalMs: 0 })
    const rl = RateLimiting.newInstance(`bench-pg-${syncRate}`)
    rl.new({ namespace: `ns-${syncRate}`, windowSizes: [60], syncRate, strategy: store })
    const limiter = rl.limiter({ namespace: `ns-${syncRate}`, limits: [{ limit: LIMIT, window: 60 }] })
    return {
      name,
      batch,
      decide: (key) => limiter.hit(key),
      statements: pushes(store),
      close: async () => {
        await rl.close()
        await store.close()
        await pool.end()
      },
    }
  }
  const flexible = async (): Promise<Made> => {
    // a pg Pool as storeClient; its statements are counted on the pool
    const pool = new pg.Pool({ connectionString: URL_, max: POOL_SIZE })
    let statements = 0
    const query = pool.query.bind(pool) as (...a: unknown[]) => unknown
    ;(pool as unknown as { query: (...a: unknown[]) => unknown }).query = (...a: unknown[]) => {
      statements++
      return query(...a)
    }
    const rlf = await new Promise<RateLimiterPostgres>((resolveReady, reject) => {
      const limiter: RateLimiterPostgres = new RateLimiterPostgres(
        {
          storeClient: pool,
          storeType: 'pool',
          schemaName: schema,
          tableName: 'rlflx',
          points: LIMIT,
          duration: 60,
          clearExpiredByTimeout: false,
        },
        (err?: Error) => (err ? reject(err) : resolveReady(limiter)),
      )
    })
    return {
      name: 'rate-limiter-flexible RateLimiterPostgres',
      batch: 1,
      decide: (key) => rlf.consume(key),
      statements: () => statements,
      close: () => pool.end(),
    }
  }

  for (const inFlight of IN_FLIGHT) {
    // the local mode alone, then the store-bound subjects with their rounds interleaved, so that
    // load drifting on this shared machine weighs on both alike
    const groups = [[ours('ours, periodic (syncRate 0.1 s)', 0.1, 256)], [ours('ours, synchronous (syncRate 0)', 0, 1), flexible]]
    for (const group of groups) {
      const subjects: Made[] = []
      for (const make of group) subjects.push(await make())
      const rates = subjects.map(() => [] as number[])
      const perDecision = subjects.map(() => [] as number[])
      // warm-up: connections, prepared statements, the keys' rows
      for (const subject of subjects) await measureDecisions(subject, KEYS, inFlight, quick ? 100 : 500)
      for (let r = 0; r < ROUNDS; r++) {
        for (const [i, subject] of subjects.entries()) {
          const before = subject.statements()
          const { decisions, seconds } = await measureDecisions(subject, KEYS, inFlight, ROUND_MS)
          rates[i]?.push(decisions / seconds)
          perDecision[i]?.push((subject.statements() - before) / decisions)
        }
      }
      for (const [i, subject] of subjects.entries()) {
        await subject.close()
        const rate = Math.round(median(rates[i] ?? [])).toLocaleString('en-US')
        const rt = median(perDecision[i] ?? [])
        log(`${subject.name}, ${inFlight} in flight: ${rate} decisions/s, ${rt.toPrecision(3)} statements/decision`)
        rows.push(`| ${subject.name} | ${inFlight} | ${rate} | ${rt < 0.001 ? rt.toExponential(1) : rt.toFixed(3)} |`)
      }
    }
  }

  const here = fileURLToPath(import.meta.url)
  const command = ['node', ...process.execArgv, relative(process.cwd(), here), ...args].join(' ')
  const { rows: version } = await admin.query('SHOW server_version')
  const text = `# Benchmarks: PostgreSQL

Decisions per second (median of ${ROUNDS} rounds of ${ROUND_MS / 1000} s) and store statements per
decision (each statement is one round trip), for one limit of a 60 s window over 1,000 keys,
every hit allowed. "In flight" is the number of decisions in progress at once (async workers in one
process; a decision returned synchronously, as periodic mode returns it, is used without an
\`await\`, as the adapters do). Each subject has a pool of ${POOL_SIZE} connections.

| subject | in flight | decisions/s | statements/decision |
|---|---:|---:|---:|
${rows.join('\n')}

- Periodic mode decides locally and sends one push statement per sync (every 100 ms) for the
  keys hit since: its statements per decision fall as the request rate grows.
- Synchronous mode sends exactly one statement per decision (the upsert and the read-back of the
  current and previous windows in one statement).
- RateLimiterPostgres sends one upsert per decision (a fixed window: one row per key).
- Both pay a commit (WAL flush) per statement. Ours does more in it: it writes this process's
  own row (keyed by node, for idempotency) and reads back the sums of the current and previous
  windows (the sliding window needs both), where RateLimiterPostgres adds to one fixed-window
  row. Expect our synchronous mode at or somewhat below RateLimiterPostgres on PostgreSQL; the
  periodic mode is the one to use there.
- The machine is shared with other work, so figures move by tens of percent between runs;
  compare rows of one run.

Run on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared
with other work: load average ${loadAtStart.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end), PostgreSQL ${version[0]?.server_version} on
loopback (the shared test server, fsync and synchronous_commit as configured).

Command:

    ${command}
`
  process.stdout.write(`${text}\n`)
  if (write) {
    const path = resolve(here, '..', '..', 'docs', 'BENCHMARKS-postgres.md')
    writeFileSync(path, text)
    log(`wrote ${relative(process.cwd(), path)}`)
  }
} finally {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await admin.end()
}
