/**
 * memcached benchmark: our periodic mode, our synchronous mode and rate-limiter-flexible's
 * RateLimiterMemcache (over the `memcached` package), side by side in one run against a private
 * memcached on a free loopback port, at 1 and 256 decisions in flight. Reports decisions per
 * second (median of the rounds), server commands per decision (from the server's `stats`) and,
 * for ours, round trips per decision (pipelines sent by our client).
 *
 *   node --import tsx bench/memcached.bench.ts              full run, rewrites docs/BENCHMARKS-memcached.md
 *   node --import tsx bench/memcached.bench.ts --quick      a smoke run in seconds, prints only
 */
import { writeFileSync } from 'node:fs'
import net from 'node:net'
import { cpus, loadavg } from 'node:os'
import { relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import Memcached from 'memcached'
import { RateLimiterMemcache } from 'rate-limiter-flexible'
import { RateLimiting } from '../src/core/rate-limiting.js'
import { MemcachedClient, MemcachedStrategy } from '../src/strategies/memcached/index.js'
import { startPrivateMemcached } from '../test/support/memcached-server.js'
import { median } from './lib/harness.js'
import { log, measureDecisions } from './lib/stores.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const write = args.includes('--write') || (!quick && !args.includes('--no-write'))
const ROUNDS = quick ? 1 : 5
const ROUND_MS = quick ? 300 : 1500
const KEYS = Array.from({ length: 1000 }, (_, i) => `client-${i}`)
const IN_FLIGHT = [1, 256]
const LIMIT = 1e9 // every hit allowed: this measures the cost of a decision, not of a refusal

interface Subject {
  readonly name: string
  readonly batch: number
  readonly decide: (key: string) => unknown
  /** Round trips our client sent so far (undefined for a client we cannot count). */
  readonly roundTrips?: () => number
}

/** Commands the server executed so far: gets, sets (incl. add/append), incr/decr, touches, deletes. */
function serverCommands(port: number): Promise<number> {
  return new Promise((resolveStats, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let text = ''
    socket.on('connect', () => socket.write('stats\r\n'))
    socket.on('data', (d: Buffer) => {
      text += d.toString()
      if (!text.endsWith('END\r\n')) return
      socket.destroy()
      const stats = new Map(
        text
          .split('\r\n')
          .filter((l) => l.startsWith('STAT '))
          .map((l) => {
            const [, k, v] = l.split(' ')
            return [k, Number(v)] as const
          }),
      )
      const names = [
        'cmd_get',
        'cmd_set',
        'cmd_touch',
        'incr_hits',
        'incr_misses',
        'decr_hits',
        'decr_misses',
        'delete_hits',
        'delete_misses',
      ]
      resolveStats(names.reduce((sum, n) => sum + (stats.get(n) ?? 0), 0))
    })
    socket.on('error', reject)
  })
}

const server = await startPrivateMemcached()
const rows: string[] = []
try {
  const loadAtStart = loadavg()[0] as number

  // Each subject is built for its measurement and closed after it, so that no background work
  // (the periodic sync) runs during another subject's rounds.
  const makers: Array<{ name: string; make: () => Subject & { close(): Promise<void> } }> = [
    {
      name: 'ours, periodic (syncRate 0.1 s)',
      make: () => {
        const client = new MemcachedClient({ servers: [server.server] })
        const store = new MemcachedStrategy({ client, prefix: 'p:' })
        const rl = RateLimiting.newInstance('bench-mc-periodic')
        rl.new({ namespace: 'periodic', windowSizes: [60], syncRate: 0.1, strategy: store })
        const limiter = rl.limiter({ namespace: 'periodic', limits: [{ limit: LIMIT, window: 60 }] })
        return {
          name: 'ours, periodic (syncRate 0.1 s)',
          batch: 256,
          decide: (key) => limiter.hit(key),
          roundTrips: () => client.stats.roundTrips,
          close: async () => {
            await rl.close()
            await store.close()
            client.close()
          },
        }
      },
    },
    {
      name: 'ours, synchronous (syncRate 0)',
      make: () => {
        const client = new MemcachedClient({ servers: [server.server] })
        const store = new MemcachedStrategy({ client, prefix: 's:' })
        const rl = RateLimiting.newInstance('bench-mc-sync')
        rl.new({ namespace: 'sync', windowSizes: [60], syncRate: 0, strategy: store })
        const limiter = rl.limiter({ namespace: 'sync', limits: [{ limit: LIMIT, window: 60 }] })
        return {
          name: 'ours, synchronous (syncRate 0)',
          batch: 1,
          decide: (key) => limiter.hit(key),
          roundTrips: () => client.stats.roundTrips,
          close: async () => {
            await rl.close()
            await store.close()
            client.close()
          },
        }
      },
    },
    {
      name: 'rate-limiter-flexible RateLimiterMemcache',
      make: () => {
        const memcached = new Memcached(server.server, { poolSize: 10 })
        const rlf = new RateLimiterMemcache({ storeClient: memcached, keyPrefix: 'rlf', points: LIMIT, duration: 60 })
        return {
          name: 'rate-limiter-flexible RateLimiterMemcache',
          batch: 1,
          decide: (key) => rlf.consume(key),
          close: async () => memcached.end(),
        }
      },
    },
  ]

  const fmt = (x: number) => (x === 0 ? '0' : x < 0.001 ? x.toExponential(1) : x.toFixed(3))
  for (const inFlight of IN_FLIGHT) {
    // the local mode alone, then the store-bound subjects with their rounds interleaved, so that
    // load drifting on this shared machine weighs on both alike
    for (const group of [makers.slice(0, 1), makers.slice(1)]) {
      const subjects = group.map((m) => m.make())
      const rates = subjects.map(() => [] as number[])
      const commands = subjects.map(() => [] as number[])
      const trips = subjects.map(() => [] as number[])
      for (const subject of subjects) await measureDecisions(subject, KEYS, inFlight, quick ? 100 : 500) // warm-up
      for (let r = 0; r < ROUNDS; r++) {
        for (const [i, subject] of subjects.entries()) {
          const cmdBefore = await serverCommands(server.port)
          const rtBefore = subject.roundTrips?.() ?? 0
          const { decisions, seconds } = await measureDecisions(subject, KEYS, inFlight, ROUND_MS)
          const cmdAfter = await serverCommands(server.port)
          rates[i]?.push(decisions / seconds)
          commands[i]?.push((cmdAfter - cmdBefore) / decisions)
          trips[i]?.push(((subject.roundTrips?.() ?? 0) - rtBefore) / decisions)
        }
      }
      for (const [i, subject] of subjects.entries()) {
        await subject.close()
        const rate = Math.round(median(rates[i] ?? [])).toLocaleString('en-US')
        const cmd = median(commands[i] ?? [])
        const rtText = subject.roundTrips === undefined ? `${fmt(cmd)} (one per command)` : fmt(median(trips[i] ?? []))
        log(`${subject.name}, ${inFlight} in flight: ${rate} decisions/s, ${fmt(cmd)} commands/decision, round trips ${rtText}`)
        rows.push(`| ${subject.name} | ${inFlight} | ${rate} | ${fmt(cmd)} | ${rtText} |`)
      }
    }
  }

  const here = fileURLToPath(import.meta.url)
  const command = ['node', ...process.execArgv, relative(process.cwd(), here), ...args].join(' ')
  const text = `# Benchmarks: memcached

Decisions per second (median of ${ROUNDS} rounds of ${ROUND_MS / 1000} s), server commands per
decision (deltas of the server's \`stats\`: gets, sets/adds/appends, incr/decr, touches, deletes)
and round trips per decision (pipelines our client sent; a pipeline of several commands is one
round trip), for one limit of a 60 s window over 1,000 keys, every hit allowed. "In flight" is the number of decisions in progress at once (async workers in one
process; a decision returned synchronously, as periodic mode returns it, is used without an
\`await\`, as the adapters do). A private memcached
(1 thread, loopback) serves each run.

| subject | in flight | decisions/s | commands/decision | round trips/decision |
|---|---:|---:|---:|---:|
${rows.join('\n')}

- Periodic mode decides locally and sends one pipeline per sync (every 100 ms) for the keys hit
  since: its commands per decision fall as the request rate grows.
- Synchronous mode sends one pipeline per decision: \`add\` + \`append\` of this node's entry to
  the current window's log and \`mg\` of the current and previous windows (4 commands; 6 on a
  key-window's first hit, which also adds it to the index), plus now and then a compaction (CAS).
- RateLimiterMemcache sends \`incr\`, then \`get\` of the key's \`_expire\` item, one after the
  other: 2 commands and 2 round trips per decision (plus \`add\`s when a key is created).
- The machine is shared with other work, so figures move by tens of percent between runs; compare
  rows of one run.

Run on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared
with other work: load average ${loadAtStart.toFixed(1)} at start, ${(loadavg()[0] as number).toFixed(1)} at end).

Command:

    ${command}
`
  process.stdout.write(`${text}\n`)
  if (write) {
    const path = resolve(here, '..', '..', 'docs', 'BENCHMARKS-memcached.md')
    writeFileSync(path, text)
    log(`wrote ${relative(process.cwd(), path)}`)
  }
} finally {
  await server.kill()
}
