/**
 * Several OS processes (test/support/redis-worker.ts) share keys through one Redis (the shared
 * server on 6379, under a prefix of this run's own) with syncRate 0.05 s. Requests go to the
 * processes round-robin, like a load balancer would send them. Checks that every process
 * converges to the exact totals, and measures the over-admission against a limit.
 *
 * The bound: a process knows the others' hits as of their last push, so at worst it admits the
 * hits the others took since, (P - 1) / P of the request rate, for one sync period; plus the
 * tolerance explained below.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, fork } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import path from 'node:path'
import { after, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { windowStartMs } from '../../src/core/window.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { sharedRedisUrl } from '../support/redis-server.js'
import type { WorkerCommand, WorkerReply } from '../support/redis-worker.js'

const PROCESSES = 4
const SYNC_RATE = 0.05 // s
const WINDOW = 3600 // s: the run stays inside one window (or crosses one boundary at most)
const LIMIT = 1000
const LIMITED_RATE = 2000 // requests/s on the limited key, all processes together
const COUNTED_RATE = 1200 // requests/s spread over COUNTED keys
const COUNTED = ['a', 'b', 'c']
const DURATION_MS = 2000
const TICK_MS = 5

const workerPath = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../support/redis-worker.ts')
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

function next<T extends WorkerReply['type']>(child: ChildProcess, type: T): Promise<Extract<WorkerReply, { type: T }>> {
  return new Promise((resolve, reject) => {
    const onMessage = (message: WorkerReply) => {
      if (message.type !== type) return
      child.off('message', onMessage)
      child.off('exit', onExit)
      resolve(message as Extract<WorkerReply, { type: T }>)
    }
    const onExit = (code: number | null) => reject(new Error(`worker exited (${code}) while waiting for "${type}"`))
    child.on('message', onMessage)
    child.once('exit', onExit)
  })
}

function send(child: ChildProcess, command: WorkerCommand): void {
  child.send(command)
}

describe('redis: several processes share one limit', () => {
  const run = randomUUID().slice(0, 8)
  const prefix = `rltest-mp-${run}`
  const namespace = `mp-${run}`
  const workers: ChildProcess[] = []
  after(async () => {
    for (const child of workers) if (child.exitCode === null) child.kill('SIGKILL')
    const redis = new Redis(await sharedRedisUrl())
    let cursor = '0'
    do {
      const [nextCursor, names] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000)
      cursor = nextCursor
      if (names.length > 0) await Promise.all(names.map((name) => redis.unlink(name)))
    } while (cursor !== '0')
    await redis.quit()
  })

  it('converges to exact totals and over-admits within (P-1)/P x rate x syncRate', async (t) => {
    const url = await sharedRedisUrl()
    const env = {
      ...process.env,
      RL_URL: url,
      RL_PREFIX: prefix,
      RL_NAMESPACE: namespace,
      RL_SYNC_RATE: String(SYNC_RATE),
      RL_WINDOW: String(WINDOW),
      RL_LIMIT: String(LIMIT),
    }
    for (let i = 0; i < PROCESSES; i++) {
      workers.push(
        fork(workerPath, [], {
          env,
          execArgv: ['--import', 'tsx'],
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
        }),
      )
    }
    await Promise.all(workers.map((w) => next(w, 'ready')))

    // Requests round-robin over the processes, dispatched every tick as the clock says.
    const totals = new Map<string, number>([['limited', 0], ...COUNTED.map((k): [string, number] => [k, 0])])
    let limitedSent = 0
    let countedSent = 0
    const started = performance.now()
    let elapsedMs = 0
    while (elapsedMs < DURATION_MS) {
      await sleep(TICK_MS)
      elapsedMs = Math.min(performance.now() - started, DURATION_MS)
      const batches = workers.map(() => ({
        limited: 0,
        counted: [] as string[],
      }))
      for (const target = Math.floor((LIMITED_RATE * elapsedMs) / 1000); limitedSent < target; limitedSent++) {
        ;(batches[limitedSent % PROCESSES] as { limited: number }).limited++
      }
      for (const target = Math.floor((COUNTED_RATE * elapsedMs) / 1000); countedSent < target; countedSent++) {
        const key = COUNTED[Math.floor(countedSent / PROCESSES) % COUNTED.length] as string
        batches[countedSent % PROCESSES]?.counted.push(key)
        totals.set(key, (totals.get(key) ?? 0) + 1)
      }
      for (const [i, batch] of batches.entries()) send(workers[i] as ChildProcess, { type: 'hits', ...batch })
    }
    const measuredRate = (limitedSent * 1000) / (performance.now() - started)
    totals.set('limited', limitedSent) // denied hits count too (countDenied defaults to true)

    // A final sync everywhere: one round pushes, the next reads what the others pushed.
    for (let round = 0; round < 2; round++) {
      for (const w of workers) send(w, { type: 'sync' })
      const synced = await Promise.all(workers.map((w) => next(w, 'synced')))
      for (const s of synced) assert.equal(s.error, undefined)
    }
    const keys = [...totals.keys()]
    for (const w of workers) send(w, { type: 'report', keys })
    const reports = await Promise.all(workers.map((w) => next(w, 'report')))
    for (const w of workers) send(w, { type: 'exit' })

    for (const [i, report] of reports.entries()) {
      assert.deepEqual(report.views, Object.fromEntries(totals), `process ${i} sees the exact totals`)
      assert.equal(report.storeErrors, 0)
    }
    const observer = new RedisStrategy({ url, prefix })
    const windowMs = WINDOW * 1000
    const start = windowStartMs(Date.now(), windowMs)
    for (const [key, total] of totals) {
      const stored =
        (await observer.getWindow(key, namespace, start, windowMs)).count +
        (await observer.getWindow(key, namespace, start - windowMs, windowMs)).count
      assert.equal(stored, total, `the store holds the exact total of ${key}`)
    }
    await observer.close()

    const admitted = reports.reduce((sum, r) => sum + r.allowed, 0)
    const overAdmitted = admitted - LIMIT
    const bound = ((PROCESSES - 1) / PROCESSES) * measuredRate * SYNC_RATE
    // The tolerance (docs/STORES-redis.md, "Over-admission"): timer-driven syncs read the totals
    // back syncRate / 20 after pushing (Kong's settle time), so knowledge of the others is that much
    // older than one period; and this test delivers requests in ticks, R x tick of them at once,
    // before any process could react.
    const tolerance = ((PROCESSES - 1) / PROCESSES) * measuredRate * (SYNC_RATE / 20) + (measuredRate * TICK_MS) / 1000
    t.diagnostic(
      `${PROCESSES} processes, ${measuredRate.toFixed(0)} req/s on one key, syncRate ${SYNC_RATE} s, limit ${LIMIT}: ` +
        `admitted ${admitted}, over-admission ${overAdmitted} (${((100 * overAdmitted) / LIMIT).toFixed(1)}% of the limit), bound ${bound.toFixed(1)} + tolerance ${tolerance.toFixed(1)}`,
    )
    assert.ok(admitted >= LIMIT, `never under-admits: ${admitted} admitted`)
    assert.ok(
      overAdmitted <= bound + tolerance,
      `over-admission ${overAdmitted} within the bound ${bound.toFixed(1)} + tolerance ${tolerance.toFixed(1)}`,
    )
    await Promise.all(workers.map((w) => (w.exitCode === null ? new Promise((resolve) => w.once('exit', resolve)) : undefined)))
  })
})
