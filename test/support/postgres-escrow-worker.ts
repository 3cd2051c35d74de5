/**
 * A worker process for test/integration/postgres-escrow-faults.test.ts: one RateLimiting instance
 * with an escrow namespace on PostgreSQL, syncing on its own timer like a production process. The
 * parent sends it hits over IPC (one at a time, each answered) and may kill it while it holds
 * budget.
 *
 * Env: RL_URL, RL_SCHEMA, RL_NAMESPACE, RL_LIMIT, RL_CLOCK_OFFSET_MS (the fleet's clock: Date.now() plus it).
 */
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { PostgresStrategy } from '../../src/strategies/postgres/index.js'

/** Messages from the parent. */
export type EscrowWorkerCommand = { readonly type: 'hit'; readonly key: string } | { readonly type: 'exit' }

/** Messages to the parent. */
export type EscrowWorkerReply =
  | { readonly type: 'ready'; readonly nodeId: string }
  | { readonly type: 'hit'; readonly allowed: boolean; readonly reason: string; readonly local: boolean }

const env = (name: string): string => {
  const value = process.env[name]
  if (value === undefined) throw new Error(`postgres-escrow-worker: ${name} is not set`)
  return value
}

const namespace = env('RL_NAMESPACE')
const offset = Number(env('RL_CLOCK_OFFSET_MS'))
const strategy = new PostgresStrategy({ connectionString: env('RL_URL'), schema: env('RL_SCHEMA'), poolSize: 2, queryTimeoutMs: 300 })
const rl = RateLimiting.newInstance('escrow-worker')
rl.new({
  namespace,
  windowSizes: [60],
  syncRate: 0.5,
  storeTimeoutMs: 400,
  strategy,
  escrow: true,
  onStoreError: 'deny',
  clock: () => Date.now() + offset,
  onError: () => undefined,
})
const limiter = rl.limiter({ namespace, limits: [{ limit: Number(env('RL_LIMIT')), window: 60 }], countDenied: false })

const send = (reply: EscrowWorkerReply) => process.send?.(reply)

process.on('message', (command: EscrowWorkerCommand) => {
  if (command.type === 'exit') {
    rl.close()
      .catch(() => undefined)
      .then(() => strategy.close())
      .finally(() => process.exit(0))
    return
  }
  const d = limiter.hit(command.key)
  const local = !(d instanceof Promise)
  void Promise.resolve(d).then((decision) => send({ type: 'hit', allowed: decision.allowed, reason: decision.reason, local }))
})

send({ type: 'ready', nodeId: rl.namespace(namespace).nodeId })
