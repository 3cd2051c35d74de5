/**
 * What another instance pays for the runtime overrides' refresh (docs/BENCHMARKS-service.md,
 * "Runtime overrides: refresh cost"): 100,000 runtime overrides on a redis-server of the bench's
 * own, instance A answering about 14 PUT /v1/overrides per second for 20 s, instance B (the one
 * measured) polling them every second (`overrides-refresh: 1`, the default) while it answers a
 * few hundred POST /v1/check per second. Reports B's CPU time over the window, its check latency
 * (p50, p99, max), how long a PUT on A takes to apply on B, and what Redis sent.
 *
 *   node --import tsx bench/overrides-refresh.bench.ts
 *   node --import tsx bench/overrides-refresh.bench.ts --src /tmp/ovr-before/src    another checkout's src/
 *
 * Options: --src DIR (the service's sources, run through tsx: default this checkout's src/),
 * --overrides N (100000), --puts R (PUTs per second on A, 14), --checks R (checks per second on
 * B, 300), --duration S (20), --label TEXT (the row's name).
 *
 * Both services run from source through tsx, each in its own process, so a "before" run and an
 * "after" run differ in their code only. The overrides are written into Redis as the service
 * keeps them (one HASH, `<prefix>!overrides`, and its `#version`), as an upgraded fleet finds them.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { cpus, loadavg, tmpdir } from 'node:os'
import path from 'node:path'
import { Redis } from 'ioredis'
import { freePort } from '../src/testing/tcp-proxy.js'
import { root, startRedisProcess } from './lib/service-process.js'

const args = process.argv.slice(2)
function option(name: string, fallback: number): number {
  const at = args.indexOf(name)
  if (at < 0) return fallback
  const value = Number(args[at + 1])
  if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} takes a positive number, got ${String(args[at + 1])}`)
  return value
}
function text(name: string, fallback: string): string {
  const at = args.indexOf(name)
  return at < 0 ? fallback : String(args[at + 1])
}

const OVERRIDES = option('--overrides', 100_000)
const PUTS_PER_S = option('--puts', 14)
const CHECKS_PER_S = option('--checks', 300)
const DURATION_S = option('--duration', 20)
const SRC = path.resolve(text('--src', path.join(root, 'src')))
const LABEL = text('--label', SRC === path.join(root, 'src') ? 'this checkout' : SRC)
const PREFIX = 'bench:ovr'
const log = (line: string) => process.stderr.write(`[bench] ${line}\n`)

/** User + system CPU time of a process so far, ms (from /proc). */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the command
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100
}

interface Service {
  readonly url: string
  readonly pid: number
  readonly child: ChildProcess
  readonly dir: string
}

async function startService(yaml: string, name: string): Promise<Service> {
  const port = await freePort()
  const dir = mkdtempSync(path.join(tmpdir(), `rl-bench-ovr-${name}-`))
  const file = path.join(dir, 'ratelimiting.yaml')
  writeFileSync(file, yaml)
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      path.join(SRC, 'server/cli.ts'),
      'serve',
      '--config',
      file,
      '--no-watch',
      '--port',
      String(port),
      '--log-level',
      'warn',
    ],
    { cwd: path.dirname(SRC), stdio: ['ignore', 'ignore', 'inherit'] },
  )
  const url = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 60_000
  for (;;) {
    try {
      if ((await fetch(`${url}/healthz`)).ok) break
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`service ${name} did not start`)
    await new Promise((r) => setTimeout(r, 100))
  }
  return { url, pid: child.pid as number, child, dir }
}

async function stopService(s: Service): Promise<void> {
  if (s.child.exitCode === null && s.child.signalCode === null) {
    const exited = new Promise((r) => s.child.once('exit', r))
    s.child.kill('SIGTERM')
    await exited
  }
  rmSync(s.dir, { recursive: true, force: true })
}

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number
}

async function redisOutputBytes(redis: Redis): Promise<number> {
  return Number(/^total_net_output_bytes:(\d+)/m.exec(await redis.info('stats'))?.[1])
}

async function metricLines(url: string, name: string): Promise<string[]> {
  const body = await (await fetch(`${url}/metrics`)).text()
  return body.split('\n').filter((l) => l.startsWith(name))
}

async function main(): Promise<void> {
  const server = await startRedisProcess()
  const redis = new Redis(server.url)
  const services: Service[] = []
  try {
    log(`writing ${OVERRIDES} overrides into ${server.url}`)
    const key = `${PREFIX}!overrides`
    for (let i = 0; i < OVERRIDES; i += 1000) {
      const fields: Array<string | number> = []
      for (let j = i; j < Math.min(OVERRIDES, i + 1000); j++) fields.push(`default:user-${j}`, 100 + (j % 900))
      await redis.hset(key, ...fields)
    }
    await redis.hset(key, '#version', Date.now() * 1000)
    const yaml = [
      'rate-limiter:',
      '  use-algo: fixed-window-algo',
      '  max-requests: 1000000',
      '  window-size: 60',
      `  key-prefix: ${PREFIX}`,
      '  overrides-refresh: 1',
      `store: { type: redis, url: "${server.url}" }`,
      '',
    ].join('\n')
    log(`starting instances A (writes) and B (measured) from ${SRC}`)
    const a = await startService(yaml, 'a')
    services.push(a)
    const b = await startService(yaml, 'b')
    services.push(b)

    // warm-up: checks on B, a few PUTs on A
    const latencies: number[] = []
    let checkErrors = 0
    let measuring = false
    const oneCheck = async () => {
      const userId = `user-${Math.floor(Math.random() * OVERRIDES * 1.01)}`
      const started = performance.now()
      try {
        const res = await fetch(`${b.url}/v1/check`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ userId }),
        })
        await res.text()
        if (res.status !== 200) checkErrors++
      } catch {
        checkErrors++
      }
      if (measuring) latencies.push(performance.now() - started)
    }
    const checkEveryMs = 10
    const perTick = CHECKS_PER_S / (1000 / checkEveryMs)
    let owed = 0
    const checks = setInterval(() => {
      owed += perTick
      for (; owed >= 1; owed--) void oneCheck()
    }, checkEveryMs)

    let puts = 0
    let putErrors = 0
    const lags: number[] = []
    const observing: Promise<void>[] = []
    const onePut = async () => {
      const n = puts++
      const userId = `user-${Math.floor(Math.random() * OVERRIDES)}`
      const maxRequests = 2000 + n
      try {
        const res = await fetch(`${a.url}/v1/overrides/default/${userId}`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ maxRequests }),
        })
        await res.text()
        if (res.status !== 200) {
          putErrors++
          return
        }
      } catch {
        putErrors++
        return
      }
      // every 4th PUT: how long until B applies it (read without counting, every 20 ms)
      if (!measuring || n % 4 !== 0) return
      const done = performance.now()
      observing.push(
        (async () => {
          for (;;) {
            const res = await fetch(`${b.url}/v1/users/${userId}`)
            const body = (await res.json()) as { limit?: number }
            if (body.limit !== undefined && body.limit >= maxRequests) break
            if (performance.now() - done > 30_000) return
            await new Promise((r) => setTimeout(r, 20))
          }
          lags.push(performance.now() - done)
        })(),
      )
    }
    const writes = setInterval(() => void onePut(), 1000 / PUTS_PER_S)

    await new Promise((r) => setTimeout(r, 3000))
    log(`measuring for ${DURATION_S} s: ${PUTS_PER_S} PUT/s on A, ${CHECKS_PER_S} checks/s on B`)
    const load0 = loadavg()[0] as number
    const cpuB0 = cpuMs(b.pid)
    const cpuA0 = cpuMs(a.pid)
    const out0 = await redisOutputBytes(redis)
    const puts0 = puts
    measuring = true
    const t0 = performance.now()
    await new Promise((r) => setTimeout(r, DURATION_S * 1000))
    measuring = false
    const elapsed = (performance.now() - t0) / 1000
    const cpuB = cpuMs(b.pid) - cpuB0
    const cpuA = cpuMs(a.pid) - cpuA0
    const out = (await redisOutputBytes(redis)) - out0
    const putsDone = puts - puts0
    clearInterval(writes)
    clearInterval(checks)
    await Promise.all(observing)
    await new Promise((r) => setTimeout(r, 500))
    const load1 = loadavg()[0] as number
    const reads = await metricLines(b.url, 'ratelimiting_overrides_')

    latencies.sort((x, y) => x - y)
    lags.sort((x, y) => x - y)
    const ms = (v: number) => (v < 10 ? v.toFixed(1) : v.toFixed(0))
    const row = [
      LABEL,
      `${(putsDone / elapsed).toFixed(1)}`,
      `${(latencies.length / elapsed).toFixed(0)}`,
      `${(cpuB / 1000).toFixed(2)} s`,
      `${((cpuB / 10 / elapsed) as number).toFixed(1)}%`,
      `${ms(quantile(latencies, 0.5))} ms`,
      `${ms(quantile(latencies, 0.99))} ms`,
      `${ms(latencies[latencies.length - 1] ?? Number.NaN)} ms`,
      `${ms(quantile(lags, 0.5))} ms`,
      `${ms(lags[lags.length - 1] ?? Number.NaN)} ms`,
      `${(out / 1e6).toFixed(1)} MB`,
      `${(cpuA / 1000).toFixed(2)} s`,
    ]
    console.log(
      `Node ${process.version}, ${cpus()[0]?.model ?? '?'} (${cpus().length} cores); load average ${load0.toFixed(2)} at start, ${load1.toFixed(2)} at the end`,
    )
    console.log(`${OVERRIDES} overrides, ${elapsed.toFixed(1)} s measured; errors: ${checkErrors} checks, ${putErrors} PUTs`)
    console.log(
      '| code | PUT/s on A | checks/s on B | B CPU | B CPU share | check p50 | check p99 | check max | PUT applied on B, median | PUT applied on B, max | Redis sent | A CPU |',
    )
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    console.log(`| ${row.join(' | ')} |`)
    if (reads.length > 0)
      console.log(`B's counters at the end:\n${reads.filter((l) => !l.startsWith('ratelimiting_overrides{')).join('\n')}`)
  } finally {
    for (const s of services) await stopService(s)
    redis.disconnect()
    await server.stop()
  }
}

await main()
