/**
 * The cost of a synchronous decision (`syncRate: 0`, one script call per hit) through each Redis
 * client the strategy takes (src/strategies/redis/client-adapter.ts): ioredis, iovalkey,
 * node-redis 5 and node-redis 6, on one redis-server and on a 3-master Redis Cluster the bench
 * starts for itself, at 1 and 64 decisions in flight. One limit of a 60 s window over 1,000 keys,
 * every hit allowed. Decisions per second and client CPU µs per decision, medians of interleaved
 * rounds (A B C D, D C B A, ...), and against ioredis the median of the per-round ratios. Prints
 * only (docs/BENCHMARKS-redis.md, "Clients", cites it).
 *
 * (bench/redis-clients.bench.ts is another question: the raw EVALSHA round trip of ioredis and
 * node-redis, without the library.)
 *
 * Then the same decision without Redis (`--cpu` for this part alone, `--no-cpu` to skip it):
 * client CPU µs per decision over stub clients that answer at once, one shaped like ioredis
 * (`evalsha`), one like node-redis (`sendCommand`), so the adapter's own cost shows without the
 * noise of the network and the server; with `--before=<dir>`, the ioredis stub also through
 * another copy of src/ (such as the code before the adapter: `git archive <commit> src`), in
 * the same rounds.
 *
 *   node --import tsx bench/redis-client-adapters.bench.ts [--rounds N] [--ms N] [--single | --cluster] [--source]
 *        [--cpu | --no-cpu] [--decisions N] [--before=<dir>]
 */
import { cpus, loadavg } from 'node:os'
import { Cluster as IoCluster, Redis as IoRedis } from 'ioredis'
import { Cluster as ValkeyCluster, Redis as Valkey } from 'iovalkey'
import { createClient as createClient6, createCluster as createCluster6 } from 'redis'
import { createClient as createClient5, createCluster as createCluster5 } from 'redis-5'
import type { RedisStrategy as RedisStrategyClass, SupportedRedisClient } from '../src/strategies/redis/index.js'
import { startRedisCluster, startRedisServer } from '../test/support/redis-server.js'
import { median, positiveIntOption } from './lib/harness.js'
import { loadOurs } from './lib/load-ours.js'
import { interleavedRounds, log, type RoundSample } from './lib/stores.js'

const args = process.argv.slice(2)
const ROUNDS = positiveIntOption(args, '--rounds', 7)
const ROUND_MS = positiveIntOption(args, '--ms', 1000)
const IN_FLIGHT = [1, 64]
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)
const topologies = args.includes('--cpu')
  ? []
  : args.includes('--single')
    ? ['single node']
    : args.includes('--cluster')
      ? ['3-master Cluster']
      : ['single node', '3-master Cluster']
const DECISIONS = positiveIntOption(args, '--decisions', 200_000)
const beforeDir = args.find((a) => a.startsWith('--before='))?.slice('--before='.length)

const engine = await loadOurs(args.includes('--source') ? 'source' : 'build')
const { RateLimiting } = engine.ours
const { RedisStrategy } = await engine.load<{ RedisStrategy: typeof RedisStrategyClass }>('strategies/redis/index.ts')

/** A connected client of one driver, and how to close it. */
interface Connected {
  readonly client: SupportedRedisClient
  close(): Promise<void>
}

type Connect = (single: string | undefined, clusterPorts: readonly number[]) => Promise<Connected>

const silence = (c: { on(event: 'error', listener: () => void): unknown }) => c.on('error', () => undefined)

// each client with its defaults, as a user would make it (node-redis 5 without its CLIENT SETINFO
// handshake, as docs/STORES-redis.md advises)
const drivers: Array<[string, Connect]> = [
  [
    'ioredis',
    async (url, ports) => {
      const client = url !== undefined ? new IoRedis(url) : new IoCluster(ports.map((port) => ({ host: '127.0.0.1', port })))
      return { client, close: async () => client.disconnect() }
    },
  ],
  [
    'iovalkey',
    async (url, ports) => {
      const client = url !== undefined ? new Valkey(url) : new ValkeyCluster(ports.map((port) => ({ host: '127.0.0.1', port })))
      return { client, close: async () => client.disconnect() }
    },
  ],
  [
    'node-redis 5',
    async (url, ports) => {
      const client =
        url !== undefined
          ? createClient5({ url, disableClientInfo: true })
          : createCluster5({
              rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })),
              defaults: { disableClientInfo: true },
            })
      silence(client)
      await client.connect()
      return { client, close: async () => client.destroy() }
    },
  ],
  [
    'node-redis 6',
    async (url, ports) => {
      const client =
        url !== undefined
          ? createClient6({ url })
          : createCluster6({ rootNodes: ports.map((port) => ({ url: `redis://127.0.0.1:${port}` })) })
      silence(client)
      await client.connect()
      return { client, close: async () => client.destroy() }
    },
  ],
]

interface Subject {
  readonly name: string
  readonly batch: 1
  readonly decide: (key: string) => unknown
  close(): Promise<void>
}

async function subject(name: string, connected: Connected): Promise<Subject> {
  const rl = RateLimiting.newInstance(`bench-adapters-${name}-${Math.random()}`)
  rl.new({ namespace: 'bench', windowSizes: [60], syncRate: 0, strategy: new RedisStrategy({ client: connected.client, prefix: 'bench' }) })
  const limiter = rl.limiter({ namespace: 'bench', limits: [{ limit: 1e9, window: 60 }] })
  return {
    name,
    batch: 1,
    decide: (key) => limiter.hit(key),
    close: async () => {
      await rl.close()
      await connected.close()
    },
  }
}

const rateOf = (s: RoundSample) => s.decisions / s.seconds
const int = (value: number) => Math.round(value).toLocaleString('en-US')
const rows: string[] = []
const loadAtStart = loadavg()[0] as number

for (const topology of topologies) {
  const single = topology === 'single node' ? await startRedisServer() : undefined
  const cluster = single === undefined ? await startRedisCluster(3) : undefined
  try {
    for (const inFlight of IN_FLIGHT) {
      const subjects: Subject[] = []
      for (const [name, connect] of drivers) subjects.push(await subject(name, await connect(single?.url, cluster?.ports ?? [])))
      // warm-up: connections, scripts loaded, every key's windows created, the code optimized
      await interleavedRounds(subjects, KEYS, inFlight, 1, 500)
      const samples = await interleavedRounds(subjects, KEYS, inFlight, ROUNDS, ROUND_MS)
      const ioredis = samples[0] ?? []
      for (const [i, s] of subjects.entries()) {
        const mine = samples[i] ?? []
        const rate = median(mine.map(rateOf))
        const cpu = median(mine.map((x) => x.cpuUs / x.decisions))
        const ratio = median(mine.map((x, r) => rateOf(x) / rateOf(ioredis[r] as RoundSample)))
        const perRound = mine.map((x) => int(rateOf(x))).join(', ')
        log(`${topology}, ${s.name}, ${inFlight} in flight: ${int(rate)} decisions/s, ${cpu.toFixed(1)} µs CPU/decision`)
        rows.push(
          `| ${topology} | ${inFlight} | ${s.name} | ${int(rate)} | ${(1e6 / rate).toFixed(1)} | ${cpu.toFixed(1)} | ${ratio.toFixed(2)}x | ${perRound} |`,
        )
        await s.close()
      }
    }
  } finally {
    await single?.stop()
    await cluster?.stop()
  }
}

// Answers our scripts as Redis would for a key seen for the first time: the nonce, then per
// key-window its total and own count (the written one holds the count sent).
function pushReply(numKeys: number, args: readonly (string | number)[]): string {
  const count = String(args[numKeys + 3])
  const parts = [String(args[numKeys]), count, count]
  for (let i = 1; i < numKeys; i++) parts.push('0', '0')
  return Buffer.from(parts.join(' ')).toString()
}
const ioredisStub = () => ({
  status: 'ready',
  evalsha: (_sha: string, numKeys: number, ...args: (string | number)[]) => Promise.resolve(pushReply(numKeys, args)),
  eval: (_source: string, numKeys: number, ...args: (string | number)[]) => Promise.resolve(pushReply(numKeys, args)),
  scan: () => Promise.resolve(['0', []]),
  unlink: () => Promise.resolve(0),
})
const nodeRedisStub = () => ({
  isOpen: true,
  connect: () => Promise.resolve(),
  // [EVALSHA|EVAL, sha, numKeys, ...keys and args]
  sendCommand: (args: string[]) => Promise.resolve(pushReply(Number(args[2]), args.slice(3))),
})

type Op = (key: string) => Promise<unknown>

async function cpuRound(op: Op, inFlight: number): Promise<number> {
  let i = 0
  const worker = async () => {
    while (i < DECISIONS) await op(KEYS[i++ % KEYS.length] as string)
  }
  const started = process.cpuUsage()
  await Promise.all(Array.from({ length: inFlight }, worker))
  const used = process.cpuUsage(started)
  return (used.user + used.system) / DECISIONS
}

const cpuRows: string[] = []
if (!args.includes('--no-cpu')) {
  const before = beforeDir === undefined ? undefined : await loadOurs('build', beforeDir)
  const stubSubjects: Array<[string, Op, () => Promise<void>]> = []
  const stubbed = async (name: string, client: unknown, e = engine): Promise<void> => {
    const { RedisStrategy: Strategy } = await e.load<{ RedisStrategy: typeof RedisStrategyClass }>('strategies/redis/index.ts')
    const rl = e.ours.RateLimiting.newInstance(`bench-adapters-cpu-${name}`)
    rl.new({
      namespace: 'api',
      windowSizes: [60],
      syncRate: 0,
      strategy: new Strategy({ client: client as SupportedRedisClient, prefix: 'b' }),
    })
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 1e12, window: 60 }] })
    stubSubjects.push([name, async (key) => await limiter.hit(key), () => rl.close()])
  }
  await stubbed('ioredis-shaped stub', ioredisStub())
  await stubbed('node-redis-shaped stub', nodeRedisStub())
  if (before !== undefined) await stubbed('ioredis-shaped stub, before', ioredisStub(), before)
  for (const inFlight of IN_FLIGHT) {
    for (const [, op] of stubSubjects) for (let w = 0; w < 20_000; w++) await op(KEYS[w % KEYS.length] as string) // warm-up
    const samples = stubSubjects.map((): number[] => [])
    for (let r = 0; r < ROUNDS; r++) {
      const order = stubSubjects.map((_, i) => i)
      if (r % 2 === 1) order.reverse()
      for (const i of order) samples[i]?.push(await cpuRound((stubSubjects[i] as [string, Op, unknown])[1], inFlight))
    }
    const first = samples[0] ?? []
    for (const [i, [name]] of stubSubjects.entries()) {
      const mine = samples[i] ?? []
      const ratio = median(mine.map((x, r) => x / (first[r] as number)))
      log(`without Redis, ${name}, ${inFlight} in flight: ${median(mine).toFixed(2)} µs CPU/decision`)
      cpuRows.push(
        `| ${inFlight} | ${name} | ${median(mine).toFixed(2)} | ${ratio.toFixed(2)}x | ${mine.map((x) => x.toFixed(2)).join(', ')} |`,
      )
    }
  }
  for (const [, , close] of stubSubjects) await close()
  before?.cleanup()
}
engine.cleanup()

const version = (name: string) =>
  import(`${name}/package.json`, { with: { type: 'json' } }).then((m: { default: { version: string } }) => m.default.version)
console.log(
  `Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, load average ${loadAtStart.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at the end); ioredis ${await version('ioredis')}, iovalkey ${await version('iovalkey')}, redis ${await version('redis-5')} and ${await version('redis')}; ${ROUNDS} rounds of ${ROUND_MS / 1000} s per subject.`,
)
if (rows.length > 0) {
  console.log('')
  console.log(
    '| topology | in flight | client | decisions/s (median) | µs per decision (1 / rate) | client CPU µs/decision | against ioredis (median of per-round ratios) | per round |',
  )
  console.log('|---|---:|---|---:|---:|---:|---:|---|')
  for (const row of rows) console.log(row)
}
if (cpuRows.length > 0) {
  console.log('')
  console.log(
    '| in flight | without Redis | client CPU µs/decision (median) | against the ioredis-shaped stub (median of per-round ratios) | per round |',
  )
  console.log('|---:|---|---:|---:|---|')
  for (const row of cpuRows) console.log(row)
}
