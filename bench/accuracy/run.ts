/**
 * The accuracy harness (issue 12): N simulated processes of the engine, each a RateLimiting
 * instance with its own nodeId over one shared MemoryStrategy, on a fake clock, replay the
 * synthetic traces of src/simulate/profiles.ts; an exact sliding log of what each cell truly
 * admitted is the truth (src/simulate/truth.ts). Prints one table per trace; `--write` also
 * replaces the tables in docs/ACCURACY.md.
 *
 *   npm run bench:accuracy                 # print
 *   npm run bench:accuracy -- --write      # print and update docs/ACCURACY.md
 *   npm run bench:accuracy -- --quick      # shorter traces, for a look
 *   npm run bench:accuracy -- --jobs 1     # one cell at a time (default: one per CPU)
 *   npm run bench:accuracy -- --redis      # the same on a redis-server of its own (prints only)
 *   npm run bench:accuracy -- --only counter,counter-escrow --traces poisson,pacing   # some algorithms and traces
 *   npm run bench:accuracy -- --nodes 64 --only counter,counter-escrow --traces poisson  # a large fleet
 *
 * With --redis every shard of a cell's fleet syncs through a RedisStrategy on a redis-server the
 * bench starts (bench/lib/replay-redis.ts), one cell at a time on this thread (a store cannot
 * be sent to a worker), the traces starting at the next window boundary from now (Redis expires
 * the key-windows at times computed from the fake clock). Its tables are those of the memory
 * store, figure for figure (test/integration/simulate-redis.test.ts checks that on a small
 * trace); what it adds is the proof on a real server and the store's own counters.
 *
 * The replay itself (the fleet, the truth, the metrics) is src/simulate's, which
 * `ratelimiting simulate` runs on a user's log.
 */
import { readFileSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { Redis } from 'ioredis'
import { type ProfileName, syntheticTrace } from '../../src/simulate/profiles.js'
import { runGridParallel } from '../../src/simulate/parallel.js'
import { availableAlgorithms, gridCells } from '../../src/simulate/replay.js'
import { markdownTable, resultRows } from '../../src/simulate/report.js'
import { type BenchRedis, singleNode } from '../lib/redis-bench.js'
import { deleteReplayKeys, redisShardStores, replayStartMs } from '../lib/replay-redis.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const argv = process.argv.slice(2)
const args = new Set(argv)
const quick = args.has('--quick')
const jobsAt = argv.indexOf('--jobs')
const jobs = jobsAt >= 0 ? Number(argv[jobsAt + 1]) : undefined
const onRedis = args.has('--redis')
const listArg = (flag: string): Set<string> | undefined => {
  const at = argv.indexOf(flag)
  return at >= 0 ? new Set((argv[at + 1] ?? '').split(',')) : undefined
}
const onlyAlgorithms = listArg('--only')
const onlyTraces = listArg('--traces')
if ((onlyAlgorithms !== undefined || onlyTraces !== undefined) && args.has('--write'))
  throw new Error('--only and --traces print only: docs/ACCURACY.md holds every algorithm on every trace')
if (onRedis && args.has('--write')) throw new Error('--redis prints only: the tables of docs/ACCURACY.md come from the memory store')
const LIMIT = 100
const WINDOW = 60
const nodesAt = argv.indexOf('--nodes')
const NODES = nodesAt >= 0 ? (argv[nodesAt + 1] ?? '').split(',').map(Number) : [1, 8]
if (nodesAt >= 0 && args.has('--write')) throw new Error('--nodes prints only: docs/ACCURACY.md holds 1 and 8 processes')
const SYNC_RATES = [0.5, 2]

interface Case {
  readonly title: string
  readonly profile: ProfileName
  readonly durationSec: number
  readonly keys?: number
  readonly countDenied: boolean
}

const CASES: Case[] = [
  {
    title: 'Poisson arrivals, 1,000 keys, log-normal rates',
    profile: 'poisson',
    durationSec: quick ? 120 : 600,
    keys: 1000,
    countDenied: true,
  },
  {
    title: 'One key steadily at 1.5 × the limit, denied hits not counted',
    profile: 'steady',
    durationSec: quick ? 300 : 1200,
    countDenied: false,
  },
  {
    title: 'One key steadily at 1.5 × the limit (the engine default: denied hits count)',
    profile: 'steady',
    durationSec: quick ? 300 : 1200,
    countDenied: true,
  },
  {
    title: '`limit` hits on both sides of a window boundary, 20 keys',
    profile: 'boundary',
    durationSec: quick ? 240 : 1200,
    keys: 20,
    countDenied: true,
  },
  {
    title: 'A burst, then tries paced to the decaying weight, 20 keys',
    profile: 'pacing',
    durationSec: quick ? 240 : 1200,
    keys: 20,
    countDenied: true,
  },
]

const sections: string[] = []
const started = performance.now()
const redis: BenchRedis | undefined = onRedis ? await singleNode() : undefined
// a single node's client (a Cluster only from cluster())
const client = redis?.client() as Redis | undefined
try {
  if (redis !== undefined) console.log(`on redis-server ${await redis.version()} (a server of this run's own)\n`)
  for (const [i, c] of CASES.entries()) {
    if (onlyTraces !== undefined && !onlyTraces.has(c.profile)) continue
    const trace = syntheticTrace({
      profile: c.profile,
      limit: LIMIT,
      windowSec: WINDOW,
      durationSec: c.durationSec,
      ...(c.keys ? { keys: c.keys } : {}),
      ...(onRedis ? { startMs: replayStartMs(WINDOW) } : {}),
    })
    const t0 = performance.now()
    const before = await redis?.counters()
    // the cells of a trace on worker threads, one per CPU (--jobs N to change; the figures are alike)
    const results = await runGridParallel(
      trace,
      gridCells(
        availableAlgorithms().filter((a) => onlyAlgorithms === undefined || onlyAlgorithms.has(a.name)),
        NODES,
        SYNC_RATES,
      ),
      {
        limit: LIMIT,
        windowSec: WINDOW,
        countDenied: c.countDenied,
        ...(client !== undefined ? { strategy: redisShardStores(client, `replay-${i}`) } : {}),
      },
      jobs === undefined ? {} : { jobs },
    )
    const store =
      redis === undefined || before === undefined
        ? ''
        : `; Redis: ${(((await redis.counters()).sent ?? 0) - (before.sent ?? 0)).toLocaleString('en-US')} calls`
    const heading = `### ${c.title}\n\n${trace.length} hits over ${c.durationSec} s (profile \`${c.profile}\`, ${c.countDenied ? 'denied hits count' : 'denied hits do not count'}; replayed in ${((performance.now() - t0) / 1000).toFixed(1)} s${store})`
    const section = `${heading}\n\n${markdownTable(resultRows(results))}\n`
    console.log(`${section}`)
    sections.push(section)
    if (client !== undefined) await deleteReplayKeys(client, `replay-${i}`)
  }
} finally {
  client?.disconnect()
  await redis?.stop()
}
console.log(`all traces: ${((performance.now() - started) / 1000).toFixed(1)} s`)

if (args.has('--write')) {
  const file = path.join(root, 'docs', 'ACCURACY.md')
  const text = readFileSync(file, 'utf8')
  const begin = '<!-- tables: bench/accuracy/run.ts -->'
  const end = '<!-- end of tables -->'
  const from = text.indexOf(begin)
  const to = text.indexOf(end)
  if (from < 0 || to < from) throw new Error(`docs/ACCURACY.md has no ${begin} … ${end} section`)
  writeFileSync(file, `${text.slice(0, from + begin.length)}\n\n${sections.join('\n')}\n${text.slice(to)}`)
  console.log('docs/ACCURACY.md updated')
}
