/**
 * A worker process for test/integration/redis-escrow-faults.test.ts: one RateLimiting instance
 * with an escrow namespace on Redis that waits out the store's learning period, makes a few hits
 * of key `k` (its grant holds more budget than it spends), sends the times of its admitted hits
 * to the parent, and waits to be killed, holding the rest of its budget.
 *
 * Env: RL_PORT, RL_NAMESPACE, RL_WINDOW (s), RL_LIMIT.
 */
import { Redis } from 'ioredis'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'

const namespace = process.env.RL_NAMESPACE as string
const window = Number(process.env.RL_WINDOW)
const client = new Redis(Number(process.env.RL_PORT), '127.0.0.1', { maxRetriesPerRequest: 1 })
client.on('error', () => undefined)
const rl = RateLimiting.newInstance('escrow-worker')
rl.new({
  namespace,
  windowSizes: [window],
  syncRate: 0.1,
  storeTimeoutMs: 200,
  strategy: new RedisStrategy({ client, prefix: 'rlf', batchAcrossSlots: true }),
  escrow: true,
  onStoreError: 'deny',
  onError: () => undefined,
})
const limiter = rl.limiter({ namespace, limits: [{ limit: Number(process.env.RL_LIMIT), window }], countDenied: false })
const admitted: number[] = []
const deadline = Date.now() + 5000
// the first calls begin the store's epoch; grants come once its learning period is over
while (admitted.length < 3 && Date.now() < deadline) {
  const at = Date.now()
  if ((await limiter.hit('k')).allowed) admitted.push(at)
  else await new Promise((resolve) => setTimeout(resolve, 20))
}
process.send?.({ admitted })
setInterval(() => undefined, 1000)
