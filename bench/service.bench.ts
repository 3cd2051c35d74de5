/**
 * Service benchmark: `ratelimiting serve` on its built-in default config (memory store,
 * sliding-window-algo, 100 per 60 s) against a bare node:http server answering 200, driven by
 * autocannon in the same run. Rounds alternate between the two; the table reports medians of
 * requests per second and p99 latency, and the service's share of the bare server's throughput.
 *
 *   npm run build && node --import tsx bench/service.bench.ts             full run, writes docs/BENCHMARKS-service.md
 *   node --import tsx bench/service.bench.ts --quick                      short rounds, prints only
 *
 * Options: --quick, --rounds N, --duration S (seconds per round), --connections N, --algos
 * (also time fixed-window-algo and sliding-window-counter-algo), --redis (instead, time
 * fixed-window-algo and sliding-window-algo on a redis-server of the bench's own, and
 * redis-benchmark running an EVALSHA of each one's script over as many connections: the floor
 * Redis itself sets), --source (run the service from src/ through tsx instead of dist/),
 * --write / --no-write (--redis writes its own section of docs/BENCHMARKS-service.md),
 * --before DIR (with --redis: also the service of another checkout, both settings, in the same
 * rounds; make it with `git worktree add .tmp/before-svc <commit>`, then in it `npm ci && npm run
 * build`), --off-only (with --redis: only the rows with remember-denials off).
 *
 * Each server runs in its own process; autocannon runs in this one. Requests cycle through 1,000
 * user ids, so the service keeps real per-user state (most are admitted, some denied: a 429 is a
 * decision like a 200).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'
import { FIXED_WINDOW_CHECK, SLIDING_LOG_CHECK } from '../src/algorithms/lua.js'
import { freePort } from '../src/testing/tcp-proxy.js'
import { type RedisProcess, startRedisProcess } from './lib/service-process.js'

const args = process.argv.slice(2)
const flag = (name: string) => args.includes(name)
function option(name: string, fallback: number): number {
  const at = args.indexOf(name)
  if (at < 0) return fallback
  const value = Number(args[at + 1])
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} takes a positive number, got ${String(args[at + 1])}`)
  return value
}

const quick = flag('--quick')
const rounds = option('--rounds', quick ? 1 : 5)
const durationSec = option('--duration', quick ? 2 : 8)
const connections = option('--connections', 50)
const write = flag('--no-write') ? false : flag('--write') || !quick
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const builtCli = path.join(root, 'dist/server/cli.js')
const fromSource = flag('--source') || !existsSync(builtCli)
// --before DIR: also run the service of another checkout (DIR/dist/server/cli.js, built), with
// its Redis algorithms' defaults, in the same rounds, to compare a change with the code before it
const beforeAt = args.indexOf('--before')
const beforeCli = beforeAt < 0 ? undefined : path.resolve(args[beforeAt + 1] ?? '', 'dist/server/cli.js')
if (beforeCli !== undefined && !existsSync(beforeCli)) throw new Error(`--before: no ${beforeCli} (build that checkout first)`)

const log = (line: string) => process.stderr.write(`[bench] ${line}\n`)

async function waitForHealth(url: string): Promise<void> {
  const deadline = Date.now() + 15_000
  for (;;) {
    try {
      if ((await fetch(url)).ok) return
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${url} did not answer within 15 s`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

interface Target {
  readonly name: string
  readonly port: number
  readonly child: ChildProcess
}

const BARE_SERVER = `
const http = require('node:http')
const body = '{"allowed":true}'
http.createServer((req, res) => {
  req.resume()
  req.on('end', () => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
    res.end(body)
  })
}).listen(Number(process.argv[1]), '127.0.0.1')
`

// A node:http server shaped as the service's answer, without deciding: it reads the body as the
// service does (chunks, JSON.parse) and answers its headers (two RateLimit fields) and a JSON body
// of the same fields. Between the bare server and this one is what the answer's shape costs;
// between this one and the service, the service's own work.
const SHAPED_SERVER = `
const http = require('node:http')
http.createServer((req, res) => {
  const chunks = []
  req.on('data', (c) => chunks.push(c))
  req.on('end', () => {
    const text = Buffer.concat(chunks).toString('utf8')
    const input = text === '' ? {} : JSON.parse(text)
    const body = JSON.stringify({ allowed: true, count: 1, limit: 100, remaining: 99, resetMs: 55063, retryAfterMs: 0, reason: 'limit' })
    const headers = ['RateLimit-Policy', '"default";q=100;w=60', 'RateLimit', '"default";r=99;t=' + String(input.userId).length]
    res.writeHead(200, [...headers, 'content-type', 'application/json', 'content-length', String(body.length)])
    res.end(body)
  })
}).listen(Number(process.argv[1]), '127.0.0.1')
`

/** Starts `source` (a node:http server taking its port as its argument) in a process of its own. */
async function startFloor(name: string, source: string): Promise<Target> {
  const port = await freePort()
  const child = spawn(process.execPath, ['-e', source, String(port)], { stdio: 'ignore' })
  await waitForHealth(`http://127.0.0.1:${port}/`)
  return { name, port, child }
}

async function startService(algo: string | undefined, redisUrl?: string, rememberDenials = true, otherCli?: string): Promise<Target> {
  const port = await freePort()
  const cli = otherCli !== undefined ? [otherCli] : fromSource ? ['--import', 'tsx', path.join(root, 'src/server/cli.ts')] : [builtCli]
  const serveArgs = ['serve', '--port', String(port), '--log-level', 'warn']
  if (algo !== undefined) {
    const file = path.join(tmpdir(), `rl-bench-${process.pid}-${algo}.yaml`)
    const store =
      redisUrl === undefined
        ? '{ type: memory }'
        : `{ type: redis, url: '${redisUrl}'${rememberDenials ? '' : ', remember-denials: false'} }`
    writeFileSync(file, `rate-limiter: { use-algo: ${algo}, max-requests: 100, window-size: 60 }\nstore: ${store}\n`)
    serveArgs.push('--config', file, '--no-watch')
  }
  const child = spawn(process.execPath, [...cli, ...serveArgs], { cwd: root, stdio: ['ignore', 'ignore', 'inherit'] })
  await waitForHealth(`http://127.0.0.1:${port}/healthz`)
  const name =
    algo === undefined
      ? 'service (default config)'
      : `service (${algo}${redisUrl === undefined ? '' : `, Redis${rememberDenials ? '' : ', remember-denials: false'}`}${otherCli === undefined ? '' : ', before'})`
  return { name, port, child }
}

/** What redis-benchmark measured: requests per second and p99 latency, ms. */
interface Floor {
  readonly name: string
  readonly rps: number[]
  readonly p99: number[]
}

// redis-benchmark running the service's script of `algo` by EVALSHA, with the arguments the
// service sends, over `connections` connections and 1,000 user keys: what Redis alone can do.
function redisBenchmark(redis: RedisProcess, algo: string, sha: string, seconds: number): { rps: number; p99: number } {
  const windowIndex = String(Math.floor(Date.now() / 60_000))
  const call =
    algo === 'fixed-window-algo'
      ? [sha, '1', `bench:fw:user-__rand_int__:${windowIndex}`, '1', '100', '60', 's', '1', '0']
      : [sha, '1', `bench:log:user-__rand_int__`, String(Date.now()), '60000', '100', '1', 'm-__rand_int__', '0']
  // about `seconds` of work at the rate the service reaches; -r draws the user (and member) ids
  const requests = String(Math.round(40_000 * seconds))
  const out = execFileSync(
    'redis-benchmark',
    ['-p', String(redis.port), '-c', String(connections), '-n', requests, '-r', '1000', '--csv', 'evalsha', ...call],
    { encoding: 'utf8' },
  )
  // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
  const fields = (out.trim().split('\n').pop() ?? '').split(',').map((f) => f.replaceAll('"', ''))
  return { rps: Number(fields[1]), p99: Number(fields[6]) }
}

// 1,000 users, each request a prepared object: autocannon runs no JavaScript per request
const requests = Array.from({ length: 1000 }, (_, i) => ({
  method: 'POST' as const,
  path: '/v1/check',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ userId: `user-${i}` }),
}))

/** CPU time (user + system) a process used so far, ms; undefined off Linux. */
function cpuMs(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined
  try {
    const fields = (readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1] ?? '').split(' ')
    // utime and stime, in USER_HZ ticks (100 per second on Linux)
    return (Number(fields[11]) + Number(fields[12])) * 10
  } catch {
    return undefined
  }
}

interface Sample {
  readonly rps: number
  /** The server's CPU time per answered request, µs (NaN when unknown). */
  readonly cpuUs: number
  readonly p99: number
  readonly p50: number
  readonly errors: number
  readonly decided: number
  readonly other: number
  /** Script calls Redis ran per answered request (NaN without Redis). */
  readonly scriptsPerRequest: number
}

/** Script calls (EVALSHA and EVAL) the bench's redis-server has run so far; NaN without one. */
function scriptCalls(): number {
  if (redis === undefined) return Number.NaN
  const stats = execFileSync('redis-cli', ['-p', String(redis.port), 'info', 'commandstats'], { encoding: 'utf8' })
  let calls = 0
  for (const m of stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(m[1])
  return calls
}

async function load(target: Target, seconds: number): Promise<Sample> {
  const cpuBefore = cpuMs(target.child.pid)
  const scriptsBefore = scriptCalls()
  const result = await autocannon({ url: `http://127.0.0.1:${target.port}`, connections, duration: seconds, requests })
  const status = result.statusCodeStats ?? {}
  const decided = (status['200']?.count ?? 0) + (status['429']?.count ?? 0)
  const total = Object.values(status).reduce((sum, s) => sum + (s?.count ?? 0), 0)
  const cpuAfter = cpuMs(target.child.pid)
  const cpuUs = cpuBefore === undefined || cpuAfter === undefined ? Number.NaN : ((cpuAfter - cpuBefore) * 1000) / Math.max(1, total)
  const scriptsPerRequest = (scriptCalls() - scriptsBefore) / Math.max(1, total)
  return {
    scriptsPerRequest,
    rps: result.requests.average,
    cpuUs,
    p99: result.latency.p99,
    p50: result.latency.p50,
    errors: result.errors,
    decided,
    other: total - decided,
  }
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

async function stop(target: Target): Promise<void> {
  if (target.child.exitCode !== null) return
  const exited = new Promise((r) => target.child.once('exit', r))
  target.child.kill('SIGTERM')
  await exited
}

const onRedis = flag('--redis')
const algos: Array<string | undefined> = onRedis
  ? ['fixed-window-algo', 'sliding-window-algo']
  : [undefined, ...(flag('--algos') ? ['fixed-window-algo', 'sliding-window-counter-algo'] : [])]
const redis = onRedis ? await startRedisProcess() : undefined
const floors: Floor[] = []
const loadAtStart = loadavg()[0] as number
const started = Date.now()
log(`${rounds} round(s) of ${durationSec} s, ${connections} connections, service from ${fromSource ? 'src/ (tsx)' : 'dist/'}`)

const bare = await startFloor('bare node:http', BARE_SERVER)
const shaped = await startFloor("node:http shaped as the service's answer", SHAPED_SERVER)
const services: Target[] = []
for (const algo of algos) {
  // on Redis: every decision a script call first (the floors compare with it), then the default
  if (redis !== undefined) services.push(await startService(algo, redis.url, false))
  if (redis === undefined || !flag('--off-only')) services.push(await startService(algo, redis?.url))
  if (redis !== undefined && beforeCli !== undefined) {
    services.push(await startService(algo, redis.url, false, beforeCli))
    if (!flag('--off-only')) services.push(await startService(algo, redis.url, true, beforeCli))
  }
}
const targets = [bare, shaped, ...services]
const samples = new Map<Target, Sample[]>(targets.map((t) => [t, []]))
try {
  // warm-up: JIT and connection setup, not measured
  for (const t of targets) await load(t, quick ? 1 : 2)
  for (let round = 0; round < rounds; round++) {
    // alternate the order so neither side always runs on a warmer (or busier) machine
    const order = round % 2 === 0 ? targets : [...targets].reverse()
    for (const t of order) {
      const s = await load(t, durationSec)
      samples.get(t)?.push(s)
      log(`round ${round + 1}: ${t.name}: ${Math.round(s.rps)} req/s, p99 ${s.p99} ms, errors ${s.errors}, non-200/429 ${s.other}`)
    }
    if (redis !== undefined) {
      // the floor Redis sets, in the same rounds (the services are idle meanwhile)
      for (const [algo, script] of [
        ['fixed-window-algo', FIXED_WINDOW_CHECK],
        ['sliding-window-algo', SLIDING_LOG_CHECK],
      ] as const) {
        let floor = floors.find((f) => f.name === algo)
        if (floor === undefined) {
          execFileSync('redis-cli', ['-p', String(redis.port), 'script', 'load', script.source])
          floor = { name: algo, rps: [], p99: [] }
          floors.push(floor)
        }
        const r = redisBenchmark(redis, algo, script.sha, durationSec)
        floor.rps.push(r.rps)
        floor.p99.push(r.p99)
        log(`round ${round + 1}: redis-benchmark EVALSHA (${algo}): ${Math.round(r.rps)} req/s, p99 ${r.p99} ms`)
      }
    }
  }
} finally {
  for (const t of targets) await stop(t)
  await redis?.stop()
}

const bareSamples = samples.get(bare) ?? []
const bareRps = median(bareSamples.map((s) => s.rps))
const bareCpu = median(bareSamples.map((s) => s.cpuUs))
const rows = targets.map((t) => {
  const list = samples.get(t) ?? []
  const rps = median(list.map((s) => s.rps))
  const cpuUs = median(list.map((s) => s.cpuUs))
  return {
    name: t.name,
    rps,
    // each round's ratio to the bare server's sample of the same round: the load of a shared
    // machine moves both, so this is steadier than a ratio of medians
    roundRatio: median(list.map((s, i) => s.rps / (bareSamples[i]?.rps ?? Number.NaN))),
    ratio: rps / bareRps,
    cpuUs,
    cpuRatio: bareCpu / cpuUs,
    p50: median(list.map((s) => s.p50)),
    p99: median(list.map((s) => s.p99)),
    errors: list.reduce((sum, s) => sum + s.errors + s.other, 0),
    scripts: median(list.map((s) => s.scriptsPerRequest)),
  }
})
const pct = (x: number) => (Number.isFinite(x) ? `${(x * 100).toFixed(0)}%` : 'n/a')
const floorRows = floors.map((f) => {
  const service = rows.find((r) => r.name.includes(f.name))
  const rps = median(f.rps)
  return `| redis-benchmark, EVALSHA of ${f.name}'s script | ${Math.round(rps).toLocaleString('en-US')} | ${pct(rps / bareRps)} | ${service === undefined ? 'n/a' : pct(service.rps / rps)} | ${median(f.p99)} ms |`
})

// with --before: each service against the same service built before, round by round
const beforeRows = rows.flatMap((row, i) => {
  const target = targets[i] as Target
  if (!row.name.endsWith(', before)')) return []
  const mine = targets.find((t) => t.name === row.name.replace(', before)', ')'))
  const theirs = samples.get(target) ?? []
  const ours = mine === undefined ? [] : (samples.get(mine) ?? [])
  if (ours.length === 0) return []
  const ratios = ours.map((s, r) => s.rps / (theirs[r]?.rps ?? Number.NaN))
  const cpu = ours.map((s, r) => s.cpuUs / (theirs[r]?.cpuUs ?? Number.NaN))
  const range = `${Math.min(...ratios).toFixed(2)}x to ${Math.max(...ratios).toFixed(2)}x`
  return [`| ${mine?.name ?? ''} | ${median(ratios).toFixed(2)}x | ${range} | ${median(cpu).toFixed(2)}x |`]
})

const command = ['node', ...process.execArgv, path.relative(root, fileURLToPath(import.meta.url)), ...args].join(' ')
const heading = onRedis
  ? '## Service on Redis: `ratelimiting serve` against a bare node:http server and redis-benchmark'
  : '## Service: `ratelimiting serve` against a bare node:http server'
const what = onRedis
  ? `The service runs fixed-window-algo and sliding-window-algo (the exact sliding log), 100 per 60 s, on a redis-server of the bench's own (no persistence), and answers \`POST /v1/check\` for 1,000 user ids in turn (200 or 429, both decisions). With \`remember-denials: false\` each decision goes to Redis, the checks of one event-loop turn in one script call (docs/SERVICE.md, "One call for many requests"); by default the service answers a user Redis denied without Redis while the denial holds (docs/SERVICE.md, "Denials answered locally"), and the last column shows how many requests still reach Redis. The bare server reads the body and answers 200 with a small JSON body; the shaped one also parses it and answers the service's headers and a body of its fields, without deciding. The second floor is redis-benchmark (C, ${connections} connections, \`-r 1000\` user ids) running an EVALSHA of the same script with the service's arguments, between the rounds.${beforeCli === undefined ? '' : ` The rows "before" run the service built in another checkout (\`--before DIR\`), in the same rounds.`}`
  : "The service runs its built-in default config (memory store, sliding-window-algo, 100 per 60 s) and answers `POST /v1/check` for 1,000 user ids in turn (200 or 429, both decisions); the bare server reads the body and answers 200 with a small JSON body; the shaped one also parses it and answers the service's headers and a body of its fields, without deciding."
const redisNotes = [
  'The checks of one event-loop turn leave as one script call (src/algorithms/script-batch.ts; docs/SERVICE.md, "One call for',
  'many requests"): about 10 per call here (0.095 script calls per request with remember-denials off). Before, every check was',
  'a call of its own, their socket writes held to the end of the turn (WriteHold, src/strategies/redis/scripts.ts). Without',
  'HTTP, `node --import tsx bench/redis-batch.bench.ts --before=.tmp/before/src --in-flight 1,64` (the algorithms alone, 64',
  'checks in flight as 64 connections make, every check reaching Redis; before = c7e43e1) measured 1.71x the checks per second',
  'for the fixed window and 1.32x for the sliding log, with the client CPU per check down from 7.43 to 4.88 µs and from 12.39',
  "to 7.62 µs, and Redis's from 6.66 to 4.11 µs and from 15.47 to 11.48 µs; at 1 in flight 0.96x and 0.95x, within the noise",
  '(a lone check is the plain script, sent when it was before).',
  '',
  "In the service the saving is a part of a request's CPU, and this shared machine's noise is as large as the gain. The last",
  'table pairs each round of a service with the same service built before batching (c7e43e1), so that both see the same load.',
  'A run of the remember-denials-off rows alone (`... --off-only --rounds 9 --duration 3`) gave the fixed window 1.15x the',
  'requests per second of the code before (per-round ratios 0.85x to 1.59x) at 0.83x the CPU per request, and the sliding log',
  '1.00x (0.88x to 1.18x) at 0.98x: its checks cost Redis more (11.5 µs each batched, against 4.1 for the fixed window, in the',
  'bench without HTTP), and a request more of everything else. With the default remember-denials on, most requests here are',
  '429s answered without Redis, and batching changes less.',
  '',
  'The shaped server measures what the answer costs without any deciding: the same headers and JSON body, the request parsed.',
  'Between it and the bare server is HTTP work any service that answers with RateLimit headers and a JSON body pays; between',
  "it and the service, the service's own work, Redis's included.",
  '',
  'Denials answered locally (`store.remember-denials`, on by default, docs/SERVICE.md): a user Redis denied is answered by the',
  'service itself while the denial holds. Here every user goes over its limit within seconds of each minute. In the run that',
  'introduced them (before batching), the fixed window sent 0.48 script calls per request and the sliding log 0.11, and the',
  "service's share of the bare server rose from 58% to 62% and from 50% to 58%. A 429 answered locally still costs its HTTP",
  "work, most of a request's CPU here; the saving is mostly Redis's: a user who keeps trying while denied costs the Redis that",
  'every instance shares no call until the denial ends.',
  '',
  'What bounds the share: the CPU column. The bare server spends its CPU per request on HTTP alone; the service also parses and',
  'validates the JSON body, decides, sends the check to Redis through ioredis and reads its answer, writes two RateLimit headers',
  'and a JSON answer, and redis-server runs the script on the same two cores. Under `perf record -g` during this load (fixed',
  "window, remember-denials on, batched), ioredis, the algorithm and the batching are about 8% of the service's samples; writing the",
  "response (node's http, the socket's writev) is 25% and parsing the request 11%, work the bare server does too, for a",
  'smaller answer. The share of the bare server follows the share of its CPU per request, and is lowest on a quiet machine,',
  'where the bare server runs fastest (a run under load, average 5.9, once gave the fixed window 78%).',
  '',
]
const lines = [
  heading,
  '',
  `Measured ${new Date().toISOString().slice(0, 10)} on ${cpus()[0]?.model.trim() ?? 'an unknown CPU'} (${cpus().length} cores, shared), Node ${process.version}; load average ${loadAtStart.toFixed(2)} at start, ${(loadavg()[0] as number).toFixed(2)} at the end.`,
  `autocannon (as a library, in the bench process), ${connections} connections, ${rounds} rounds of ${durationSec} s after a warm-up, rounds alternating between the servers; each server in its own process. Medians over the rounds.`,
  what,
  '',
  `| server | req/s (median) | share of bare (medians) | share of bare (per round, median) | server CPU per request | share of bare (CPU) | p50 latency | p99 latency | errors |${onRedis ? ' Redis script calls per request |' : ''}`,
  `|---|---:|---:|---:|---:|---:|---:|---:|---:|${onRedis ? '---:|' : ''}`,
  ...rows.map(
    (r) =>
      `| ${r.name} | ${Math.round(r.rps).toLocaleString('en-US')} | ${pct(r.ratio)} | ${pct(r.roundRatio)} | ${Number.isFinite(r.cpuUs) ? `${r.cpuUs.toFixed(1)} µs` : 'n/a'} | ${pct(r.cpuRatio)} | ${r.p50} ms | ${r.p99} ms | ${r.errors} |${onRedis ? ` ${r.scripts.toFixed(3)} |` : ''}`,
  ),
  '',
  ...(floorRows.length === 0
    ? []
    : [
        '| floor | req/s (median) | share of bare | the service / this floor | p99 latency |',
        '|---|---:|---:|---:|---:|',
        ...floorRows,
        '',
      ]),
  ...(beforeRows.length === 0
    ? []
    : [
        '| this checkout against before, same rounds | req/s, median of per-round ratios | per-round ratios, range | CPU per request, median of per-round ratios |',
        '|---|---:|---:|---:|',
        ...beforeRows,
        '',
      ]),
  ...(onRedis ? redisNotes : []),
  "Target: at least 70% of the bare server's requests per second. The per-round share pairs each service round with the bare",
  "server's round next to it; the CPU share is the bare server's CPU time per request over the service's (both from /proc), which",
  'the load of other processes on a shared machine disturbs least.',
  '',
  `Reproduce with \`npm run build && ${command}\`.`,
  '',
]
const section = lines.join('\n')
process.stdout.write(`${section}\n`)
log(`done in ${((Date.now() - started) / 1000).toFixed(0)} s`)
if (write) {
  // each mode rewrites its own section and keeps the other's
  const file = path.join(root, 'docs/BENCHMARKS-service.md')
  const old = existsSync(file) ? readFileSync(file, 'utf8') : ''
  const sections = old.split(/^(?=## )/m).filter((part) => part.startsWith('## ') && !part.startsWith(heading))
  const ordered = onRedis ? [...sections, section] : [section, ...sections]
  writeFileSync(file, `# Benchmarks: the service\n\n${ordered.map((part) => part.trimEnd()).join('\n\n')}\n`)
  log(`wrote ${path.relative(process.cwd(), file)}`)
}
