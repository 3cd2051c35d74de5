/**
 * Throttling calls to an external API from many workers: the API allows 10 calls per second per
 * account, and 3 workers (separate processes in production; here 3 instances, each with its own
 * Redis connection and counters, like 3 processes) share that budget through Redis. Each worker
 * waits for its turn with limiter.acquire() (or limiter.schedule(key, fn)) instead of being
 * refused, and Redis lets at most 10 calls through in a second. A local HTTP server stands in for the API and counts
 * what it receives.
 *
 * Run: node --import tsx examples/acquire.ts   (needs Redis; RL_REDIS_URL, default redis://127.0.0.1:6379)
 */
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { type Decision, RateLimiting } from '../src/index.js'
import { RedisStrategy } from '../src/strategies/redis/index.js'

// For the printout: when the decision that let a call through was made (resetMs is the time
// then left in its 1 s window). The call itself starts a Redis round trip later, more when the
// event loop is busy, so start times may straddle a second boundary that decisions do not.
function decidedAtMs(d: Decision): number {
  const offset = 1000 - d.resetMs
  return Math.floor((Date.now() - offset) / 1000) * 1000 + offset
}

export async function runAcquireExample(redisUrl = process.env.RL_REDIS_URL ?? 'redis://127.0.0.1:6379'): Promise<string[]> {
  // the external API: answers every call
  const api = createServer((req, res) => {
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ ok: true, path: req.url }))
  })
  api.listen(0, '127.0.0.1')
  await once(api, 'listening')
  const apiUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}`

  const prefix = `example-acquire-${randomUUID().slice(0, 8)}`
  const workers = [1, 2, 3].map((n) => {
    const strategy = new RedisStrategy({ url: redisUrl, prefix })
    const rl = RateLimiting.newInstance(`worker-${n}`)
    // synchronous: Redis decides every call, so the fleet stays within the limit exactly
    // clock: Date.now, not the default cached clock (which may lag while a busy event-loop turn
    // runs): the calls are few, so an exact time costs nothing that matters
    rl.new({ namespace: 'outbound', windowSizes: [1], syncRate: 0, strategy, clock: Date.now })
    const limiter = rl.limiter({ namespace: 'outbound', limits: [{ limit: 10, window: 1, name: 'api' }] })
    return { rl, strategy, limiter }
  })

  // connect before the clock starts (a first command waits for the connection)
  await Promise.all(workers.map(({ limiter }) => limiter.peek('warm-up')))
  const decidedAt: number[] = [] // when Redis let each call through
  const started = Date.now()
  // 3 workers × 8 calls = 24 calls for a budget of 10 per second
  const results = await Promise.all(
    workers.flatMap(({ limiter }, w) =>
      Array.from({ length: 8 }, (_, i) =>
        // limiter.schedule('account-42', fn) does the same in one call, when the decision is not needed
        limiter.acquire('account-42').then(async (d) => {
          decidedAt.push(decidedAtMs(d))
          const res = await fetch(`${apiUrl}/items/${w}-${i}`)
          return (await res.json()) as { ok: boolean }
        }),
      ),
    ),
  )
  const elapsedMs = Date.now() - started

  for (const { rl, strategy } of workers) {
    await rl.close()
    await strategy.close()
  }
  api.close() // the counters expire in Redis by themselves (a few seconds for a 1 s window)

  // the limit counts in clock seconds (windows aligned to the epoch), as the API's quota would
  const perSecond = new Map<number, number>()
  for (const t of decidedAt) perSecond.set(Math.floor(t / 1000), (perSecond.get(Math.floor(t / 1000)) ?? 0) + 1)
  return [
    `calls: ${results.filter((r) => r.ok).length} of ${results.length} succeeded, none refused`,
    `api: at most ${Math.max(...perSecond.values())} calls let through in one clock second (limit 10)`,
    `took: ${elapsedMs >= 1000 ? 'more' : 'less'} than one second (the rest waited their turn)`,
  ]
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const line of await runAcquireExample()) console.log(line)
}
