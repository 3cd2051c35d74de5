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
 *   node --import tsx bench/postgres.bench.ts --statements only the statements one at a time, prints only
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
import { pushOneSql } from '../src/strategies/postgres/sql.js'
import { median } from './lib/harness.js'
import { type LoadedEngine, loadOurs } from './lib/load-ours.js'
import { interleavedRounds, log, type RoundSample } from './lib/stores.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
// only the table of one statement at a time (where a hit's time goes), 9 rounds; prints only
const statementsOnly = args.includes('--statements')
const write = args.includes('--write') || (!quick && !statementsOnly && !args.includes('--no-write'))
const URL_ = process.env.RL_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const ROUNDS = quick ? 1 : 7
const ROUND_MS = quick ? 300 : 1000
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)
const IN_FLIGHT = [1, 64, 256]
const POOL_SIZE = 10
const LIMIT = 1e9 // every hit allowed: this measures the cost of a decision, not of a refusal
const FLEX = 'rate-limiter-flexible RateLimiterPostgres'

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
    (name: string, syncRate: number, batch: number, e: Engine = current, synchronousCommit?: 'off') =>
    async (): Promise<Made> => {
      const pool = new pg.Pool({ connectionString: URL_, max: POOL_SIZE })
      const schemaOf = e === current ? schema : beforeSchema
      const store = new e.PostgresStrategy({ pool, schema: schemaOf, purgeIntervalMs: 0, ...(synchronousCommit && { synchronousCommit }) })
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
  const flexible =
    (asyncCommit = false) =>
    async (): Promise<Made> => {
      // a pg Pool as storeClient; its statements are counted on the pool. With asyncCommit, its
      // connections commit without waiting for the WAL flush (synchronous_commit = off for the
      // session: RateLimiterPostgres has no option of its own for it)
      const pool = new pg.Pool({ connectionString: URL_, max: POOL_SIZE, ...(asyncCommit && { options: '-c synchronous_commit=off' }) })
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
        name: asyncCommit ? `${FLEX}, synchronous_commit off` : FLEX,
        batch: 1,
        decide: (key) => rlf.consume(key),
        statements: () => statements,
        close: () => pool.end(),
      }
    }

  const SYNC = 'ours, synchronous (syncRate 0)'
  const SYNC_OFF = "ours, synchronous, synchronousCommit 'off'"
  const BEFORE = 'ours before this change, synchronous'
  const rateOf = (x: RoundSample) => x.decisions / x.seconds
  const ratios = (a: RoundSample[], b: RoundSample[]) => {
    const rounds = a.map((x, r) => rateOf(x) / rateOf(b[r] as RoundSample))
    const f = (v: number) => `${v.toFixed(2)}x`
    return `${f(median(a.map(rateOf)) / median(b.map(rateOf)))} | ${f(median(rounds))} | ${f(Math.min(...rounds))}-${f(Math.max(...rounds))}`
  }
  // [numerator, denominator] of the ratio rows, by subject name
  const compared: Array<[string, string]> = [
    [SYNC, FLEX],
    [SYNC_OFF, `${FLEX}, synchronous_commit off`],
    [SYNC_OFF, FLEX],
    [BEFORE, FLEX],
  ]
  for (const inFlight of statementsOnly ? [] : IN_FLIGHT) {
    // the local mode alone, then the store-bound subjects with their rounds interleaved, so that
    // load drifting on this shared machine weighs on all alike
    const store = [ours(SYNC, 0, 1), flexible(), ours(SYNC_OFF, 0, 1, current, 'off'), flexible(true)]
    if (previous !== undefined) store.push(ours(BEFORE, 0, 1, previous))
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
      const of = (name: string) => samples[subjects.findIndex((x) => x.name === name)]
      for (const [a, b] of compared) {
        const [mine, theirs] = [of(a), of(b)]
        if (mine !== undefined && theirs !== undefined) ratioRows.push(`| ${inFlight} | ${a} / ${b} | ${ratios(mine, theirs)} |`)
      }
    }
  }

  // One statement at a time on one connection, without the engines: where a synchronous hit's
  // time goes. Each statement with the server's synchronous_commit and on a session with it off.
  const commitRows: string[] = []
  // RateLimiterPostgres makes its table when first constructed: in the runs above, or here
  if (statementsOnly) await (await flexible()()).close()
  {
    const connect = async (options?: string) => {
      const client = new pg.Client({ connectionString: URL_, ...(options && { options }) })
      await client.connect()
      return client
    }
    const [on, off] = [await connect(), await connect('-c synchronous_commit=off')]
    const names = setup.names
    const flexTable = `"${schema}"."rlflx"`
    // RateLimiterPostgres's statement for consume(), as it sends it (named: prepared once)
    const flexText = `INSERT INTO ${flexTable} VALUES ($1, $2, $3) ON CONFLICT(key) DO UPDATE SET points = CASE WHEN (${flexTable}.expire <= $4 OR 1=0) THEN $2 ELSE ${flexTable}.points + ($2) END, expire = CASE WHEN ${flexTable}.expire <= $4 THEN $3 ELSE ${flexTable}.expire END RETURNING points, expire;`
    const start = Math.floor(Date.now() / 60_000) * 60_000
    let seq = 1e9
    const statements: Array<[string, (c: pg.Client, key: string) => Promise<unknown>]> = [
      ['a round trip: SELECT $1', (c, key) => c.query({ name: 'rt', text: 'SELECT $1::text', values: [key] })],
      [
        'RateLimiterPostgres: its upsert',
        (c, key) => c.query({ name: 'fx', text: flexText, values: [key, 1, Date.now() + 60_000, Date.now()] }),
      ],
      [
        "ours: the hit statement (upsert + the others' sum)",
        (c, key) =>
          c.query({
            name: 'hitw',
            text: pushOneSql(names, undefined, undefined, false),
            values: ['commit-cost', c === on ? 'on' : 'off', ++seq, key, 60_000, start, String(seq)],
          }),
      ],
      [
        "ours: the same and a read of the previous window (a key's first hit in a second)",
        (c, key) =>
          c.query({
            name: 'hit',
            text: pushOneSql(names),
            values: ['commit-cost', c === on ? 'on' : 'off', ++seq, key, 60_000, start, String(seq), key, 60_000, start - 60_000],
          }),
      ],
      [
        'ours before 2026-11-26: the hit statement with an empty read (every hit without one)',
        (c, key) =>
          c.query({
            name: 'hit',
            text: pushOneSql(names),
            values: ['commit-cost', c === on ? 'on' : 'off', ++seq, key, 60_000, start, String(seq), null, null, null],
          }),
      ],
    ]
    const subjects = statements.flatMap(([name, run]) =>
      [on, off].map((c) => ({ name, c, batch: 1, decide: (key: string) => run(c, key) })),
    )
    for (const subject of subjects) await interleavedRounds([subject], KEYS, 1, 1, quick ? 100 : 300)
    const samples = await interleavedRounds(subjects, KEYS, 1, quick ? 1 : statementsOnly ? 9 : 5, ROUND_MS)
    const us = (i: number) => median((samples[i] ?? []).map((x) => (x.seconds * 1e6) / x.decisions))
    for (const [i, [name]] of statements.entries()) {
      const [a, b] = [us(2 * i), us(2 * i + 1)]
      commitRows.push(`| ${name} | ${a.toFixed(0)} | ${b.toFixed(0)} | ${(a - b).toFixed(0)} |`)
      log(`${name}: ${a.toFixed(0)} µs, ${b.toFixed(0)} µs with synchronous_commit off`)
    }
    await Promise.all([on.end(), off.end()])
  }

  const here = fileURLToPath(import.meta.url)
  const command = ['node', ...process.execArgv, relative(process.cwd(), here), ...args].join(' ')
  const { rows: version } = await admin.query('SHOW server_version')
  const setting = async (name: string) => Object.values((await admin.query(`SHOW ${name}`)).rows[0] as object)[0] as string
  const [commitSetting, syncMethod] = [await setting('synchronous_commit'), await setting('wal_sync_method')]
  const text = `# Benchmarks: PostgreSQL

Decisions per second (median of ${ROUNDS} rounds of ${ROUND_MS / 1000} s) and store statements per
decision (each statement is one round trip), for one limit of a 60 s window over 1,000 keys,
every hit allowed. "In flight" is the number of decisions in progress at once (async workers in one
process; a decision returned synchronously, as periodic mode returns it, is used without an
\`await\`, as the adapters do). Each subject has a pool of ${POOL_SIZE} connections.

Synchronous mode against RateLimiterPostgres, same rounds ("synchronous_commit off": the
subject's transactions commit without waiting for the WAL flush; ours sets it per hit with the
option \`synchronousCommit: 'off'\`, RateLimiterPostgres, which has no such option, gets
connections with it off for the session):

| in flight | subjects | ratio of the medians | median of the per-round ratios | per-round ratios, range |
|---:|---|---:|---:|---:|
${ratioRows.join('\n')}

| subject | in flight | decisions/s | statements/decision | client CPU µs/decision |
|---|---:|---:|---:|---:|
${rows.join('\n')}

Where one synchronous hit's time goes: each store's statement alone, one at a time on one
connection, without either limiter (µs per statement, median of ${quick ? 1 : statementsOnly ? 9 : 5} rounds of ${ROUND_MS / 1000} s, same run):

| statement | server's synchronous_commit | synchronous_commit off | the commit's wait for the WAL flush |
|---|---:|---:|---:|
${commitRows.join('\n')}

- **At 1 in flight a hit is one statement and one commit, for both.** Each synchronous hit is a
  transaction, and its commit waits for the WAL to reach the disk (\`fdatasync\`): on this
  machine's shared virtual disk that wait is a large share of a hit's time for both stores
  (last table: about half on a quiet machine, nearly all of it under load). What is left is the
  statement itself and the client: ours does more in its one statement (an upsert of this
  process's own row and a primary-key range read for the others' sum, where theirs is one
  upsert of one row), which shows most with commits that do not wait (the two
  "synchronous_commit off" rows), and its client spends about as much CPU per decision (the
  engine, and the strategy's session with its checkout and statement deadlines). So at 1 in
  flight the two run close (0.86x to 1.00x in the runs recorded here), and no client work can
  win back more than the statement's difference.
- **Past the pool's connections, hits share statements.** A hit goes out alone, on its own
  statement, while the strategy has fewer statements running than the pool has connections; past
  that, hits wait in the strategy instead of in the pool's queue, and each connection that frees
  takes all of them (up to 128) in one statement (src/strategies/postgres/hits.ts): one commit,
  one WAL flush, for many hits (statements/decision below 1 at 64 and 256 in flight).
  RateLimiterPostgres sends one statement, and pays one commit, per decision.
- \`synchronousCommit: 'off'\` (an option, unset by default) sets \`synchronous_commit\` for
  the hits' own transactions, inside their one statement; the server's and the session's setting
  stay as they are. The cost is durability: a server crash loses the commits of its last moments
  (up to 3 × \`wal_writer_delay\`, 600 ms by default), which the live processes push again;
  docs/STORES-postgres.md, "Faults".
- Periodic mode decides locally and sends one push statement per sync (every 100 ms) for the
  keys hit since: its statements per decision fall as the request rate grows.
- The hit statement is prepared (named, planned once per connection); so is RateLimiterPostgres's
  upsert. The table leaves 30% of each page free (\`fillfactor = 70\`), so the rewrite of a row
  (count, seq: not indexed) stays on its page as a HOT update, without a new index entry; the
  primary key is the one index, the upsert's arbiter and the sums' range.
- **A hit that reads no other window sends a statement without the read** (most hits: a key's
  previous window is read with a hit about once a second). Before, every hit's statement carried
  the read, as an aggregate over NULL keys that PostgreSQL still plans and runs. One statement at
  a time with commits that do not wait (\`--statements\`: 9 rounds of 1 s; six runs on
  2026-11-26): 163 to 197 µs against 173 to 205 µs with the empty read, 6 to 21 µs less in every
  run; in the full run above, 187 against 183, within its noise. A hit's rate does not show it
  on this machine: the 1-in-flight rows put ours and the code before it at the same rate. The
  run recorded before this one (a quieter machine, against 1030d85) had 1.00x, 2.12x and 4.69x
  RateLimiterPostgres at 1, 64 and 256 in flight; this one 0.86x, 2.21x and 4.38x.
- **Another driver does not help at 1 in flight.** postgres.js (\`postgres\`, porsager's,
  which pipelines) against \`pg\`, the same statements prepared, one at a time on one connection
  (\`node --import tsx bench/postgres-drivers.bench.ts [--commit-off]\`, 9 rounds of 1,500,
  2026-11-26, load average 0.7 to 1.0): a bare round trip 116.8 µs against 70.8 (commits that do
  not wait) and 63.1; RateLimiterPostgres's upsert 172.7 against 147.9 and 279.5 against 263.4;
  our hit statement 184.8 against 159.1 and 306.5 against 282.2. postgres.js spends 21 to 41 µs
  more client CPU per statement, so \`pg\` stays the driver, and at 1 in flight the difference
  left is the statement's: ours 7 to 8% over RateLimiterPostgres's upsert through \`pg\` in both runs.
- Rows "before this change" run an earlier commit's code (\`--before\`, its own schema and
  table, migrated by that code), interleaved with the others in the same rounds.
- The machine is shared with other work, so figures move by tens of percent between runs;
  compare rows of one run.

Run on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared
with other work: load average ${loadAtStart.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end), PostgreSQL ${version[0]?.server_version} on
loopback (the shared test server: fsync on, synchronous_commit ${commitSetting}, wal_sync_method ${syncMethod}).

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
