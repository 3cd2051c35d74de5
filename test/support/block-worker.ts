/**
 * A second OS process for the blocking tests (test/integration/blocking-stores.test.ts): makes an
 * engine on the store named in its argument (real clock), makes `tries` hits on `key` with a
 * limit that blocks, or peeks it, prints what it saw as one JSON line, and closes (which pushes
 * whatever it has not stored yet, blocks included).
 *
 *   node --import tsx test/support/block-worker.ts '{"strategy":"redis","strategyOpts":{...},...}'
 */
import { RateLimiting } from '../../src/index.js'

interface WorkerConfig {
  readonly strategy: string
  readonly strategyOpts: Record<string, unknown>
  readonly namespace: string
  readonly syncRate: number
  readonly key: string
  readonly limit: number
  readonly blockMs: number
  /** Hits to make; 0: peek only. */
  readonly tries: number
}

const config = JSON.parse(process.argv[2] as string) as WorkerConfig
const rl = RateLimiting.newInstance('block-worker')
rl.new({
  namespace: config.namespace,
  windowSizes: [60],
  syncRate: config.syncRate,
  strategy: config.strategy,
  strategyOpts: config.strategyOpts,
  autoSync: false,
})
const limiter = rl.limiter({ namespace: config.namespace, limits: [{ limit: config.limit, window: 60, blockMs: config.blockMs }] })
if (config.syncRate > 0) {
  // a periodic process reads a key's block at its first sync after it sees the key
  await limiter.peek(config.key)
  await rl.sync(config.namespace)
}
const decisions = []
let at = 0 // the engine's time of the last decision
for (let i = 0; i < config.tries; i++) {
  at = limiter.clock()
  decisions.push(await limiter.hit(config.key))
}
if (config.tries === 0) {
  at = limiter.clock()
  decisions.push(await limiter.peek(config.key))
}
const last = decisions[decisions.length - 1]
await rl.close()
console.log(
  JSON.stringify({
    allowed: decisions.filter((d) => d.allowed).length,
    reason: last?.reason,
    blocked: last?.blocked ?? false,
    // when the block ends, epoch ms, as this process saw it
    endsAtMs: last?.blocked === true ? at + last.retryAfterMs : 0,
  }),
)
