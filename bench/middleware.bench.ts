/**
 * Middleware overhead: the same Express 5 app with express-rate-limit's default MemoryStore, with
 * our RateLimitingStore (local, and periodically synced through a MemoryStrategy), with our own
 * middleware, and with no limiter at all. The apps run in a child process (compiled by
 * TypeScript from src/, as users run the package); autocannon, as a library, loads them in turn
 * from this process, several rounds in rotated order, and the table reports medians.
 *
 *   node --import tsx bench/middleware.bench.ts            full run, rewrites docs/BENCHMARKS-middleware.md
 *   node --import tsx bench/middleware.bench.ts --quick    1 round of 1 s per app, prints only
 *
 * Options: --rounds N (default 5), --duration S (seconds per measurement, default 3),
 * --connections N (default 50), --write / --no-write.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { cpus, loadavg, tmpdir } from 'node:os'
import { dirname, join, relative, resolve } from 'node:path'
import { createInterface } from 'node:readline'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type { RequestHandler } from 'express'
import type * as ExpressAdapter from '../src/adapters/express.js'
import type * as Ours from '../src/index.js'

const here = fileURLToPath(import.meta.url)
const root = resolve(dirname(here), '..')
const args = process.argv.slice(2)

// Every request comes from 127.0.0.1: one hot key, and a limit nobody reaches, so every
// request is counted and allowed and the figures are the cost of counting.
const LIMIT = 1_000_000_000
const WINDOW_MS = 60_000

const SUBJECTS = [
  { id: 'none', label: 'Express alone (no limiter)' },
  { id: 'erl-memory', label: 'express-rate-limit, default MemoryStore' },
  { id: 'erl-ours', label: 'express-rate-limit, RateLimitingStore (local)' },
  { id: 'erl-ours-synced', label: 'express-rate-limit, RateLimitingStore (MemoryStrategy, syncRate 0.1 s)' },
  { id: 'ours', label: 'createExpressMiddleware (local)' },
] as const

type SubjectId = (typeof SUBJECTS)[number]['id']

function option(name: string, fallback: number): number {
  const at = args.indexOf(name)
  if (at < 0) return fallback
  const value = Number(args[at + 1])
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} takes a positive number, got ${String(args[at + 1])}`)
  return value
}

/** Compiles src/ with the build's options into a temporary directory (no type check), like bench/lib/load-ours.ts. */
async function compileSource(): Promise<{ dir: string; cleanup: () => void }> {
  const ts = (await import('typescript')).default
  const configPath = join(root, 'tsconfig.build.json')
  const parsed = ts.getParsedCommandLineOfConfigFile(configPath, {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => undefined })
  if (parsed === undefined) throw new Error('tsconfig.build.json could not be read')
  const options = { ...parsed.options, module: ts.ModuleKind.ESNext, moduleResolution: ts.ModuleResolutionKind.Bundler, sourceMap: false }
  const dir = mkdtempSync(join(tmpdir(), 'ratelimiting-mw-bench-'))
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }))
  symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'), 'dir')
  const walk = (from: string): string[] =>
    readdirSync(from, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(from, e.name)) : [join(from, e.name)]))
  for (const file of walk(join(root, 'src')).filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))) {
    const out = join(dir, 'src', relative(join(root, 'src'), file)).replace(/\.ts$/, '.js')
    mkdirSync(dirname(out), { recursive: true })
    writeFileSync(out, ts.transpileModule(readFileSync(file, 'utf8'), { compilerOptions: options, fileName: file }).outputText)
  }
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) }
}

/** The child: starts one app per subject on loopback and prints their ports as one JSON line. */
async function serve(): Promise<void> {
  const { dir, cleanup } = await compileSource()
  const lib = (path: string) => import(pathToFileURL(join(dir, 'src', path)).href)
  const { MemoryStrategy } = (await lib('index.js')) as typeof Ours
  const { RateLimitingStore, createExpressMiddleware } = (await lib('adapters/express.js')) as typeof ExpressAdapter
  const express = (await import('express')).default
  const { rateLimit } = await import('express-rate-limit')
  const limiters: Record<SubjectId, RequestHandler | undefined> = {
    none: undefined,
    'erl-memory': rateLimit({ windowMs: WINDOW_MS, limit: LIMIT, standardHeaders: 'draft-8' }),
    'erl-ours': rateLimit({ windowMs: WINDOW_MS, limit: LIMIT, standardHeaders: 'draft-8', store: new RateLimitingStore() }),
    'erl-ours-synced': rateLimit({
      windowMs: WINDOW_MS,
      limit: LIMIT,
      standardHeaders: 'draft-8',
      store: new RateLimitingStore({ strategy: new MemoryStrategy(), syncRate: 0.1 }),
    }),
    ours: createExpressMiddleware({ limit: LIMIT, windowMs: WINDOW_MS, headers: 'draft-8' }),
  }
  const micro = await measureStoreCalls(
    {
      MemoryStore: (await import('express-rate-limit')).MemoryStore as unknown as new () => ExpressStore,
      RateLimitingStore: RateLimitingStore as unknown as new () => ExpressStore,
    },
    Number(process.env.BENCH_ROUNDS ?? 5),
  )
  const ports: Record<string, number> = {}
  const servers: Server[] = []
  for (const { id } of SUBJECTS) {
    const app = express()
    const limiter = limiters[id]
    if (limiter !== undefined) app.use(limiter)
    app.get('/', (_req, res) => {
      res.send('ok')
    })
    const server = app.listen(0, '127.0.0.1')
    await once(server, 'listening')
    servers.push(server)
    ports[id] = (server.address() as AddressInfo).port
  }
  process.stdout.write(`${JSON.stringify({ ports, micro })}\n`)
  // the parent closes our stdin when it is done (or dies)
  process.stdin.resume()
  await once(process.stdin, 'end')
  for (const server of servers) {
    server.closeAllConnections()
    server.close()
  }
  cleanup()
}

/** ns per `increment` call of a store alone, awaited when it answers a Promise (as express-rate-limit does). */
type StoreCalls = Record<'erl-memory' | 'erl-ours', Record<'1 key' | '10,000 keys', number>>

async function measureStoreCalls(
  ctors: { MemoryStore: new () => ExpressStore; RateLimitingStore: new () => ExpressStore },
  rounds: number,
): Promise<StoreCalls> {
  const calls = 200_000
  const patterns = { '1 key': ['127.0.0.1'], '10,000 keys': Array.from({ length: 10_000 }, (_, i) => `10.0.${i >> 8}.${i & 255}`) }
  const result = { 'erl-memory': {}, 'erl-ours': {} } as StoreCalls
  for (const [id, Ctor] of [
    ['erl-memory', ctors.MemoryStore],
    ['erl-ours', ctors.RateLimitingStore],
  ] as const) {
    for (const [pattern, keys] of Object.entries(patterns) as [keyof StoreCalls['erl-memory'], string[]][]) {
      const samples: number[] = []
      for (let round = 0; round <= rounds; round++) {
        const store = new Ctor()
        store.init({ windowMs: WINDOW_MS, limit: LIMIT })
        let sink: unknown
        const t0 = process.hrtime.bigint()
        for (let i = 0; i < calls; i++) {
          const r = store.increment(keys[i % keys.length] as string)
          sink = r instanceof Promise ? await r : r
        }
        const ns = Number(process.hrtime.bigint() - t0) / calls
        if (sink === undefined) throw new Error('no result')
        if (round > 0) samples.push(ns) // round 0 warms up
        await store.shutdown?.()
      }
      result[id][pattern] = median(samples)
    }
  }
  return result
}

interface ExpressStore {
  init(options: { windowMs: number; limit: number }): void
  increment(key: string): unknown
  shutdown?(): unknown
}

interface Sample {
  readonly rps: number
  readonly p50: number
  readonly p99: number
  readonly non2xx: number
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

async function startServers(rounds: number): Promise<{ child: ChildProcess; ports: Record<SubjectId, number>; micro: StoreCalls }> {
  const child = spawn(process.execPath, [...process.execArgv, here, '--serve'], {
    stdio: ['pipe', 'pipe', 'inherit'],
    env: { ...process.env, BENCH_ROUNDS: String(rounds) },
  })
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })
  const [line] = (await Promise.race([
    once(lines, 'line'),
    once(child, 'exit').then(([code]) => {
      throw new Error(`the app process exited with ${String(code)} before listening`)
    }),
  ])) as [string]
  return { child, ...(JSON.parse(line) as { ports: Record<SubjectId, number>; micro: StoreCalls }) }
}

async function measure(): Promise<void> {
  const quick = args.includes('--quick')
  const rounds = option('--rounds', quick ? 1 : 5)
  const duration = option('--duration', quick ? 1 : 3)
  const connections = option('--connections', 50)
  const write = args.includes('--no-write') ? false : args.includes('--write') || !quick
  const autocannon = (await import('autocannon')).default
  const log = (line: string) => process.stderr.write(`[bench] ${line}\n`)
  const loadAtStart = loadavg()[0] as number
  log('measuring store calls alone, then starting the apps')
  const { child, ports, micro } = await startServers(rounds)
  const samples = new Map<SubjectId, Sample[]>(SUBJECTS.map((s) => [s.id, []]))
  const ratios = new Map<SubjectId, number[]>(SUBJECTS.map((s) => [s.id, []]))
  try {
    for (const { id } of SUBJECTS) await autocannon({ url: `http://127.0.0.1:${ports[id]}/`, connections, duration: 1 }) // warm-up
    for (let round = 0; round < rounds; round++) {
      // rotate the order so no subject always runs first (or right after the same neighbour)
      const order = SUBJECTS.map((_, i) => SUBJECTS[(i + round) % SUBJECTS.length] as (typeof SUBJECTS)[number])
      const roundRps = new Map<SubjectId, number>()
      for (const { id, label } of order) {
        const r = await autocannon({ url: `http://127.0.0.1:${ports[id]}/`, connections, duration })
        const sample = { rps: r.requests.average, p50: r.latency.p50, p99: r.latency.p99, non2xx: r.non2xx + r.errors }
        samples.get(id)?.push(sample)
        roundRps.set(id, sample.rps)
        log(`round ${round + 1}/${rounds} ${label}: ${Math.round(sample.rps)} req/s, p50 ${sample.p50} ms, p99 ${sample.p99} ms`)
      }
      // the ratio within a round cancels most of the drift of a shared machine's load
      const base = roundRps.get('erl-memory') as number
      for (const { id } of SUBJECTS) ratios.get(id)?.push((roundRps.get(id) as number) / base)
    }
  } finally {
    child.stdin?.end()
    await once(child, 'exit')
  }
  const rows = SUBJECTS.map(({ id, label }) => {
    const list = samples.get(id) ?? []
    const rps = median(list.map((s) => s.rps))
    const range = `${Math.round(Math.min(...list.map((s) => s.rps)))}–${Math.round(Math.max(...list.map((s) => s.rps)))}`
    const vs = `${median(ratios.get(id) ?? []).toFixed(2)}×`
    const failed = list.reduce((n, s) => n + s.non2xx, 0)
    return `| ${label} | ${Math.round(rps)} | ${range} | ${median(list.map((s) => s.p50))} | ${median(list.map((s) => s.p99))} | ${vs} |${failed > 0 ? ` ${failed} non-2xx |` : ''}`
  })
  const command = ['node', ...process.execArgv, relative(process.cwd(), here) || here, ...args].join(' ')
  const table = [
    '| App | req/s (median) | req/s (min–max) | p50 latency (ms) | p99 latency (ms) | vs MemoryStore (median of per-round ratios) |',
    '| --- | ---: | ---: | ---: | ---: | ---: |',
    ...rows,
  ].join('\n')
  const ns = (v: number) => v.toFixed(0)
  const microTable = [
    '| Store | ns per `increment`, 1 key | ns per `increment`, 10,000 keys |',
    '| --- | ---: | ---: |',
    `| express-rate-limit MemoryStore (async, awaited) | ${ns(micro['erl-memory']['1 key'])} | ${ns(micro['erl-memory']['10,000 keys'])} |`,
    `| RateLimitingStore, local (synchronous) | ${ns(micro['erl-ours']['1 key'])} | ${ns(micro['erl-ours']['10,000 keys'])} |`,
  ].join('\n')
  process.stdout.write(`${table}\n\n${microTable}\n`)
  if (!write) return
  const cpu = cpus()[0]?.model.trim() ?? 'unknown CPU'
  const doc = `# Middleware benchmark

The cost of rate limiting an Express app: the same Express 5 app (one \`GET /\` answering
\`ok\`) with express-rate-limit's default \`MemoryStore\`, with our \`RateLimitingStore\` in its
place (one changed option), with our store synced through a \`MemoryStrategy\` every 0.1 s, with
our own \`createExpressMiddleware\`, and with no limiter at all.

- Every request comes from 127.0.0.1, so all of them hit one key; the limit (${LIMIT.toLocaleString('en-US')} per
  minute) is never reached, so every request is counted and allowed. The draft-8 headers are on.
- The req/s column is the median over rounds; the ratio column is the median of each round's
  ratio to the MemoryStore app measured in the same round, which cancels most of the drift of
  a shared machine's load.
- The apps run in a child process, compiled by TypeScript from \`src/\` as the package ships;
  autocannon runs as a library in the parent process: ${connections} connections, no pipelining,
  ${duration} s per measurement after a 1 s warm-up, ${rounds} rounds in rotated order. The table
  shows medians over the rounds.

${table}

The store call alone, in the app process before the apps start (200,000 calls per round, the
median of ${rounds} rounds after one warm-up round; express-rate-limit awaits every \`increment\`):

${microTable}

Provisional (shared machine): measured ${new Date().toISOString().slice(0, 10)} on ${cpu} (${cpus().length} cores, shared with other work: load average
${loadAtStart.toFixed(2)} at the start, ${(loadavg()[0] as number).toFixed(2)} at the end), Node ${process.version}, express ${await version('express')},
express-rate-limit ${await version('express-rate-limit')}. The min–max column shows how far single rounds
moved on this machine: read the per-round ratio, not the absolute req/s, and treat differences
of about 10% or less between the limited apps as noise. The store-call table is the steadier
measure of what the store itself costs.

Reproduce:

\`\`\`sh
${command}
\`\`\`
`
  writeFileSync(join(root, 'docs', 'BENCHMARKS-middleware.md'), doc)
  log(`wrote docs/BENCHMARKS-middleware.md`)
}

async function version(pkg: string): Promise<string> {
  return (JSON.parse(readFileSync(join(root, 'node_modules', pkg, 'package.json'), 'utf8')) as { version: string }).version
}

if (args.includes('--serve')) await serve()
else await measure()
