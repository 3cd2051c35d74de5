/**
 * Per-key limits: plans and tiers on one limiter. The limit is a function of the key (free 3,
 * pro 10 per minute, looked up in a Map here; in an app, a cache of your plans), and one hit can
 * carry its own limit (`{ limit }`), say from a signed token. Decisions show the limit applied,
 * and so do the headers made from them.
 *
 * Run: node --import tsx examples/per-key-limits.ts
 */
import { createFakeClock, type Decision, RateLimiting, rateLimitHeaders } from '../src/index.js'

const PLANS = new Map([
  ['alice', 'pro'],
  ['bob', 'free'],
])
const PER_MINUTE = { free: 3, pro: 10 }

export function runPerKeyLimitsExample(): string[] {
  const clock = createFakeClock(Date.UTC(2026, 0, 1))
  const rl = RateLimiting.newInstance('per-key-example')
  rl.new({ namespace: 'api', windowSizes: [60], clock: clock.now })
  const limiter = rl.limiter({
    namespace: 'api',
    limits: [{ limit: (user) => PER_MINUTE[PLANS.get(user) === 'pro' ? 'pro' : 'free'], window: 60, name: 'plan' }],
  })
  const lines: string[] = []
  const show = (who: string, d: Decision) =>
    lines.push(`${who}: ${d.allowed ? 'allowed' : 'denied'} limit=${d.limit} remaining=${d.remaining}`)
  for (let i = 0; i < 4; i++) show('bob', limiter.hit('bob') as Decision)
  for (let i = 0; i < 4; i++) show('alice', limiter.hit('alice') as Decision)
  // a limit carried by the request itself, for this hit only
  show('carol (token says 1)', limiter.hit('carol', 1, { limit: 1 }) as Decision)
  show('carol (token says 1)', limiter.hit('carol', 1, { limit: 1 }) as Decision)
  lines.push(`alice's headers: ${rateLimitHeaders(limiter.peek('alice') as Decision, 'draft-8')['RateLimit-Policy']}`)
  return lines
}

if (import.meta.url === `file://${process.argv[1]}`) for (const line of runPerKeyLimitsExample()) console.log(line)
