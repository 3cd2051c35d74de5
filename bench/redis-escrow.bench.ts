/**
 * Store traffic of escrow namespaces on Redis in the many-keys shape (issue 28, target 2): four
 * RateLimiting instances in this process, each with its own ioredis client, on a redis-server of
 * the bench's own; 4,000 decisions/s in all, 10,000 keys round robin (each key visits every
 * instance in turn), limit 100 per 60 s. Per decision: ESCROW (or PUSH) script calls and Redis
 * commands (every command INFO commandstats counts, those the scripts run included; INFO itself
 * left out), and the share of decisions that waited on the store. Escrow at syncRate 1 and 0.1,
 * and plain periodic mode beside it. Prints only.
 *
 *   node --import tsx bench/redis-escrow.bench.ts [--seconds 60] [--rate 4000] [--slots]
 *
 * `--slots`: one call per hash slot (an epoch key per slot, as on a Cluster) instead of
 * batchAcrossSlots (one epoch key per namespace, the single server's way).
 */
import { Redis } from 'ioredis'
import { positiveIntOption } from './lib/harness.js'
import { startRedisProcess } from './lib/service-process.js'
import { RateLimiting } from '../src/core/rate-limiting.js'
import type { Limiter } from '../src/core/limiter.js'
import { RedisStrategy } from '../src/strategies/redis/index.js'

const args = process.argv.slice(2)
const SECONDS = positiveIntOption(args, '--seconds', 60)
const RATE = positiveIntOption(args, '--rate', 4000)
const PER_SLOT = args.includes('--slots')
const INSTANCES = 4
const KEYS = 10_000
const LIMIT = 100
const WINDOW_S = 60

const redis = await startRedisProcess()

interface Row {
  readonly mode: string
  readonly decisions: number
  readonly scriptCalls: number
  readonly commands: number
  readonly waited: number
  readonly allowed: number
}

async function run(mode: string, escrow: boolean, syncRate: number): Promise<Row> {
  const clients: Redis[] = []
  const instances: RateLimiting[] = []
  const limiters: Limiter[] = []
  const namespace = `bench-${mode.replace(/\W/g, '')}`
  for (let i = 0; i < INSTANCES; i++) {
    const client = new Redis(redis.url, { maxRetriesPerRequest: 1 })
    clients.push(client)
    const rl = RateLimiting.newInstance(`escrow-bench-${namespace}-${i}`)
    rl.new({
      namespace,
      windowSizes: [WINDOW_S],
      syncRate,
      strategy: new RedisStrategy({ client, batchAcrossSlots: !PER_SLOT }),
      escrow,
      onError: () => undefined,
    })
    instances.push(rl)
    limiters.push(rl.limiter({ namespace, limits: [{ limit: LIMIT, window: WINDOW_S }] }))
  }
  let j = 0
  let waited = 0
  let allowed = 0
  let decisions = 0
  const drive = async (seconds: number, count: boolean): Promise<void> => {
    const started = Date.now()
    let made = 0
    const pending: Promise<unknown>[] = []
    while (Date.now() - started < seconds * 1000) {
      const due = Math.floor(((Date.now() - started) / 1000) * RATE)
      for (; made < due; made++, j++) {
        const key = `user-${j % KEYS}`
        // each lap of the keys moves them to the next instance
        const limiter = limiters[(j + Math.floor(j / KEYS)) % INSTANCES] as Limiter
        const d = limiter.hit(key)
        if (!count) continue
        decisions++
        if (d instanceof Promise) {
          waited++
          pending.push(d.then((x) => x.allowed && allowed++))
        } else if (d.allowed) allowed++
      }
      await new Promise((resolve) => setTimeout(resolve, 5))
    }
    await Promise.all(pending)
  }
  // the store's first learning period (escrow) and every key's first grant or push
  await drive(4, false)
  const before = await redis.commandCalls()
  await drive(SECONDS, true)
  const after = await redis.commandCalls()
  for (const rl of instances) await rl.close()
  for (const c of clients) c.disconnect()
  const delta = (name: string) => (after.get(name) ?? 0) - (before.get(name) ?? 0)
  let commands = 0
  for (const name of after.keys()) if (name !== 'info') commands += delta(name)
  return { mode, decisions, scriptCalls: delta('evalsha') + delta('eval'), commands, waited, allowed }
}

const rows: Row[] = []
for (const [mode, escrow, syncRate] of [
  ['escrow, syncRate 1', true, 1],
  ['escrow, syncRate 0.1', true, 0.1],
  ['periodic, syncRate 1', false, 1],
  ['periodic, syncRate 0.1', false, 0.1],
] as const) {
  rows.push(await run(mode, escrow, syncRate))
}
await redis.stop()

console.log(
  `${INSTANCES} instances, ${KEYS} keys round robin, ${RATE} decisions/s for ${SECONDS} s, limit ${LIMIT} per ${WINDOW_S} s, ${PER_SLOT ? 'a call per hash slot' : 'batchAcrossSlots'}`,
)
console.log('| mode | decisions | script calls / decision | Redis commands / decision | waited on the store | allowed |')
console.log('|---|---:|---:|---:|---:|---:|')
for (const r of rows)
  console.log(
    `| ${r.mode} | ${r.decisions} | ${(r.scriptCalls / r.decisions).toFixed(3)} | ${(r.commands / r.decisions).toFixed(3)} | ${((100 * r.waited) / r.decisions).toFixed(2)}% | ${((100 * r.allowed) / r.decisions).toFixed(1)}% |`,
  )
