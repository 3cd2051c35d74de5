/**
 * Periodic sync at scale: a process holds 1,000,000 keys on Redis, and a moving 1% of them (0.5% in
 * one row) are hit in each 1 s sync period. Ways to sync, side by side against one redis-server the
 * bench starts on a free loopback port:
 *
 * - timer-driven syncs (this engine): the keys hit since the last sync, the keys near a limit, and
 *   a slice of the idle ones no larger than the keys in use (docs/ARCHITECTURE.md, "Which keys a
 *   sync visits"), with one script call per hash slot and with `batchAcrossSlots` (the default on
 *   one server);
 * - every key each period (what every sync did before, and what `rl.sync()` still does).
 *
 * Why 1 s: a moving 1% at 0.1 s is 100,000 new keys a second, each a write and two reads; one
 * Redis server on this machine does about 10 µs of work per key-window in per-slot script calls,
 * so no sync design keeps up with that on one server. 1 s is the service's default sync rate.
 *
 * It reports the syncs completed, how long one took, the longest time between two completed syncs
 * (the sync lag a process can show), the key-windows one sync sent, and the Redis commands per
 * sync (`INFO commandstats`, those run inside scripts included).
 *
 *   node --import tsx bench/sync-scale.bench.ts           full run, rewrites its section of docs/BENCHMARKS-sync.md
 *   node --import tsx bench/sync-scale.bench.ts --quick   100,000 keys for a few seconds, prints only
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { writeFileSync } from 'node:fs'
import { cpus, loadavg } from 'node:os'
import { relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { RateLimiting } from '../src/core/rate-limiting.js'
import { RedisStrategy } from '../src/strategies/redis/index.js'
import { startRedisServer } from '../test/support/redis-server.js'
import { median } from './lib/harness.js'
import { log } from './lib/stores.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const write = args.includes('--write') || (!quick && !args.includes('--no-write'))
const HELD = quick ? 100_000 : 1_000_000
const SYNC_RATE = 1 // s
const RUN_MS = quick ? 3_000 : 15_000
const TICK_MS = 10
const LIMIT = 1_000_000 // keys stay far from it: "near the limit" plays no part here

interface SyncEvent {
  readonly durationMs: number
  readonly windows: number
  readonly refreshed: number
  readonly error?: unknown
}

interface ModeResult {
  readonly name: string
  readonly syncs: number
  readonly failed: number
  readonly durationMs: number
  readonly maxDurationMs: number
  readonly maxGapMs: number
  readonly keyWindowsPerSync: number
  readonly commandsPerSync: number
  readonly hitsPerSecond: number
}

async function commandsExecuted(admin: Redis): Promise<number> {
  const text = await admin.info('commandstats')
  let total = 0
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) if (match[1] !== 'info') total += Number(match[2])
  return total
}

interface Mode {
  readonly name: string
  readonly timerDriven: boolean
  readonly batchAcrossSlots: boolean
  /** Of the held keys, hit in each sync period. */
  readonly activeShare: number
}

async function runMode(url: string, admin: Redis, mode: Mode): Promise<ModeResult> {
  const { name, timerDriven, batchAcrossSlots, activeShare } = mode
  const client = new Redis(url)
  const prefix = `sync-${timerDriven ? 'timer' : 'all'}-${batchAcrossSlots ? 'batched' : 'slots'}-${activeShare}`
  const strategy = new RedisStrategy({ client, prefix, batchAcrossSlots })
  const rl = RateLimiting.newInstance(prefix)
  rl.new({ namespace: 'held', windowSizes: [60], syncRate: SYNC_RATE, strategy, autoSync: false, storeTimeoutMs: 60_000 })
  const limiter = rl.limiter({ namespace: 'held', limits: [{ limit: LIMIT, window: 60 }] })
  const keys = Array.from({ length: HELD }, (_, i) => `user-${i}`)
  log(`${name}: holding ${HELD.toLocaleString('en-US')} keys`)
  const loadStart = performance.now()
  for (const key of keys) limiter.hit(key)
  await rl.sync('held')
  log(`${name}: loaded and synced in ${((performance.now() - loadStart) / 1000).toFixed(1)} s`)

  // the run: 1% of the keys each period, spread over ticks; syncs as the mode makes them
  const ns = rl.namespace('held')
  const events: Array<SyncEvent & { endMs: number }> = []
  const onSync = (message: unknown) => {
    const event = message as SyncEvent & { namespace: string }
    if (event.namespace === 'held') events.push({ ...event, endMs: performance.now() })
  }
  subscribe('ratelimiting:sync', onSync)
  await admin.config('RESETSTAT')
  const commandsBefore = await commandsExecuted(admin)
  const started = performance.now()
  let hits = 0
  let running = true
  // the timer-driven mode runs the engine's own timer; the other syncs every key each period,
  // starting the next as soon as one ends when it takes longer than the period
  const syncer = (async () => {
    while (running) {
      const due = performance.now() + SYNC_RATE * 1000
      if (timerDriven) await ns.sync(false).catch(() => undefined)
      else await ns.sync(true).catch(() => undefined)
      const wait = due - performance.now()
      if (wait > 0) await new Promise((r) => setTimeout(r, wait))
    }
  })()
  const perTick = Math.round((HELD * activeShare * TICK_MS) / (SYNC_RATE * 1000))
  let cursor = 0
  while (performance.now() - started < RUN_MS) {
    const tickDue = performance.now() + TICK_MS
    for (let i = 0; i < perTick; i++) {
      // a moving 1% of the keys: each period hits keys the previous one did not
      cursor = (cursor + 7919) % HELD
      limiter.hit(keys[cursor] as string)
      hits++
    }
    const wait = tickDue - performance.now()
    await new Promise((r) => setTimeout(r, Math.max(0, wait)))
  }
  running = false
  await syncer
  const elapsedMs = performance.now() - started
  const commands = (await commandsExecuted(admin)) - commandsBefore
  unsubscribe('ratelimiting:sync', onSync)
  const ok = events.filter((e) => e.error === undefined)
  // from the start of the run: a mode whose first sync ends late shows that gap too
  let maxGapMs = 0
  let previousEndMs = started
  for (const e of ok) {
    maxGapMs = Math.max(maxGapMs, e.endMs - previousEndMs)
    previousEndMs = e.endMs
  }
  const result: ModeResult = {
    name,
    syncs: ok.length,
    failed: events.length - ok.length,
    durationMs: ok.length === 0 ? Number.NaN : median(ok.map((e) => e.durationMs)),
    maxDurationMs: Math.max(0, ...ok.map((e) => e.durationMs)),
    maxGapMs,
    keyWindowsPerSync: ok.length === 0 ? 0 : median(ok.map((e) => e.windows + e.refreshed)),
    commandsPerSync: ok.length === 0 ? 0 : commands / ok.length,
    hitsPerSecond: hits / (elapsedMs / 1000),
  }
  log(`${name}: ${JSON.stringify(result)}`)
  await rl.close()
  await client.quit()
  return result
}

const server = await startRedisServer()
const admin = new Redis(server.url)
const loadAtStart = loadavg()[0] as number
let results: ModeResult[]
try {
  const modes: Mode[] = [
    { name: 'timer-driven, 1% in use (a call per slot)', timerDriven: true, batchAcrossSlots: false, activeShare: 0.01 },
    { name: 'timer-driven, 0.5% in use (a call per slot)', timerDriven: true, batchAcrossSlots: false, activeShare: 0.005 },
    {
      name: 'timer-driven, 1% in use, `batchAcrossSlots` (the default on one server)',
      timerDriven: true,
      batchAcrossSlots: true,
      activeShare: 0.01,
    },
    { name: 'every key each period (`rl.sync()`), 1% in use', timerDriven: false, batchAcrossSlots: false, activeShare: 0.01 },
  ]
  results = []
  for (const mode of modes) {
    results.push(await runMode(server.url, admin, mode))
    await admin.flushall() // this bench's own server: the next mode starts empty
  }
} finally {
  admin.disconnect()
  await server.kill()
}

const ms = (v: number) => `${v.toFixed(0)} ms`
const fmt = (v: number) => Math.round(v).toLocaleString('en-US')
const here = fileURLToPath(import.meta.url)
const command = `node --import tsx ${relative(process.cwd(), here) || here}${quick ? ' --quick' : ''}`
const lines = [
  '## Periodic sync at scale',
  '',
  `${fmt(HELD)} keys held on Redis, a moving 1% of them (0.5% in one row) hit in each ${SYNC_RATE * 1000} ms sync period,`,
  `for ${RUN_MS / 1000} s per row, on a redis-server of the bench's own. Command: \`${command}\`.`,
  '',
  '| sync | syncs | one sync (median / max) | longest gap between syncs | key-windows per sync | Redis commands per sync | hits/s |',
  '| --- | ---: | ---: | ---: | ---: | ---: | ---: |',
  ...results.map(
    (r) =>
      `| ${r.name} | ${r.syncs}${r.failed > 0 ? ` (+${r.failed} failed)` : ''} | ${ms(r.durationMs)} / ${ms(r.maxDurationMs)} | ${ms(r.maxGapMs)} | ${fmt(r.keyWindowsPerSync)} | ${fmt(r.commandsPerSync)} | ${fmt(r.hitsPerSecond)} |`,
  ),
  '',
  `Target: the longest gap at most 2 x syncRate (${2 * SYNC_RATE * 1000} ms), and commands per sync in proportion to the keys in`,
  `use (${fmt(HELD * 0.01)} a period at 1%), not to the keys held. Redis commands count those run inside scripts`,
  '(`INFO commandstats`).',
  '',
  `Run on ${new Date().toISOString().slice(0, 10)}: Node ${process.version}, ${cpus()[0]?.model.trim() ?? 'unknown CPU'} (${cpus().length} cores, shared`,
  `with other work: load average ${loadAtStart.toFixed(1)} at the start).`,
]
const section = lines.join('\n')
process.stdout.write(`${section}\n`)
if (write) {
  const path = resolve(here, '..', '..', 'docs', 'BENCHMARKS-sync.md')
  writeFileSync(path, `# Benchmarks: periodic sync\n\n${section}\n`)
  log(`wrote ${relative(process.cwd(), path)}`)
}
