/**
 * A worker process for test/integration/redis-multiprocess.test.ts: one RateLimiting instance
 * over the Redis strategy, syncing on its own timer like a production process. The parent sends
 * it hits over IPC and asks it to sync, report its view, and exit.
 *
 * Env: RL_URL, RL_PREFIX, RL_NAMESPACE, RL_SYNC_RATE (s), RL_WINDOW (s), RL_LIMIT.
 */
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'

/** Messages from the parent. */
export type WorkerCommand =
  | {
      readonly type: 'hits'
      readonly limited: number
      readonly counted: readonly string[]
    }
  | { readonly type: 'sync' }
  | { readonly type: 'report'; readonly keys: readonly string[] }
  | { readonly type: 'exit' }

/** Messages to the parent. */
export type WorkerReply =
  | { readonly type: 'ready' }
  | { readonly type: 'synced'; readonly error?: string }
  | {
      readonly type: 'report'
      readonly allowed: number
      readonly views: Record<string, number>
      readonly storeErrors: number
    }

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`redis-worker: ${name} is not set`)
  return value
}

const namespace = env('RL_NAMESPACE')
const windowSize = Number(env('RL_WINDOW'))
const strategy = new RedisStrategy({
  url: env('RL_URL'),
  prefix: env('RL_PREFIX'),
})
const rl = RateLimiting.newInstance('worker')
rl.new({
  namespace,
  windowSizes: [windowSize],
  syncRate: Number(env('RL_SYNC_RATE')),
  strategy,
})
const limiter = rl.limiter({
  namespace,
  limits: [{ limit: Number(env('RL_LIMIT')), window: windowSize }],
})
let allowed = 0

const send = (reply: WorkerReply) => process.send?.(reply)

process.on('message', (command: WorkerCommand) => {
  switch (command.type) {
    case 'hits':
      for (let i = 0; i < command.limited; i++) {
        const decision = limiter.hit('limited')
        if (!(decision instanceof Promise) && decision.allowed) allowed++
      }
      for (const key of command.counted) rl.increment(key, windowSize, 1, namespace)
      break
    case 'sync':
      rl.sync(namespace).then(
        () => send({ type: 'synced' }),
        (err: Error) => send({ type: 'synced', error: err.message }),
      )
      break
    case 'report': {
      const views: Record<string, number> = {}
      const table = rl.namespace(namespace).table(windowSize)
      for (const key of command.keys) {
        const { current, previous } = table.counts(key, Date.now())
        views[key] = current + previous
      }
      send({
        type: 'report',
        allowed,
        views,
        storeErrors: rl.stats(namespace).storeErrors,
      })
      break
    }
    case 'exit':
      rl.close()
        .catch(() => undefined)
        .then(() => strategy.close())
        .finally(() => process.exit(0))
      break
  }
})

send({ type: 'ready' })
