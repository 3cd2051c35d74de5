/**
 * PostgreSQL benchmark: our periodic mode, our synchronous mode and rate-limiter-flexible's
 * RateLimiterPostgres, side by side in one run against the local server, at 1, 64 and 256
 * decisions in flight, the rounds of the store-bound subjects interleaved (A B, B A, ...).
 * Reports decisions per second (medians of the rounds, and the median of the per-round ratios)
 * and statements (round trips) per decision. Our engine is loaded as users run it (src/ compiled
 * by TypeScript, bench/lib/load-ours.ts), not through tsx.
 *
 *   node --import tsx bench/postgres.bench.ts              full run, rewrites docs/BENCHMARKS-postgres.md
 *   node --import tsx bench/postgres.bench.ts --quick      a smoke run in seconds, prints only
 *   --before=<dir>   adds our synchronous mode built from another copy of src/ (in a schema and
 *                    table its own code migrates), such as the last commit's:
 *                    mkdir -p .tmp/before && git archive HEAD src | tar -x -C .tmp/before; then
 *                    --before=.tmp/before/src
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
import type { PostgresStrategy as PostgresStrategyClass } from '../src/strategies/postgres/index.js'
import { median } from './lib/harness.js'
import { type LoadedEngine, loadOurs } from './lib/load-ours.js'
import { interleavedRounds, log, type RoundSample } from './lib/stores.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const write = args.includes('--write') || (!quick && !args.includes('--no-write'))
const URL_ = process.env.RL_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const ROUNDS = quick ? 1 : 7
const ROUND_MS = quick ? 300 : 1000
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)
const IN_FLIGHT = [1, 64, 256]
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

interface Engine {
  readonly RateLimiting: LoadedEngine['ours']['RateLimiting']
  readonly PostgresStrategy: typeof PostgresStrategyClass
}
const loadEngine = async (e: LoadedEngine): Promise<Engine> => ({
  RateLimiting: e.ours.RateLimiting,
  PostgresStrategy: (await e.load<{ PostgresStrategy: typeof PostgresStrategyClass }>('strategies/postgres/index.ts')).PostgresStrategy,
})
const engine = await loadOurs('build')
const beforeDir = args.find((a) => a.startsWith('--before='))?.slice('--before='.length)
const beforeEngine = beforeDir === undefined ? undefined : await loadOurs('build', resolve(beforeDir))
const current = await loadEngine(engine)
const previous = beforeEngine === undefined ? undefined : await loadEngine(beforeEngine)

const admin = new pg.Pool({ connectionString: URL_, max: 2 })
const schema = `rl_bench_${randomUUID().replaceAll('-', '').slice(0, 10)}`
const beforeSchema = `${schema}_before`
const rows: string[] = []
const ratioRows: string[] = []

try {
  await admin.query(`CREATE SCHEMA "${schema}"`)
  const loadAtStart = loadavg()[0] as number
  const { PostgresStrategy } = current

  // Each subject is built for its measurement and closed after it, so that no background work
  // (the periodic sync) runs during another subject's rounds.
  const setup = new PostgresStrategy({ pool: admin, schema })
  await setup.migrate()
  if (previous !== undefined) await new previous.PostgresStrategy({ pool: admin, schema: beforeSchema }).migrate()
  const pushes = (s: PostgresStrategyClass) => () => s.calls.push + s.calls.page + s.calls.window + s.calls.reset + s.calls.purge
  const ours =
    (name: string, syncRate: number, batch: number, e: Engine = current) =>
    async (): Promise<Made> => {
      const pool = new pg.Pool({ connectionString: URL_, max: POOL_SIZE })
      const store = new e.PostgresStrategy({ pool, schema: e === current ? schema : beforeSchema, purgeIntervalMs: 0 })
      const rl = e.RateLimiting.newInstance(`bench-pg-${syncRate}-${name}`)
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

  const SYNC = 'ours, synchronous (syncRate 0)'
  const rateOf = (x: RoundSample) => x.decisions / x.seconds
  const ratios = (a: RoundSample[], b: RoundSample[]) => {
    const rounds = a.map((x, r) => rateOf(x) / rateOf(b[r] as RoundSample))
    const f = (v: number) => `${v.toFixed(2)}x`
    return `${f(median(a.map(rateOf)) / median(b.map(rateOf)))} | ${f(median(rounds))} | ${f(Math.min(...rounds))}-${f(Math.max(...rounds))}`
  }
  for (const inFlight of IN_FLIGHT) {
    // the local mode alone, then the store-bound subjects with their rounds interleaved, so that
    // load drifting on this shared machine weighs on both alike
    const store = [ours(SYNC, 0, 1), flexible]
    if (previous !== undefined) store.push(ours('ours before this change, synchronous', 0, 1, previous))
    const groups = inFlight === 64 ? [store] : [[ours('ours, periodic (syncRate 0.1 s)', 0.1, 256)], store]
    for (const group of groups) {
      const subjects: Made[] = []
      for (const make of group) subjects.push(await make())
      // warm-up: connections, prepared statements, the keys' rows
      for (const subject of subjects) await interleavedRounds([subject], KEYS, inFlight, 1, quick ? 100 : 500)
      const samples = await interleavedRounds(subjects, KEYS, inFlight, ROUNDS, ROUND_MS, async (subject) => ({
        statements: subject.statements(),
      }))
      for (const [i, subject] of subjects.entries()) {
        await subject.close()
        const mine = samples[i] ?? []
        const rate = Math.round(median(mine.map(rateOf))).toLocaleString('en-US')
        const rt = median(mine.map((x) => (x.counters.statements ?? 0) / x.decisions))
        const cpu = median(mine.map((x) => x.cpuUs / x.decisions))
        log(`${subject.name}, ${inFlight} in flight: ${rate} decisions/s, ${rt.toPrecision(3)} statements/decision`)
        rows.push(`| ${subject.name} | ${inFlight} | ${rate} | ${rt < 0.001 ? rt.toExponential(1) : rt.toFixed(3)} | ${cpu.toFixed(1)} |`)
      }
      if (subjects.length > 1) {
        const [mine, theirs, old] = samples as [RoundSample[], RoundSample[], RoundSample[] | undefined]
        ratioRows.push(`| ${inFlight} | ${ratios(mine, theirs)} |${old === undefined ? '' : ` ${ratios(old, theirs)} |`}`)
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

Synchronous mode against RateLimiterPostgres, same rounds:

| in flight | ours / RateLimiterPostgres: ratio of the medians | median of the per-round ratios | per-round ratios, range |${previous === undefined ? '' : ' before this change / RateLimiterPostgres: ratio of the medians | median of the per-round ratios | per-round ratios, range |'}
|---:|---:|---:|---:|${previous === undefined ? '' : '---:|---:|---:|'}
${ratioRows.join('\n')}

| subject | in flight | decisions/s | statements/decision | client CPU µs/decision |
|---|---:|---:|---:|---:|
${rows.join('\n')}

- Periodic mode decides locally and sends one push statement per sync (every 100 ms) for the
  keys hit since: its statements per decision fall as the request rate grows.
- Synchronous mode sends exactly one statement per decision: a prepared statement of scalar
  parameters for the one window a hit writes and the one it may read back (the previous window,
  at most once a second per key), instead of the general push's arrays and \`generate_subscripts\`:
  an upsert of this process's own row and two primary-key lookups for the sums. The table leaves
  30% of each page free (\`fillfactor = 70\`), so the rewrite of a row (count, seq: not indexed)
  stays on its page as a HOT update, without a new index entry.
- RateLimiterPostgres sends one upsert per decision (a fixed window: one row per key), unnamed
  (parsed and planned every time).
- Both pay a commit (WAL flush) per statement, which bounds both at 64 and 256 in flight with
  pools of 10 connections. Ours does more in it: it writes this process's own row (keyed by node,
  for idempotency) and reads back the sums of the current and previous windows (the sliding
  window needs both), and each decision also costs the engine's and pg's client work (see the
  client CPU column). Periodic mode is the one to use on PostgreSQL.
- Rows "before this change" run the previous commit's code (\`--before\`, its own schema and
  table, migrated by that code), interleaved with the others in the same rounds.
- The machine is shared with other work, so figures move by tens of percent between runs;
  compare rows of one run.

Run on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared
with other work: load average ${loadAtStart.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end), PostgreSQL ${version[0]?.server_version} on
loopback (the shared test server, fsync and synchronous_commit as configured).

Command:

    ${command}
${beforeDir === undefined ? '' : `\nThe rows "before this change" run the code in \`${beforeDir}\`, made with \`git archive <commit> src\` (see the bench's header).\n`}`
  process.stdout.write(`${text}\n`)
  if (write) {
    const path = resolve(here, '..', '..', 'docs', 'BENCHMARKS-postgres.md')
    writeFileSync(path, text)
    log(`wrote ${relative(process.cwd(), path)}`)
  }
} finally {
  await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`)
  await admin.query(`DROP SCHEMA IF EXISTS "${beforeSchema}" CASCADE`)
  await admin.end()
  engine.cleanup()
  beforeEngine?.cleanup()
}
