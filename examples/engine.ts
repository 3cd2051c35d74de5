/**
 * The engine in one file: two "processes" (two RateLimiting instances) share one store and
 * enforce one limit of 10 hits per second between them. One client sends 40 requests, 10 ms
 * apart, alternating between the processes; every 50 ms both processes sync (in production the
 * periodic timer does this, `syncRate: 0.05`; here the time is a fake clock and the syncs are
 * explicit, so every run gives the same answer).
 *
 * Between two syncs a process sees its own hits and the other's as of the last sync: together
 * they may admit a little more than the limit (at most (N-1)/N x rate x syncRate, see
 * docs/ARCHITECTURE.md), and after a sync round they agree on the exact count.
 *
 * Run: node --import tsx examples/engine.ts
 */
import { createFakeClock, type Decision, MemoryStrategy, RateLimiting } from '../src/index.js'

export interface EngineExampleResult {
  readonly allowed: number
  readonly denied: number
  /** Each process's rate for the client after a final sync round. */
  readonly views: number[]
}

export async function runEngineExample(): Promise<EngineExampleResult> {
  const clock = createFakeClock(Date.UTC(2026, 0, 1)) // the start of a second: one window for all 40
  const store = new MemoryStrategy() // stands in for Redis, PostgreSQL or memcached
  const fleet = ['web-1', 'web-2'].map((name) => {
    const rl = RateLimiting.newInstance(name)
    rl.new({ namespace: 'api', windowSizes: [1], syncRate: 0.05, autoSync: false, clock: clock.now, strategy: store })
    return { rl, limiter: rl.limiter({ namespace: 'api', limits: [{ limit: 10, window: 1 }] }) }
  })
  // every process pushes its hits, then every process reads the others' (the fleet's timers fire
  // at the same instants and wait a moment between the two)
  const syncRound = async () => {
    for (const { rl } of fleet) await rl.sync('api')
    for (const { rl } of fleet) await rl.sync('api')
  }
  let allowed = 0
  let denied = 0
  for (let i = 0; i < 40; i++) {
    if (i > 0 && i % 5 === 0) await syncRound() // every 50 ms
    const { limiter } = fleet[i % 2] as (typeof fleet)[number]
    const d = limiter.hit('client-42') as Decision
    if (d.allowed) allowed++
    else denied++
    clock.advance(10)
  }
  await syncRound()
  const views = fleet.map(({ rl }) => rl.slidingWindow('client-42', 1, undefined, 'api') as number)
  await Promise.all(fleet.map(({ rl }) => rl.close()))
  return { allowed, denied, views }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { allowed, denied, views } = await runEngineExample()
  console.log(`allowed ${allowed}, denied ${denied}; both processes now see rates ${views.join(' and ')}`)
}
