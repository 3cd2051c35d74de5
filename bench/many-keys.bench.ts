/**
 * The many-keys shape of issue 28, target 2: a fleet of 4 engine processes (real child processes,
 * each with its own RateLimiting and RedisStrategy) shares one limit of 100 per 60 s over 10,000
 * keys, hit round robin at 4,000 decisions/s in all (1,000/s each, paced, about one decision per
 * event-loop turn as a server's requests arrive), every key far below its limit (24 hits a
 * minute). Redis is a redis-server of the bench's own on a free loopback port, so its INFO
 * commandstats count the fleet's commands alone.
 *
 * Rows: plain periodic sync at 0.1 s and 1 s, with one script call per hash slot
 * (`batchAcrossSlots: false`) and batched across slots (the default on one server); escrow
 * (`escrow: true`) at 0.1 s and 1 s, when the Redis store serves it (src/strategies/capabilities.ts).
 *
 * Per row: script calls (EVALSHA, EVAL, FCALL) and Redis commands (those a script runs included)
 * per decision, from INFO commandstats over the measured span; Redis CPU and the fleet's CPU per
 * decision; the decisions that waited on the store (`hit()` returned a Promise), p50 and p99 of
 * `hit()` (a synchronous answer as it returns, a Promise until it settles), and the denials
 * (none is due: every key stays far below its limit). Each repetition starts on an empty Redis
 * and new processes, measures after a warm-up, and the table shows the median of the repetitions.
 *
 * The measured span defaults to 60 s, one whole window: escrow grants a key's budget at its first
 * hit in each window and then decides locally until the window ends, so a span shorter than the
 * window measures wherever in the window it falls.
 *
 *   node --import tsx bench/many-keys.bench.ts                  every row, 3 repetitions of 12 s (escrow 70 s) + 60 s
 *   node --import tsx bench/many-keys.bench.ts --quick          every row once, 4 s + 6 s, prints only
 *   --rows periodic-0.1-slots,periodic-0.1-batched,periodic-1-slots,periodic-1-batched,escrow-0.1,escrow-1
 *   --repeats N (3), --warmup S (12), --escrow-warmup S (70), --duration S (60), --write (rewrites its section of docs/BENCHMARKS-escrow.md)
 */
import { type ChildProcess, fork } from 'node:child_process'
import { cpus, loadavg } from 'node:os'
import { relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Redis } from 'ioredis'
import { replaceSection } from './lib/report.js'

const PROCESSES = 4
const KEYS = 10_000
const RATE = 4_000 // decisions/s, the fleet's
const LIMIT = 100
const WINDOW_S = 60
const here = fileURLToPath(import.meta.url)

/** One row: how the fleet syncs. */
interface RowSpec {
  readonly id: string
  readonly label: string
  readonly syncRate: number
  readonly escrow: boolean
  readonly batchAcrossSlots: boolean
}

const ROWS: readonly RowSpec[] = [
  { id: 'periodic-0.1-slots', label: 'periodic, sync 0.1 s, a call per slot', syncRate: 0.1, escrow: false, batchAcrossSlots: false },
  { id: 'periodic-0.1-batched', label: 'periodic, sync 0.1 s, batchAcrossSlots', syncRate: 0.1, escrow: false, batchAcrossSlots: true },
  { id: 'periodic-1-slots', label: 'periodic, sync 1 s, a call per slot', syncRate: 1, escrow: false, batchAcrossSlots: false },
  { id: 'periodic-1-batched', label: 'periodic, sync 1 s, batchAcrossSlots', syncRate: 1, escrow: false, batchAcrossSlots: true },
  { id: 'escrow-0.1', label: 'escrow, sync 0.1 s (batchAcrossSlots)', syncRate: 0.1, escrow: true, batchAcrossSlots: true },
  { id: 'escrow-1', label: 'escrow, sync 1 s (batchAcrossSlots)', syncRate: 1, escrow: true, batchAcrossSlots: true },
]

/** What a child process runs. */
interface ChildConfig {
  readonly url: string
  readonly index: number
  readonly row: RowSpec
}

/** A child's counts so far. */
interface Counts {
  readonly decisions: number
  readonly allowed: number
  readonly denied: number
  /** hit() returned a Promise: the decision waited on the store. */
  readonly waited: number
  readonly errors: number
  /** This process's CPU time so far, µs. */
  readonly cpuUs: number
}

/** A child's answer to a read: its counts, and each decision's time (µs) since the last read. */
interface Reading extends Counts {
  readonly latenciesUs: number[]
}

type ToChild = { type: 'start' } | { type: 'read'; id: number } | { type: 'stop' }
type FromChild =
  { type: 'ready' } | { type: 'counts'; id: number; counts: Reading } | { type: 'closed' } | { type: 'failed'; error: string }

// ---- the child: one engine process of the fleet ----

async function child(config: ChildConfig): Promise<void> {
  const { RateLimiting } = await import('../src/core/rate-limiting.js')
  const { RedisStrategy } = await import('../src/strategies/redis/index.js')
  const { row, index } = config
  const send = (message: FromChild) => process.send?.(message)
  const strategy = new RedisStrategy({ url: config.url, prefix: 'many', batchAcrossSlots: row.batchAcrossSlots })
  const rl = RateLimiting.newInstance(`many-keys-${index}`)
  rl.new({ namespace: 'many', windowSizes: [WINDOW_S], syncRate: row.syncRate, strategy, ...(row.escrow ? { escrow: true } : {}) })
  const limiter = rl.limiter({ namespace: 'many', limits: [{ limit: LIMIT, window: WINDOW_S }] })
  const keys = Array.from({ length: KEYS }, (_, i) => `ip-${i}`)
  // the processes start a quarter of the keys apart: the fleet hits each key every 2.5 s
  let cursor = Math.floor((index * KEYS) / PROCESSES)
  const counts = { decisions: 0, allowed: 0, denied: 0, waited: 0, errors: 0 }
  // each decision's time, µs: a synchronous answer as it returns, a Promise until it settles
  let latenciesUs: number[] = []
  const rate = RATE / PROCESSES
  let running = false
  let started = 0
  const decided = (allowed: boolean) => {
    if (allowed) counts.allowed++
    else counts.denied++
  }
  const failed = () => counts.errors++
  // one tick per event-loop turn (a 1 ms timer): the decisions due by now, about one a turn
  const tick = () => {
    if (!running) return
    const due = Math.floor(((performance.now() - started) / 1000) * rate)
    while (counts.decisions < due) {
      const key = keys[cursor] as string
      cursor = cursor + 1 === KEYS ? 0 : cursor + 1
      counts.decisions++
      try {
        const t0 = performance.now()
        const decision = limiter.hit(key) as unknown
        if (decision instanceof Promise) {
          counts.waited++
          ;(decision as Promise<{ allowed: boolean }>).then((d) => {
            latenciesUs.push(Math.round((performance.now() - t0) * 10_000) / 10)
            decided(d.allowed)
          }, failed)
        } else {
          latenciesUs.push(Math.round((performance.now() - t0) * 10_000) / 10)
          decided((decision as { allowed: boolean }).allowed)
        }
      } catch {
        failed()
      }
    }
    setTimeout(tick, 1)
  }
  process.on('message', (message: ToChild) => {
    if (message.type === 'start') {
      running = true
      started = performance.now()
      tick()
    } else if (message.type === 'read') {
      const cpu = process.cpuUsage()
      send({ type: 'counts', id: message.id, counts: { ...counts, cpuUs: cpu.user + cpu.system, latenciesUs } })
      latenciesUs = []
    } else {
      running = false
      // the strategy was made here and is closed here: rl.close() leaves a given strategy open
      const closed = rl.close().then(() => strategy.close())
      closed.then(
        () => process.send?.({ type: 'closed' } satisfies FromChild, () => process.exit(0)),
        (err: unknown) => process.send?.({ type: 'failed', error: String(err) } satisfies FromChild, () => process.exit(1)),
      )
    }
  })
  send({ type: 'ready' })
}

// ---- the parent: the fleet, Redis and the figures ----

interface Fleet {
  start(): void
  read(): Promise<Reading>
  stop(): Promise<void>
}

async function startFleet(url: string, row: RowSpec): Promise<Fleet> {
  const children: ChildProcess[] = []
  let readId = 0
  const waitFor = <T extends FromChild>(c: ChildProcess, match: (m: FromChild) => m is T): Promise<T> =>
    new Promise((resolveMessage, reject) => {
      const onMessage = (m: FromChild) => {
        if (m.type === 'failed') return reject(new Error(m.error))
        if (!match(m)) return
        c.off('message', onMessage)
        c.off('exit', onExit)
        resolveMessage(m)
      }
      const onExit = (code: number | null) => reject(new Error(`a fleet process exited with ${code}`))
      c.on('message', onMessage)
      c.once('exit', onExit)
    })
  for (let index = 0; index < PROCESSES; index++) {
    const config: ChildConfig = { url, index, row }
    const c = fork(here, ['--child', JSON.stringify(config)], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    })
    children.push(c)
  }
  await Promise.all(children.map((c) => waitFor(c, (m): m is { type: 'ready' } => m.type === 'ready')))
  return {
    start: () => {
      for (const c of children) c.send({ type: 'start' } satisfies ToChild)
    },
    async read() {
      const id = ++readId
      const all = await Promise.all(
        children.map((c) => {
          const answer = waitFor(c, (m): m is { type: 'counts'; id: number; counts: Reading } => m.type === 'counts' && m.id === id)
          c.send({ type: 'read', id } satisfies ToChild)
          return answer
        }),
      )
      const sum = { decisions: 0, allowed: 0, denied: 0, waited: 0, errors: 0, cpuUs: 0 }
      for (const { counts } of all) for (const k of Object.keys(sum) as Array<keyof Counts>) sum[k] += counts[k]
      return { ...sum, latenciesUs: all.flatMap(({ counts }) => counts.latenciesUs) }
    },
    async stop() {
      await Promise.all(
        children.map(async (c) => {
          const closed = waitFor(c, (m): m is { type: 'closed' } => m.type === 'closed').catch(() => undefined)
          c.send({ type: 'stop' } satisfies ToChild)
          await closed
          if (c.exitCode === null) await new Promise((r) => c.once('exit', r))
        }),
      )
    },
  }
}

const SCRIPTS = new Set(['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'fcall_ro'])
// the bench's own reads and the clients' connection upkeep, not the fleet's work
const NOT_COUNTED = new Set([
  'info',
  'ping',
  'config|resetstat',
  'flushall',
  'client|setinfo',
  'client|setname',
  'hello',
  'select',
  'command',
])

interface RedisReading {
  readonly calls: Map<string, number>
  readonly cpuUs: number
}

async function readRedis(admin: Redis): Promise<RedisReading> {
  const text = await admin.info('all')
  const calls = new Map<string, number>()
  for (const m of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(m[1] as string, Number(m[2]))
  const number = (field: string) => Number(new RegExp(`^${field}:([\\d.]+)`, 'm').exec(text)?.[1] ?? 0)
  return { calls, cpuUs: (number('used_cpu_user') + number('used_cpu_sys')) * 1e6 }
}

/** One repetition of one row. */
interface Sample {
  readonly decisions: number
  readonly seconds: number
  readonly scripts: number
  readonly commands: number
  readonly byName: Map<string, number>
  readonly redisCpuUs: number
  readonly fleetCpuUs: number
  readonly waited: number
  readonly denied: number
  readonly errors: number
  /** hit()'s time over the measured span, every decision of the fleet, µs. */
  readonly p50Us: number
  readonly p99Us: number
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted.length === 0 ? Number.NaN : (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number)
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

async function measureRow(url: string, admin: Redis, row: RowSpec, warmupMs: number, durationMs: number): Promise<Sample> {
  await admin.flushall()
  const fleet = await startFleet(url, row)
  try {
    fleet.start()
    await sleep(warmupMs)
    const [c0, r0] = await Promise.all([fleet.read(), readRedis(admin)])
    const t0 = performance.now()
    await sleep(durationMs)
    const [c1, r1] = await Promise.all([fleet.read(), readRedis(admin)])
    const seconds = (performance.now() - t0) / 1000
    let scripts = 0
    let commands = 0
    const byName = new Map<string, number>()
    for (const [name, calls] of r1.calls) {
      const delta = calls - (r0.calls.get(name) ?? 0)
      if (delta <= 0 || NOT_COUNTED.has(name)) continue
      if (SCRIPTS.has(name)) scripts += delta
      commands += delta
      byName.set(name, delta)
    }
    return {
      decisions: c1.decisions - c0.decisions,
      seconds,
      scripts,
      commands,
      byName,
      redisCpuUs: r1.cpuUs - r0.cpuUs,
      fleetCpuUs: c1.cpuUs - c0.cpuUs,
      waited: c1.waited - c0.waited,
      denied: c1.denied - c0.denied,
      errors: c1.errors - c0.errors,
      // the first read emptied the children's lists: these are the measured span's
      ...(() => {
        const sorted = c1.latenciesUs.sort((a, b) => a - b)
        return { p50Us: quantile(sorted, 0.5), p99Us: quantile(sorted, 0.99) }
      })(),
    }
  } finally {
    await fleet.stop()
  }
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

const fmt = (v: number, digits = 3) => (Number.isFinite(v) ? v.toFixed(digits) : 'n/a')
const int = (v: number) => Math.round(v).toLocaleString('en-US')

/** Whether the Redis store serves escrow namespaces now (its capabilities and its method). */
async function redisServesEscrow(): Promise<boolean> {
  const { BUILT_IN_STORES } = await import('../src/strategies/capabilities.js')
  const { RedisStrategy } = await import('../src/strategies/redis/index.js')
  return BUILT_IN_STORES.redis.supportsEscrow && typeof (RedisStrategy.prototype as { escrow?: unknown }).escrow === 'function'
}

/** Heading of this bench's section of docs/BENCHMARKS-escrow.md. */
const SECTION_HEADING = '## Many keys, each far below its limit: a fleet of 4 on Redis'

async function main(): Promise<void> {
  const args = process.argv.slice(2)
  const text = (name: string) => {
    const at = args.indexOf(name)
    return at < 0 ? undefined : args[at + 1]
  }
  const quick = args.includes('--quick')
  const number = (name: string, fallback: number) => {
    const raw = text(name)
    const value = raw === undefined ? fallback : Number(raw)
    if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} takes a positive number, got ${raw}`)
    return value
  }
  const repeats = number('--repeats', quick ? 1 : 3)
  const warmupMs = number('--warmup', quick ? 4 : 12) * 1000
  // escrow's steady state needs a whole window of traffic before the measurement: a window's
  // grants are sized by the room the previous window's hits leave (a fleet that started mid-window
  // leaves more, and needs fewer grants in the next)
  const escrowWarmupMs = number('--escrow-warmup', quick ? 4 : WINDOW_S + 10) * 1000
  const durationMs = number('--duration', quick ? 6 : 60) * 1000
  const wanted = text('--rows')?.split(',')
  for (const id of wanted ?? [])
    if (!ROWS.some((r) => r.id === id)) throw new RangeError(`--rows: ${id} is not one of ${ROWS.map((r) => r.id).join(', ')}`)
  const rows = ROWS.filter((r) => wanted === undefined || wanted.includes(r.id))
  const write = args.includes('--write')
  const escrowServed = await redisServesEscrow()
  const { Redis } = await import('ioredis')
  const { startRedisServer } = await import('../test/support/redis-server.js')
  const server = await startRedisServer()
  const admin = new Redis(server.url)
  const loadAtStart = loadavg()[0] as number
  const log = (line: string) => process.stderr.write(`[many-keys] ${line}\n`)
  const results: Array<{ row: RowSpec; samples: Sample[] } | { row: RowSpec; unavailable: string }> = []
  try {
    for (const row of rows) {
      if (row.escrow && !escrowServed) {
        log(`${row.label}: not available (the Redis store does not serve escrow namespaces yet)`)
        results.push({
          row,
          unavailable: 'not available: the Redis store does not serve escrow namespaces (src/strategies/capabilities.ts)',
        })
        continue
      }
      const samples: Sample[] = []
      for (let r = 0; r < repeats; r++) {
        const s = await measureRow(server.url, admin, row, row.escrow ? escrowWarmupMs : warmupMs, durationMs)
        samples.push(s)
        const by = [...s.byName]
          .sort((a, b) => b[1] - a[1])
          .map(([n, c]) => `${n} ${fmt(c / s.decisions)}`)
          .join(', ')
        log(
          `${row.label}, repetition ${r + 1}: ${int(s.decisions / s.seconds)} decisions/s, ${fmt(s.scripts / s.decisions)} scripts and ${fmt(s.commands / s.decisions)} commands per decision (${by}); waited ${fmt((100 * s.waited) / s.decisions, 2)}%, hit() p50 ${fmt(s.p50Us, 1)} µs, p99 ${fmt(s.p99Us, 1)} µs, denied ${s.denied}, errors ${s.errors}`,
        )
      }
      results.push({ row, samples })
    }
  } finally {
    admin.disconnect()
    await server.stop()
  }
  const version = (await import('ioredis/package.json', { with: { type: 'json' } })).default.version
  const lines = [
    SECTION_HEADING,
    '',
    `${PROCESSES} engine processes (child processes, each with its own RateLimiting and RedisStrategy from a \`url\`) share a limit of ${LIMIT} per ${WINDOW_S} s over ${int(KEYS)} keys, hit round robin at ${int(RATE)} decisions/s in all (paced, about one decision per event-loop turn), each key ${(RATE / KEYS) * WINDOW_S} hits a minute: far below its limit. The issue's many-keys shape (issue 28, target 2: escrow at most 0.25 script calls and 1 Redis command per decision). Redis is a redis-server of the bench's own on loopback; INFO commandstats over the measured span count the fleet's commands alone. *Scripts* counts EVALSHA, EVAL and FCALL (round trips of the store's work); *commands* every command, those run inside scripts included (INFO, PING and connection upkeep left out). *Waited*: decisions whose \`hit()\` returned a Promise; *p50 / p99*: one \`hit()\`'s time over every decision of the fleet, a synchronous answer as it returns, a Promise until it settles. Each repetition starts on an empty Redis with new processes, ${warmupMs / 1000} s of warm-up (escrow: ${escrowWarmupMs / 1000} s, so that a whole window of traffic precedes the measurement, as in steady state), then ${durationMs / 1000} s measured${durationMs >= WINDOW_S * 1000 ? " (a whole window: escrow grants at a key's first hit in each window)" : ''}; medians of ${repeats}.`,
    '',
    '| mode | decisions/s | script calls per decision | Redis commands per decision | waited on the store | hit() p50 µs | hit() p99 µs | denied | Redis CPU µs per decision | fleet CPU µs per decision | commands by name, per decision |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |',
  ]
  for (const result of results) {
    if ('unavailable' in result) {
      lines.push(`| ${result.row.label} | ${result.unavailable} | | | | | | | | | |`)
      continue
    }
    const s = result.samples
    const per = (f: (x: Sample) => number) => median(s.map((x) => f(x) / x.decisions))
    const names = new Set(s.flatMap((x) => [...x.byName.keys()]))
    const byName = [...names]
      .map((n): [string, number] => [n, per((x) => x.byName.get(n) ?? 0)])
      .sort((a, b) => b[1] - a[1])
      .filter(([, v]) => v >= 0.0005)
      .map(([n, v]) => `${n.toUpperCase()} ${fmt(v)}`)
      .join(', ')
    lines.push(
      `| ${result.row.label} | ${int(median(s.map((x) => x.decisions / x.seconds)))} | ${fmt(per((x) => x.scripts))} | ${fmt(per((x) => x.commands))} | ${fmt(100 * per((x) => x.waited), 2)}% | ${fmt(median(s.map((x) => x.p50Us)), 1)} | ${fmt(median(s.map((x) => x.p99Us)), 1)} | ${int(median(s.map((x) => x.denied)))} | ${fmt(
        per((x) => x.redisCpuUs),
        1,
      )} | ${fmt(
        per((x) => x.fleetCpuUs),
        1,
      )} | ${byName} |`,
    )
  }
  const escrowRows = results.filter((r) => r.row.escrow && 'samples' in r) as Array<{ row: RowSpec; samples: Sample[] }>
  lines.push('')
  for (const { row, samples } of escrowRows) {
    const scripts = median(samples.map((x) => x.scripts / x.decisions))
    const commands = median(samples.map((x) => x.commands / x.decisions))
    const met = scripts <= 0.25 && commands <= 1
    lines.push(
      `- ${row.label}: target at most 0.25 script calls and 1 Redis command per decision: ${met ? 'met' : '**not met**'} (${fmt(scripts)} and ${fmt(commands)}).`,
    )
  }
  if (escrowRows.length === 0 && rows.some((r) => r.escrow))
    lines.push('- Escrow rows: not available when this ran (the Redis store did not serve escrow namespaces).')
  const command = ['node', ...process.execArgv, relative(process.cwd(), here), ...args].join(' ')
  lines.push(
    '',
    `Run on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared with other work: load average ${loadAtStart.toFixed(1)} at the start, ${(loadavg()[0] as number).toFixed(1)} at the end), ioredis ${version}. Command: \`${command}\`.`,
  )
  const section = lines.join('\n')
  process.stdout.write(`${section}\n`)
  if (write) {
    const path = resolve(here, '..', '..', 'docs', 'BENCHMARKS-escrow.md')
    writeSection(path, section)
    log(`wrote ${relative(process.cwd(), path)}`)
  }
}

/** Replaces this bench's section of `file` (or appends it), keeping every other section. */
function writeSection(file: string, section: string): void {
  replaceSection(file, SECTION_HEADING, section, '# Benchmarks: escrow\n')
}

const at = process.argv.indexOf('--child')
if (at >= 0) await child(JSON.parse(process.argv[at + 1] as string) as ChildConfig)
else await main()
