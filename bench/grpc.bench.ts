/**
 * gRPC benchmark: Envoy's `ShouldRateLimit` (envoy.service.ratelimit.v3) answered by
 * `ratelimiting serve`, one descriptor per request, against a bare @grpc/grpc-js server built from
 * the same rls.proto whose handler answers one constant OK response (the floor: the same messages
 * both ways, no decision). Decisions per second at 1, 64 and 256 calls in flight, p50 and p99
 * latency, the servers' CPU time per call, and on Redis the Redis commands per decision.
 *
 *   npm run bench:grpc -- --write                                full run (about 20 minutes), writes docs/BENCHMARKS-gateway.md
 *   node --import tsx bench/grpc.bench.ts --quick                1 short round at 1 and 64 in flight, prints only
 *
 * Options: --quick, --rounds N (5), --duration S (3, seconds measured per round), --warmup S (0.5,
 * seconds of load before each measurement; each server also gets 2 s when it starts), --inflight
 * 1,64,256, --streams-per-channel N (64: one HTTP/2 connection per 64 calls in flight), --keys N
 * (10,000 remote addresses, cycled), --cells memory-fixed,… (the floor always runs), --clients
 * grpc-js,h2, --redis-url URL (an existing Redis instead of a redis-server of the benchmark's own),
 * --cpu-prof (the floor and the services write V8 CPU profiles to .tmp/grpc-prof/), --cli PATH (a built
 * dist/server/cli.js to run as the service, such as a build made in a copy of the tree), --write / --no-write.
 *
 * Two load generators, both in this process: @grpc/grpc-js clients, and a lighter one on
 * node:http2 that sends pre-encoded gRPC frames and reads grpc-status (decoding every 64th
 * answer), because on a 2-core machine @grpc/grpc-js's client costs more CPU per call than
 * either server and so sets the pace itself. Every server runs in a process of its own (the
 * service is the built CLI, dist/server/cli.js, or src/ through tsx when not built), so client and
 * server do not share an event loop. The services run one at a time; for each, every round
 * measures the floor and the service at each number in flight and with each client, in
 * alternating order, so the machine's drift hits both. Redis commands are INFO commandstats before
 * and after each service measurement (its warm-up included, plus two sync periods after it so the
 * last sync is counted), over the decisions answered in that span.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http2 from 'node:http2'
import { cpus, loadavg, tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import { loadSync } from '@grpc/proto-loader'
import { root, startRedisProcess } from './lib/service-process.js'
import { replaceSection } from './lib/report.js'

/** The cells besides the floor. */
export const SERVICE_CELLS = [
  'memory-fixed',
  'memory-counter',
  'redis-fixed',
  'redis-counter',
  'redis-counter-batched',
  'redis-counter-escrow',
] as const
export type ServiceCellId = (typeof SERVICE_CELLS)[number]

/** What one cell runs: the store and the algorithm of every rule. */
const CELL_SETUP: Readonly<
  Record<
    ServiceCellId,
    {
      readonly label: string
      readonly store: 'memory' | 'redis'
      readonly algo: string
      readonly syncRate?: number
      /**
       * `store.batch-across-slots`: sync calls of up to 512 key-windows whatever their hash slots
       * (the default on one server), or `false` for one call per hash slot; unset: the default.
       */
      readonly batch?: boolean
      /** `envoy.escrow`: the counter admits only against budgets the store granted. */
      readonly escrow?: boolean
    }
  >
> = {
  'memory-fixed': { label: 'memory, fixed window', store: 'memory', algo: 'fixed-window-algo' },
  'memory-counter': { label: 'memory, counter (sync-rate -1)', store: 'memory', algo: 'sliding-window-counter-algo', syncRate: -1 },
  'redis-fixed': { label: 'Redis, fixed window', store: 'redis', algo: 'fixed-window-algo' },
  // one server's default batches across slots: this cell asks for one call per slot
  'redis-counter': {
    label: 'Redis, counter (sync-rate 0.1, batch-across-slots: false)',
    store: 'redis',
    algo: 'sliding-window-counter-algo',
    syncRate: 0.1,
    batch: false,
  },
  'redis-counter-batched': {
    label: 'Redis, counter (sync-rate 0.1, batch-across-slots, the default)',
    store: 'redis',
    algo: 'sliding-window-counter-algo',
    syncRate: 0.1,
  },
  'redis-counter-escrow': {
    label: 'Redis, counter (sync-rate 0.1, escrow)',
    store: 'redis',
    algo: 'sliding-window-counter-algo',
    syncRate: 0.1,
    escrow: true,
  },
}

/** The load generators. */
export const CLIENTS = ['grpc-js', 'h2'] as const
export type ClientKind = (typeof CLIENTS)[number]

const CLIENT_LABEL: Readonly<Record<ClientKind, string>> = {
  'grpc-js': '@grpc/grpc-js clients',
  h2: 'node:http2 with pre-encoded gRPC frames',
}

/** Sizes and durations of one run. */
export interface GrpcBenchOptions {
  readonly rounds: number
  /** Measured time of one round, ms. */
  readonly durationMs: number
  /** Load before each measurement, not measured, ms. */
  readonly warmupMs: number
  /** Load each server gets once when it starts (JIT), per client, ms. */
  readonly startWarmupMs: number
  /** Calls in flight, one level after another. */
  readonly inflight: readonly number[]
  /** Calls in flight per client channel (each channel is an HTTP/2 connection of its own). */
  readonly streamsPerChannel: number
  /** Distinct `remote_address` values the requests cycle through. */
  readonly keys: number
  readonly cells: readonly ServiceCellId[]
  readonly clients: readonly ClientKind[]
  /** An existing Redis (keys under a unique prefix, deleted after); a redis-server of the benchmark's own when undefined. */
  readonly redisUrl?: string
  /** The service children write V8 CPU profiles into this directory. */
  readonly cpuProfDir?: string
  /** A built CLI to run as the service (`--cli`, such as a build of another copy); else dist/server/cli.js when built, else src/ through tsx. */
  readonly cli?: string
  readonly log?: (line: string) => void
}

/** A full run: 5 rounds of 3 s at 1, 64 and 256 in flight, every cell, both clients. */
export const FULL_OPTIONS: GrpcBenchOptions = {
  rounds: 5,
  durationMs: 3000,
  warmupMs: 500,
  startWarmupMs: 2000,
  inflight: [1, 64, 256],
  streamsPerChannel: 64,
  keys: 10_000,
  cells: SERVICE_CELLS,
  clients: CLIENTS,
}

/** `--quick`: one short round at 1 and 64 in flight, @grpc/grpc-js clients. */
export const QUICK_OPTIONS: GrpcBenchOptions = {
  ...FULL_OPTIONS,
  rounds: 1,
  durationMs: 1000,
  warmupMs: 200,
  startWarmupMs: 300,
  inflight: [1, 64],
  clients: ['grpc-js'],
}

/** One measurement of one server at one number in flight. */
export interface Sample {
  /** Decisions (calls answered OK) per second of the measured time. */
  readonly rate: number
  readonly p50Ms: number
  readonly p99Ms: number
  /** The server's CPU time per answered call, µs (NaN off Linux). */
  readonly serverCpuUs: number
  /** CPU time of this (the client's) process over the measured time, share of one core. */
  readonly clientCpu: number
  /** Calls that failed, or answered anything but OK. */
  readonly errors: number
}

/** The medians of one cell at one number in flight with one client. */
export interface CellRow {
  readonly cell: 'floor' | ServiceCellId
  readonly label: string
  readonly client: ClientKind
  readonly inflight: number
  readonly channels: number
  readonly samples: readonly Sample[]
  readonly rate: number
  /** Each round's rate over the floor's rate of the same round, in flight and client, median; 1 for the floor. */
  readonly ratio: number
  readonly p50Ms: number
  readonly p99Ms: number
  readonly serverCpuUs: number
  /** The floor's CPU time per call over this server's (medians); 1 for the floor. */
  readonly cpuRatio: number
  readonly clientCpu: number
  readonly errors: number
  /** Script calls (EVALSHA, EVAL, FCALL) per decision; NaN off Redis. */
  readonly scriptsPerDecision: number
  /** Every Redis command per decision, those a script runs included (INFO and PING left out); NaN off Redis. */
  readonly commandsPerDecision: number
  /** Redis commands by name over the decisions, most first (empty off Redis). */
  readonly commandsByName: ReadonlyArray<readonly [string, number]>
}

/** Everything one run measured. */
export interface GrpcBenchResult {
  readonly options: GrpcBenchOptions
  readonly rows: readonly CellRow[]
  /** Where the Redis cells' Redis was. */
  readonly redis: 'own' | 'external' | 'none'
  readonly engine: 'dist' | 'source'
}

const PROTO_DIR = path.join(root, 'proto')
const RLS_PROTO = 'envoy/service/ratelimit/v3/rls.proto'
// the service's own loader options (src/server/gateway/grpc-server.ts): the floor encodes alike
const LOADER_OPTIONS = { keepCase: true, longs: Number, enums: String, defaults: false, oneofs: true }
const LIMIT = 1_000_000_000
const DOMAIN = `domain: bench
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: ${LIMIT} }
`
// what the service answers for that rule (toWire), so both servers send messages of one size
const FLOOR_ANSWER = {
  overall_code: 'OK',
  statuses: [
    {
      code: 'OK',
      current_limit: { name: '', requests_per_unit: LIMIT, unit: 'MINUTE' },
      limit_remaining: LIMIT - 12_345,
      duration_until_reset: { seconds: 42, nanos: 0 },
    },
  ],
  response_headers_to_add: [],
}

// the floor: a bare @grpc/grpc-js server from the same rls.proto, one constant answer, no decision
const FLOOR_SERVER = `
const grpc = require('@grpc/grpc-js')
const { loadSync } = require('@grpc/proto-loader')
const [protoDir, file, options, answer] = process.argv.slice(1)
const rls = grpc.loadPackageDefinition(loadSync(file, { includeDirs: [protoDir], ...JSON.parse(options) })).envoy.service.ratelimit.v3
const reply = JSON.parse(answer)
const server = new grpc.Server({ 'grpc.max_concurrent_streams': 1000 })
server.addService(rls.RateLimitService.service, { ShouldRateLimit: (call, callback) => callback(null, reply) })
server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) => {
  if (err) throw err
  process.stdout.write(JSON.stringify({ grpc: '127.0.0.1:' + port }) + '\\n')
})
process.on('SIGTERM', () => server.tryShutdown(() => process.exit(0)))
`

interface Server {
  readonly label: string
  readonly target: string
  readonly pid: number | undefined
  /** Calls it answered OK, warm-ups included (to read a CPU profile per call). */
  answered: number
  stop(): Promise<void>
}

/** Spawns a server and waits for the JSON line on its stdout that names its gRPC address. */
async function spawnServer(label: string, args: string[], cleanup: () => void = () => undefined): Promise<Server> {
  const child = spawn(process.execPath, args, { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] })
  let target: string
  try {
    target = await new Promise<string>((resolve, reject) => {
      let buffered = ''
      const timer = setTimeout(() => reject(new Error(`${label} did not start within 20 s`)), 20_000)
      child.once('exit', (code) => reject(new Error(`${label} exited with ${code} before it listened`)))
      child.stdout.on('data', (chunk: Buffer) => {
        buffered += chunk.toString()
        for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
          const line = buffered.slice(0, nl)
          buffered = buffered.slice(nl + 1)
          let grpcAddress: unknown
          try {
            grpcAddress = (JSON.parse(line) as { grpc?: unknown }).grpc
          } catch {
            continue
          }
          if (typeof grpcAddress === 'string') {
            clearTimeout(timer)
            resolve(grpcAddress)
          }
        }
      })
    })
  } catch (err) {
    child.kill('SIGKILL')
    cleanup()
    throw err
  }
  // the later log lines are read and dropped: a full pipe would stall the server
  child.stdout.removeAllListeners('data')
  child.stdout.resume()
  return { label, target, pid: child.pid, answered: 0, stop: () => stopChild(child).finally(cleanup) }
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((r) => child.once('exit', r))
  child.kill('SIGTERM')
  const killed = setTimeout(() => child.kill('SIGKILL'), 30_000)
  await exited
  clearTimeout(killed)
}

function startFloor(cpuProfDir: string | undefined): Promise<Server> {
  return spawnServer('bare @grpc/grpc-js server', [
    ...cpuProfArgs(cpuProfDir, 'floor'),
    '-e',
    FLOOR_SERVER,
    PROTO_DIR,
    RLS_PROTO,
    JSON.stringify(LOADER_OPTIONS),
    JSON.stringify(FLOOR_ANSWER),
  ])
}

function cpuProfArgs(dir: string | undefined, name: string): string[] {
  return dir === undefined ? [] : ['--cpu-prof', '--cpu-prof-dir', dir, '--cpu-prof-name', `${name}.cpuprofile`]
}

function serviceCli(cli?: string): { args: string[]; engine: 'dist' | 'source' } {
  if (cli !== undefined) return { args: [path.resolve(cli)], engine: 'dist' }
  const built = path.join(root, 'dist/server/cli.js')
  return existsSync(built)
    ? { args: [built], engine: 'dist' }
    : { args: ['--import', 'tsx', path.join(root, 'src/server/cli.ts')], engine: 'source' }
}

function startService(
  cell: ServiceCellId,
  redisUrl: string | undefined,
  keyPrefix: string,
  cpuProfDir: string | undefined,
  cli: string | undefined,
): Promise<Server> {
  const setup = CELL_SETUP[cell]
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-grpc-bench-'))
  writeFileSync(path.join(dir, 'bench.yaml'), DOMAIN)
  const envoy = [`domains: ${JSON.stringify(path.join(dir, 'bench.yaml'))}`, `use-algo: ${setup.algo}`]
  if (setup.syncRate !== undefined) envoy.push(`sync-rate: ${setup.syncRate}`)
  if (setup.escrow === true) envoy.push('escrow: true')
  const store =
    setup.store === 'memory'
      ? 'store: { type: memory }'
      : `store: { type: redis, url: ${JSON.stringify(redisUrl)}${setup.batch === undefined ? '' : `, batch-across-slots: ${setup.batch}`} }`
  const config = [
    store,
    `rate-limiter: { key-prefix: ${JSON.stringify(keyPrefix)} }`,
    'grpc: { port: 0 }',
    `envoy: { ${envoy.join(', ')} }`,
  ]
  const file = path.join(dir, 'ratelimiting.yaml')
  writeFileSync(file, `${config.join('\n')}\n`)
  return spawnServer(
    `service (${setup.label})`,
    [
      ...cpuProfArgs(cpuProfDir, cell),
      ...serviceCli(cli).args,
      'serve',
      '--config',
      file,
      '--no-watch',
      '--port',
      '0',
      '--log-level',
      'info',
    ],
    () => rmSync(dir, { recursive: true, force: true }),
  )
}

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

function median(values: readonly number[]): number {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b)
  if (sorted.length === 0) return Number.NaN
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

function quantile(sorted: Float64Array, q: number): number {
  return sorted.length === 0 ? Number.NaN : (sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] as number)
}

type Answer = { overall_code?: string }
type RlsClient = grpc.Client & {
  ShouldRateLimit(request: object, callback: (err: grpc.ServiceError | null, answer?: Answer) => void): grpc.ClientUnaryCall
}
type RlsClientClass = new (target: string, credentials: grpc.ChannelCredentials, options?: grpc.ChannelOptions) => RlsClient
type RlsMethod = grpc.MethodDefinition<object, Answer>

let loaded: { Client: RlsClientClass; method: RlsMethod } | undefined
function rls(): { Client: RlsClientClass; method: RlsMethod } {
  if (loaded === undefined) {
    const definition = loadSync(RLS_PROTO, { includeDirs: [PROTO_DIR], ...LOADER_OPTIONS })
    const pkg = grpc.loadPackageDefinition(definition) as unknown as {
      envoy: { service: { ratelimit: { v3: { RateLimitService: RlsClientClass } } } }
    }
    const service = definition['envoy.service.ratelimit.v3.RateLimitService'] as unknown as { ShouldRateLimit: RlsMethod }
    loaded = { Client: pkg.envoy.service.ratelimit.v3.RateLimitService, method: service.ShouldRateLimit }
  }
  return loaded
}

/** The requests of one run, as objects (grpc-js) and as encoded gRPC frames (h2). */
interface Requests {
  readonly objects: readonly object[]
  readonly frames: readonly Buffer[]
}

/** One request per remote address, as Envoy sends it for a `remote_address` action. */
function requestList(keys: number): Requests {
  const objects = Array.from({ length: keys }, (_, i) => ({
    domain: 'bench',
    descriptors: [{ entries: [{ key: 'remote_address', value: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}` }] }],
  }))
  const { method } = rls()
  const frames = objects.map((o) => {
    // gRPC's length-prefixed message: 0 (not compressed), the length (uint32 big-endian), the bytes
    const message = method.requestSerialize(o)
    const frame = Buffer.alloc(5 + message.length)
    frame.writeUInt32BE(message.length, 1)
    message.copy(frame, 5)
    return frame
  })
  return { objects, frames }
}

/** How many channels carry `inflight` calls. */
export function channelsFor(inflight: number, streamsPerChannel: number): number {
  return Math.max(1, Math.ceil(inflight / streamsPerChannel))
}

/** One connection of a load generator: `call` sends request `i` and reports whether the answer was an OK decision. */
interface Channel {
  call(i: number, done: (ok: boolean) => void): void
  close(): void
}

async function openGrpcJs(target: string, requests: readonly object[]): Promise<Channel> {
  const { Client } = rls()
  // a local subchannel pool: each channel its own HTTP/2 connection, not one shared by all;
  // no retries and no channelz: per-call bookkeeping of the client that the server never sees
  const client = new Client(target, grpc.credentials.createInsecure(), {
    'grpc.use_local_subchannel_pool': 1,
    'grpc.enable_retries': 0,
    'grpc.enable_channelz': 0,
  })
  await new Promise<void>((resolve, reject) => client.waitForReady(Date.now() + 10_000, (err) => (err ? reject(err) : resolve())))
  return {
    call(i, done) {
      client.ShouldRateLimit(requests[i] as object, (err, answer) => done(err === null && answer?.overall_code === 'OK'))
    },
    close: () => client.close(),
  }
}

async function openH2(target: string, frames: readonly Buffer[]): Promise<Channel> {
  const { method } = rls()
  const session = http2.connect(`http://${target}`)
  await new Promise<void>((resolve, reject) => {
    session.once('connect', () => resolve())
    session.once('error', reject)
  })
  session.on('error', () => undefined)
  const headers = { ':method': 'POST', ':path': method.path, 'content-type': 'application/grpc', te: 'trailers' }
  let issued = 0
  return {
    call(i, done) {
      if (session.closed || session.destroyed) {
        // the server went away: an error per call, on a later turn so the loop does not recurse
        setImmediate(() => done(false))
        return
      }
      const stream = session.request(headers)
      let status: string | undefined
      let body: Buffer | undefined
      // every 64th answer is decoded and checked; the others by their grpc-status alone
      const check = (issued++ & 63) === 0
      stream.on('response', (h) => {
        // a trailers-only answer (an error) carries grpc-status in its headers
        if (h['grpc-status'] !== undefined) status = String(h['grpc-status'])
      })
      stream.on('trailers', (t) => {
        status = String(t['grpc-status'])
      })
      stream.on('data', (chunk: Buffer) => {
        if (check) body = body === undefined ? chunk : Buffer.concat([body, chunk])
      })
      stream.on('close', () => {
        let ok = status === '0'
        if (ok && check) ok = body !== undefined && method.responseDeserialize(body.subarray(5)).overall_code === 'OK'
        done(ok)
      })
      stream.end(frames[i])
    },
    close: () => session.close(),
  }
}

interface Load extends Sample {
  /** Calls answered OK over warm-up and measurement together (what the Redis counts cover). */
  readonly answered: number
}

/**
 * Keeps `inflight` unary calls busy (each slot issues its next call when the last is answered)
 * over `channels` channels for the warm-up, then measures for `durationMs`, then lets the calls
 * in flight finish.
 */
async function drive(
  server: Server,
  client: ClientKind,
  inflight: number,
  channels: number,
  requests: Requests,
  warmupMs: number,
  durationMs: number,
): Promise<Load> {
  const open = await Promise.all(
    Array.from({ length: channels }, () =>
      client === 'h2' ? openH2(server.target, requests.frames) : openGrpcJs(server.target, requests.objects),
    ),
  )
  try {
    const count = requests.frames.length
    let latencies = new Float64Array(1 << 16)
    let done = 0
    let answered = 0
    let errors = 0
    let phase: 'warm' | 'measure' | 'stop' = 'warm'
    let pending = 0
    let cursor = (Math.random() * count) | 0
    let startedMs = 0
    let endedMs = 0
    let cpuStart = process.cpuUsage()
    let clientCpu = 0
    let serverCpuStart: number | undefined
    let serverCpuEnd: number | undefined
    await new Promise<void>((resolve) => {
      const issue = (channel: Channel): void => {
        const i = cursor
        cursor = cursor + 1 === count ? 0 : cursor + 1
        const t0 = performance.now()
        pending++
        channel.call(i, (ok) => {
          pending--
          if (ok) answered++
          if (phase === 'measure') {
            if (!ok) errors++
            else {
              if (done === latencies.length) {
                const grown = new Float64Array(latencies.length * 2)
                grown.set(latencies)
                latencies = grown
              }
              latencies[done++] = performance.now() - t0
            }
          }
          if (phase !== 'stop') issue(channel)
          else if (pending === 0) resolve()
        })
      }
      for (let slot = 0; slot < inflight; slot++) issue(open[slot % channels] as Channel)
      setTimeout(() => {
        phase = 'measure'
        startedMs = performance.now()
        cpuStart = process.cpuUsage()
        serverCpuStart = cpuMs(server.pid)
        setTimeout(() => {
          phase = 'stop'
          endedMs = performance.now()
          const cpu = process.cpuUsage(cpuStart)
          clientCpu = (cpu.user + cpu.system) / 1000 / (endedMs - startedMs)
          serverCpuEnd = cpuMs(server.pid)
        }, durationMs)
      }, warmupMs)
    })
    server.answered += answered
    const sorted = latencies.subarray(0, done).sort()
    const seconds = (endedMs - startedMs) / 1000
    const serverCpuUs =
      serverCpuStart === undefined || serverCpuEnd === undefined ? Number.NaN : ((serverCpuEnd - serverCpuStart) * 1000) / Math.max(1, done)
    return {
      rate: done / seconds,
      p50Ms: quantile(sorted, 0.5),
      p99Ms: quantile(sorted, 0.99),
      serverCpuUs,
      clientCpu,
      errors,
      answered,
    }
  } finally {
    for (const c of open) c.close()
  }
}

/** Counts of Redis commands by name (INFO commandstats). */
interface RedisCounter {
  readonly url: string
  readonly own: boolean
  commandCalls(): Promise<Map<string, number>>
  /** Deletes every key under `prefix`. */
  deleteKeys(prefix: string): Promise<number>
  stop(): Promise<void>
}

async function openRedis(url: string | undefined): Promise<RedisCounter> {
  const { Redis } = await import('ioredis')
  const own = url === undefined ? await startRedisProcess() : undefined
  const admin = new Redis(own?.url ?? (url as string), { lazyConnect: true })
  await admin.connect()
  return {
    url: own?.url ?? (url as string),
    own: own !== undefined,
    async commandCalls() {
      const calls = new Map<string, number>()
      for (const m of (await admin.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(m[1] as string, Number(m[2]))
      return calls
    },
    async deleteKeys(prefix) {
      let deleted = 0
      let cursor = '0'
      do {
        const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
        cursor = next
        if (keys.length > 0) deleted += await admin.del(...keys)
      } while (cursor !== '0')
      return deleted
    },
    async stop() {
      admin.disconnect()
      await own?.stop()
    },
  }
}

const SCRIPT_COMMANDS = new Set(['evalsha', 'eval', 'evalsha_ro', 'eval_ro', 'fcall', 'fcall_ro'])
// ours (the benchmark's reads) or the clients' connection upkeep, not the service's work
const NOT_COUNTED = new Set(['info', 'ping', 'scan', 'del', 'client|setinfo', 'client|setname', 'hello', 'select', 'command'])

function commandDelta(
  before: Map<string, number>,
  after: Map<string, number>,
): { scripts: number; commands: number; byName: Map<string, number> } {
  let scripts = 0
  let commands = 0
  const byName = new Map<string, number>()
  for (const [name, calls] of after) {
    const delta = calls - (before.get(name) ?? 0)
    if (delta <= 0 || NOT_COUNTED.has(name)) continue
    if (SCRIPT_COMMANDS.has(name)) scripts += delta
    commands += delta
    byName.set(name, delta)
  }
  return { scripts, commands, byName }
}

function sortedByName(byName: ReadonlyMap<string, number>, per: number): Array<[string, number]> {
  return [...byName].map(([name, n]): [string, number] => [name, n / per]).sort((a, b) => b[1] - a[1])
}

interface RedisSum {
  scripts: number
  commands: number
  answered: number
  readonly byName: Map<string, number>
}

/** Runs every cell: the floor beside each service in turn, the rounds of each service together. */
export async function runGrpcBench(options: GrpcBenchOptions): Promise<GrpcBenchResult> {
  const log = options.log ?? (() => undefined)
  const requests = requestList(options.keys)
  const needsRedis = options.cells.some((c) => CELL_SETUP[c].store === 'redis')
  const redis = needsRedis ? await openRedis(options.redisUrl) : undefined
  const keyPrefix = `bench:grpc:${randomUUID().slice(0, 8)}`
  if (options.cpuProfDir !== undefined) mkdirSync(options.cpuProfDir, { recursive: true })
  const at = (client: ClientKind, inflight: number) => `${client}@${inflight}`
  const levels = options.clients.flatMap((client) => options.inflight.map((inflight) => ({ client, inflight })))
  const floorSamples = new Map<string, Sample[]>(levels.map((l) => [at(l.client, l.inflight), []]))
  const serviceRows: Array<Omit<CellRow, 'cpuRatio'>> = []
  const maxInflight = Math.max(...options.inflight)
  const warm = async (server: Server) => {
    for (const client of options.clients)
      await drive(server, client, maxInflight, channelsFor(maxInflight, options.streamsPerChannel), requests, options.startWarmupMs, 1)
  }
  const floor = await startFloor(options.cpuProfDir)
  log(
    `floor: ${floor.label} at ${floor.target}; Redis: ${redis === undefined ? 'none' : `${redis.url}${redis.own ? " (the benchmark's own)" : ''}`}`,
  )
  try {
    await warm(floor)
    for (const cell of options.cells) {
      const setup = CELL_SETUP[cell]
      const service = await startService(cell, redis?.url, keyPrefix, options.cpuProfDir, options.cli)
      log(`${service.label} at ${service.target}`)
      const samples = new Map<string, Sample[]>(levels.map((l) => [at(l.client, l.inflight), []]))
      const ratios = new Map<string, number[]>(levels.map((l) => [at(l.client, l.inflight), []]))
      const redisSums = new Map<string, RedisSum>(
        levels.map((l) => [at(l.client, l.inflight), { scripts: 0, commands: 0, answered: 0, byName: new Map() }]),
      )
      try {
        // an escrow store's first call begins its epoch, and it refuses grants for learnMs after
        // (2 syncs + 2 store timeouts: 2.2 s here): those answers are the learning period's, not escrow's
        if (setup.escrow === true) {
          await warm(service)
          await new Promise((r) => setTimeout(r, 2 * (setup.syncRate ?? 0) * 1000 + 2 * 1000 + 500))
        }
        await warm(service)
        for (let round = 0; round < options.rounds; round++) {
          for (const { client, inflight } of levels) {
            const key = at(client, inflight)
            const channels = channelsFor(inflight, options.streamsPerChannel)
            // alternate who goes first, so neither always runs on a warmer (or busier) machine
            const pair = round % 2 === 0 ? [floor, service] : [service, floor]
            const rates = new Map<Server, number>()
            for (const server of pair) {
              const before = server === service && setup.store === 'redis' ? await redis?.commandCalls() : undefined
              const s = await drive(server, client, inflight, channels, requests, options.warmupMs, options.durationMs)
              ;(server === floor ? floorSamples : samples).get(key)?.push(s)
              rates.set(server, s.rate)
              let redisNote = ''
              if (before !== undefined && redis !== undefined) {
                // the last sync of this load's hits runs after it: wait two periods to count it
                const syncRate = setup.syncRate ?? 0
                if (syncRate > 0) await new Promise((r) => setTimeout(r, 2 * syncRate * 1000))
                const delta = commandDelta(before, await redis.commandCalls())
                const sum = redisSums.get(key) as RedisSum
                sum.scripts += delta.scripts
                sum.commands += delta.commands
                sum.answered += s.answered
                for (const [name, n] of delta.byName) sum.byName.set(name, (sum.byName.get(name) ?? 0) + n)
                redisNote = `, Redis per decision: ${(delta.scripts / s.answered).toFixed(3)} scripts, ${(delta.commands / s.answered).toFixed(3)} commands (${s.answered} decisions; ${sortedByName(
                  delta.byName,
                  s.answered,
                )
                  .map(([name, n]) => `${name} ${n.toFixed(3)}`)
                  .join(', ')})`
              }
              log(
                `round ${round + 1}, ${client}, ${inflight} in flight, ${server === floor ? 'floor' : setup.label}: ${Math.round(s.rate)}/s, p50 ${s.p50Ms.toFixed(2)} ms, p99 ${s.p99Ms.toFixed(2)} ms, server ${s.serverCpuUs.toFixed(1)} µs CPU per call, client CPU ${(s.clientCpu * 100).toFixed(0)}%, errors ${s.errors}${redisNote}`,
              )
            }
            ratios.get(key)?.push((rates.get(service) as number) / (rates.get(floor) as number))
          }
        }
      } finally {
        await service.stop()
        if (options.cpuProfDir !== undefined) log(`${service.label}: ${service.answered} calls answered in its profile`)
      }
      for (const { client, inflight } of levels) {
        const key = at(client, inflight)
        const r = redisSums.get(key) as RedisSum
        serviceRows.push({
          ...summarize(cell, setup.label, client, inflight, channelsFor(inflight, options.streamsPerChannel), samples.get(key) as Sample[]),
          ratio: median(ratios.get(key) as number[]),
          scriptsPerDecision: setup.store === 'redis' ? r.scripts / r.answered : Number.NaN,
          commandsPerDecision: setup.store === 'redis' ? r.commands / r.answered : Number.NaN,
          commandsByName: sortedByName(r.byName, r.answered),
        })
      }
    }
  } finally {
    await floor.stop()
    if (options.cpuProfDir !== undefined) log(`floor: ${floor.answered} calls answered in its profile`)
    if (redis !== undefined) {
      const deleted = await redis.deleteKeys(keyPrefix).catch(() => 0)
      log(`deleted ${deleted} Redis keys under ${keyPrefix}`)
      await redis.stop()
    }
  }
  const floorRows = new Map(
    levels.map(({ client, inflight }) => {
      const key = at(client, inflight)
      const row: CellRow = {
        ...summarize(
          'floor',
          'bare @grpc/grpc-js server (floor)',
          client,
          inflight,
          channelsFor(inflight, options.streamsPerChannel),
          floorSamples.get(key) as Sample[],
        ),
        ratio: 1,
        cpuRatio: 1,
        scriptsPerDecision: Number.NaN,
        commandsPerDecision: Number.NaN,
        commandsByName: [],
      }
      return [key, row]
    }),
  )
  const rows: CellRow[] = []
  for (const client of options.clients) {
    for (const inflight of options.inflight) rows.push(floorRows.get(at(client, inflight)) as CellRow)
    for (const row of serviceRows)
      if (row.client === client)
        rows.push({ ...row, cpuRatio: (floorRows.get(at(client, row.inflight)) as CellRow).serverCpuUs / row.serverCpuUs })
  }
  return { options, rows, redis: redis === undefined ? 'none' : redis.own ? 'own' : 'external', engine: serviceCli(options.cli).engine }
}

function summarize(
  cell: CellRow['cell'],
  label: string,
  client: ClientKind,
  inflight: number,
  channels: number,
  samples: readonly Sample[],
) {
  return {
    cell,
    label,
    client,
    inflight,
    channels,
    samples,
    rate: median(samples.map((s) => s.rate)),
    p50Ms: median(samples.map((s) => s.p50Ms)),
    p99Ms: median(samples.map((s) => s.p99Ms)),
    serverCpuUs: median(samples.map((s) => s.serverCpuUs)),
    clientCpu: median(samples.map((s) => s.clientCpu)),
    errors: samples.reduce((sum, s) => sum + s.errors, 0),
  }
}

/** Heading of the section this benchmark owns in docs/BENCHMARKS-gateway.md. */
export const SECTION_HEADING = "## Envoy's ShouldRateLimit over gRPC"

const fmt = (x: number, digits = 0) =>
  Number.isFinite(x) ? x.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits }) : 'n/a'
const pct = (x: number) => (Number.isFinite(x) ? `${(x * 100).toFixed(0)}%` : 'n/a')
const ms = (x: number) => (Number.isFinite(x) ? `${x < 10 ? x.toFixed(2) : x.toFixed(1)} ms` : 'n/a')

/** Whether each of the issue's targets is met with `client`'s load, one line each. */
export function targetLines(result: GrpcBenchResult, client: ClientKind): string[] {
  const lines: string[] = []
  const rowsOf = (cell: ServiceCellId) => result.rows.filter((r) => r.cell === cell && r.client === client)
  for (const cell of ['memory-fixed', 'memory-counter', 'redis-counter', 'redis-counter-batched', 'redis-counter-escrow'] as const) {
    const rows = rowsOf(cell)
    if (rows.length === 0) continue
    const low = rows.filter((r) => !(r.ratio >= 0.6))
    const shares = rows.map((r) => `${pct(r.ratio)} at ${r.inflight}`).join(', ')
    lines.push(
      `- ${CELL_SETUP[cell].label}, at least 60% of the floor: ${low.length === 0 ? 'met' : `**not met** at ${low.map((r) => `${r.inflight} in flight`).join(', ')}`} (${shares}).`,
    )
  }
  for (const cell of ['redis-counter', 'redis-counter-batched', 'redis-counter-escrow'] as const) {
    const counter = rowsOf(cell)
    if (counter.length === 0) continue
    const commands = Math.max(...counter.map((r) => r.commandsPerDecision))
    const scripts = Math.max(...counter.map((r) => r.scriptsPerDecision))
    lines.push(
      `- ${CELL_SETUP[cell].label}, at most 0.05 Redis commands per decision: ${commands <= 0.05 ? 'met' : scripts <= 0.05 ? '**met in script calls only**' : '**not met**'} (worst ${fmt(commands, 3)} commands, ${fmt(scripts, 3)} script calls).`,
    )
  }
  const fixed = rowsOf('redis-fixed')
  if (fixed.length > 0) {
    const scripts = Math.max(...fixed.map((r) => r.scriptsPerDecision))
    // a hair over 1: the service's own connection upkeep and a script loaded after a restart
    lines.push(
      `- Redis, fixed window, at most 1 script call per decision: ${scripts <= 1.001 ? 'met' : '**not met**'} (worst ${fmt(scripts, 3)}).`,
    )
  }
  return lines
}

/** Redis commands by name per decision, one line per Redis row. */
function commandLines(rows: readonly CellRow[]): string[] {
  const redisRows = rows.filter((r) => r.commandsByName.length > 0)
  if (redisRows.length === 0) return []
  return [
    'Redis commands by name, per decision:',
    '',
    ...redisRows.map(
      (r) =>
        `- ${r.label}, ${r.inflight} in flight: ${r.commandsByName.map(([name, n]) => `${name.toUpperCase()} ${fmt(n, 3)}`).join(', ')}`,
    ),
    '',
  ]
}

/** Where and how a run happened. */
export interface RunInfo {
  readonly date: string
  readonly cpu: string
  readonly cores: number
  readonly node: string
  readonly command: string
  readonly load: readonly [number, number]
}

/** The markdown section of docs/BENCHMARKS-gateway.md. */
export function renderSection(result: GrpcBenchResult, info: RunInfo): string {
  const o = result.options
  const channels = o.inflight.map((n) => `${channelsFor(n, o.streamsPerChannel)} at ${n}`).join(', ')
  const redisWhere =
    result.redis === 'own'
      ? "a redis-server of the benchmark's own on loopback, so its INFO commandstats count the service's commands alone"
      : result.redis === 'external'
        ? `an existing Redis (keys under a unique prefix, deleted after); **other clients may have used it meanwhile**, and INFO commandstats counts their commands too`
        : 'not used'
  const out = [
    SECTION_HEADING,
    '',
    `Measured ${info.date} on ${info.cpu} (${info.cores} cores, shared with other jobs: noisy), Node ${info.node}; load average ${info.load[0].toFixed(2)} at start, ${info.load[1].toFixed(2)} at the end. The service ran from ${result.engine === 'dist' ? 'the build (dist/)' : 'src/ through tsx'}.`,
    '',
    `- **Requests**: one descriptor, \`remote_address\`, cycling through ${fmt(o.keys)} addresses, in domain \`bench\` whose only rule allows ${fmt(LIMIT)} per minute: never over, so every answer is a decision (OK).`,
    "- **Servers**, each in a process of its own: the service (`ratelimiting serve` with `grpc` and `envoy` sections, one rule algorithm per cell) and the floor, a bare @grpc/grpc-js server built from the same rls.proto with the service's proto-loader options, whose handler answers one constant OK response of the service's shape (the same messages both ways, no decision).",
    `- **Load**, from the benchmark's process: every slot issues its next unary call when its last is answered. Channels (HTTP/2 connections of their own): ${channels} in flight. Two clients: ${o.clients.map((c) => CLIENT_LABEL[c]).join(', and ')}${o.clients.includes('h2') ? " (it reads grpc-status and decodes every 64th answer; @grpc/grpc-js's client spends more CPU per call than either server, so with it the client sets the pace on 2 cores)" : ''}.`,
    `- **Rounds**: ${o.rounds} of ${fmt(o.durationMs / 1000, 1)} s, each after ${fmt(o.warmupMs / 1000, 1)} s of unmeasured load (each server also got ${fmt(o.startWarmupMs / 1000, 1)} s when it started). The services ran one after another; in each round the floor and the service took turns (alternating which went first) at each number in flight. Medians over the rounds; the floor's over its rounds beside every service.`,
    `- **Redis**: ${redisWhere}. Per decision: INFO commandstats after minus before each service measurement (its warm-up included, and two sync periods after it for the counter's last sync), over the decisions answered meanwhile. *Scripts* counts EVALSHA and EVAL calls (the service's round trips); *commands* counts every command, those run inside a script included (INFO and PING left out).`,
    '- **Columns**: the share of the floor pairs each round of the service with the floor’s round next to it; server CPU per call is the server process’s CPU time (/proc) over the calls it answered, and its share is the floor’s over the service’s; client CPU is the benchmark process’s, as a share of one core.',
    '',
    'Targets: at least 60% of the floor on memory and on Redis with periodic sync, escrow included (issue 28, target 6); Redis commands per decision at most 0.05 with periodic sync, at most 1 script call with the fixed window.',
    '',
  ]
  for (const client of o.clients) {
    out.push(
      `### Load from ${CLIENT_LABEL[client]}`,
      '',
      '| cell | in flight | decisions/s | share of the floor | p50 | p99 | server CPU per call | share of the floor (CPU) | client CPU | Redis scripts per decision | Redis commands per decision | errors |',
      '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...result.rows
        .filter((r) => r.client === client)
        .map(
          (r) =>
            `| ${r.label} | ${r.inflight} | ${fmt(r.rate)} | ${pct(r.ratio)} | ${ms(r.p50Ms)} | ${ms(r.p99Ms)} | ${Number.isFinite(r.serverCpuUs) ? `${r.serverCpuUs.toFixed(0)} µs` : 'n/a'} | ${pct(r.cpuRatio)} | ${pct(r.clientCpu)} | ${Number.isFinite(r.scriptsPerDecision) ? fmt(r.scriptsPerDecision, 3) : '–'} | ${Number.isFinite(r.commandsPerDecision) ? fmt(r.commandsPerDecision, 3) : '–'} | ${r.errors} |`,
        ),
      '',
      ...commandLines(result.rows.filter((r) => r.client === client)),
      ...targetLines(result, client),
      '',
    )
  }
  out.push(`Reproduce with \`npm run build && ${info.command}\`.`, '')
  return out.join('\n')
}

const INTRO = [
  '# Benchmarks: the gateways',
  '',
  'The service as gateways call it. Provisional (shared machine): measured while other jobs ran on the same 2 cores, so compare the cells of one run, not runs of different days.',
  '',
].join('\n')

/** Replaces this benchmark's section of `file` (or appends it), keeping every other section. */
export function writeSection(file: string, section: string): void {
  replaceSection(file, SECTION_HEADING, section, INTRO)
}

function listOf<T extends string>(raw: string | undefined, allowed: readonly T[], fallback: readonly T[], name: string): readonly T[] {
  if (raw === undefined) return fallback
  const list = raw.split(',')
  for (const item of list)
    if (!(allowed as readonly string[]).includes(item)) throw new RangeError(`${name}: ${item} is not one of ${allowed.join(', ')}`)
  return list as T[]
}

async function main(): Promise<void> {
  const args = process.argv.slice(2)
  const flag = (name: string) => args.includes(name)
  const text = (name: string) => {
    const at = args.indexOf(name)
    return at < 0 ? undefined : args[at + 1]
  }
  const option = (name: string, fallback: number): number => {
    const raw = text(name)
    if (raw === undefined) return fallback
    const value = Number(raw)
    if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} takes a positive number, got ${raw}`)
    return value
  }
  const quick = flag('--quick')
  const base = quick ? QUICK_OPTIONS : FULL_OPTIONS
  const inflight = text('--inflight')?.split(',').map(Number) ?? base.inflight
  if (inflight.some((n) => !Number.isSafeInteger(n) || n < 1))
    throw new RangeError(`--inflight takes positive integers, got ${text('--inflight')}`)
  const redisUrl = text('--redis-url')
  const options: GrpcBenchOptions = {
    rounds: option('--rounds', base.rounds),
    durationMs: option('--duration', base.durationMs / 1000) * 1000,
    warmupMs: option('--warmup', base.warmupMs / 1000) * 1000,
    startWarmupMs: base.startWarmupMs,
    inflight,
    streamsPerChannel: option('--streams-per-channel', base.streamsPerChannel),
    keys: option('--keys', base.keys),
    cells: listOf(text('--cells'), SERVICE_CELLS, base.cells, '--cells'),
    clients: listOf(text('--clients'), CLIENTS, base.clients, '--clients'),
    ...(redisUrl !== undefined ? { redisUrl } : {}),
    ...(flag('--cpu-prof') ? { cpuProfDir: path.join(root, '.tmp/grpc-prof') } : {}),
    ...(text('--cli') !== undefined ? { cli: text('--cli') as string } : {}),
    log: (line) => process.stderr.write(`[grpc] ${line}\n`),
  }
  const write = flag('--no-write') ? false : flag('--write')
  const loadAtStart = loadavg()[0] as number
  const started = Date.now()
  const result = await runGrpcBench(options)
  const command = ['node', ...process.execArgv, path.relative(root, fileURLToPath(import.meta.url)), ...args].join(' ')
  const section = renderSection(result, {
    date: new Date().toISOString().slice(0, 10),
    cpu: cpus()[0]?.model.trim() ?? 'an unknown CPU',
    cores: cpus().length,
    node: process.version,
    command,
    load: [loadAtStart, loadavg()[0] as number],
  })
  process.stdout.write(`${section}\n`)
  process.stderr.write(`[grpc] done in ${((Date.now() - started) / 1000).toFixed(0)} s\n`)
  if (write) {
    const file = path.join(root, 'docs/BENCHMARKS-gateway.md')
    writeSection(file, section)
    process.stderr.write(`[grpc] wrote ${path.relative(process.cwd(), file)}\n`)
  }
}

// run as a script; imported (the smoke test), only the exports
if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main()
