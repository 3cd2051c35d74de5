/**
 * The engine in one file: two "processes" (two RateLimiting instances) share one store and
 * enforce one limit of 10 hits per second between them, syncing every 50 ms.
 *
 * Run: node --import tsx examples/engine.ts
 */
import { type Decision, MemoryStrategy, RateLimiting } from '../src/index.js'

export async function runEngineExample(): Promise<{ allowed: number; denied: number; views: number[] }> {
  const store = new MemoryStrategy() // stands in for Redis, PostgreSQL or memcached
  const fleet = ['web-1', 'web-2'].map((name) => {
    const rl = RateLimiting.newInstance(name)
    rl.new({ namespace: 'api', windowSizes: [1], syncRate: 0.05, strategy: store })
    return { rl, limiter: rl.limiter({ namespace: 'api', limits: [{ limit: 10, window: 1 }] }) }
  })
  let allowed = 0
  let denied = 0
  // 40 requests from one client, alternating between the two processes, 10 ms apart
  for (let i = 0; i < 40; i++) {
    const { limiter } = fleet[i % 2] as (typeof fleet)[number]
    const d = limiter.hit('client-42') as Decision
    if (d.allowed) allowed++
    else denied++
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  // two rounds: the first pushes every process's hits, the second reads them all back
  for (let round = 0; round < 2; round++) for (const { rl } of fleet) await rl.sync('api')
  const views = fleet.map(({ rl }) => rl.slidingWindow('client-42', 1, undefined, 'api') as number)
  await Promise.all(fleet.map(({ rl }) => rl.close()))
  return { allowed, denied, views }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { allowed, denied, views } = await runEngineExample()
  console.log(`allowed ${allowed}, denied ${denied}; both processes now see rates ${views.map((v) => v.toFixed(2)).join(' and ')}`)
}
