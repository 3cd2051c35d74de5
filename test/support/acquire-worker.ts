/**
 * A worker process for test/integration/acquire-redis.test.ts and examples/acquire.ts's fleet
 * test: one RateLimiting instance over Redis; on "start" it acquires RL_COUNT times on one key,
 * one after another, and answers with the time each hit was decided at.
 *
 * Env: RL_URL, RL_PREFIX, RL_NAMESPACE, RL_SYNC_RATE (s), RL_LIMIT (per 1 s), RL_COUNT.
 */
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { syncChannel } from '../../src/core/sync-loop.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'

/** Messages from the parent. */
export type AcquireWorkerCommand = { readonly type: 'start' } | { readonly type: 'exit' }

/** Messages to the parent. */
export type AcquireWorkerReply =
  | { readonly type: 'ready' }
  | {
      readonly type: 'done'
      readonly admittedAtMs: readonly number[]
      /** The longest time between two completed syncs while acquiring, ms (0 in synchronous mode). */
      readonly maxSyncGapMs: number
      readonly error?: string
    }

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`acquire-worker: ${name} is not set`)
  return value
}

const WINDOW_MS = 1000
const namespace = env('RL_NAMESPACE')
const strategy = new RedisStrategy({ url: env('RL_URL'), prefix: env('RL_PREFIX') })
const rl = RateLimiting.newInstance('acquire-worker')
rl.new({ namespace, windowSizes: [WINDOW_MS / 1000], syncRate: Number(env('RL_SYNC_RATE')), strategy, clock: Date.now })
const limiter = rl.limiter({ namespace, limits: [{ limit: Number(env('RL_LIMIT')), window: WINDOW_MS / 1000 }] })
const count = Number(env('RL_COUNT'))
const send = (reply: AcquireWorkerReply) => process.send?.(reply)

// How stale this process's view of the others can get: the gaps between its completed syncs (a
// loaded machine runs the timers late; the over-admission bound follows the real gaps).
let lastSyncAtMs = 0
let maxSyncGapMs = 0
syncChannel.subscribe(() => {
  const now = Date.now()
  if (lastSyncAtMs > 0) maxSyncGapMs = Math.max(maxSyncGapMs, now - lastSyncAtMs)
  lastSyncAtMs = now
})

async function run(): Promise<void> {
  const admittedAtMs: number[] = []
  lastSyncAtMs = 0
  maxSyncGapMs = 0
  try {
    for (let i = 0; i < count; i++) {
      const d = await limiter.acquire('fleet')
      // The time the hit was decided at (a synchronous hit resolves a round trip later):
      // resetMs = windowEnd - decidedAt, so decidedAt ≡ WINDOW_MS - resetMs (mod WINDOW_MS), at or before now.
      const now = Date.now()
      const offset = WINDOW_MS - d.resetMs
      admittedAtMs.push(Math.floor((now - offset) / WINDOW_MS) * WINDOW_MS + offset)
    }
    send({ type: 'done', admittedAtMs, maxSyncGapMs })
  } catch (err) {
    send({ type: 'done', admittedAtMs, maxSyncGapMs, error: String(err) })
  }
}

process.on('message', (command: AcquireWorkerCommand) => {
  if (command.type === 'start') void run()
  else
    void rl
      .close()
      .catch(() => undefined)
      .then(() => strategy.close())
      .finally(() => process.exit(0))
})

send({ type: 'ready' })
