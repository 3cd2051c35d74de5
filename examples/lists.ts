/**
 * Deny and allow lists on a limiter: one limit of 2 hits per minute, a deny list (an exact key
 * and an IPv4 range) and an allow list (an IPv6 range and an exact key). A listed key is decided
 * by its list, before the limit: nothing is counted and, with a store, nothing is sent to it.
 * Deny wins when both lists match. Every decision says what decided it in `reason`.
 *
 * Run: node --import tsx examples/lists.ts
 */
import { createFakeClock, type Decision, RateLimiting } from '../src/index.js'

export function runListsExample(): string[] {
  const clock = createFakeClock(Date.UTC(2026, 0, 1))
  const rl = RateLimiting.newInstance('lists-example')
  rl.new({ namespace: 'api', windowSizes: [60], clock: clock.now })
  const limiter = rl.limiter({
    namespace: 'api',
    limits: [{ limit: 2, window: 60, name: 'minute' }],
    denyList: ['scraper-key', '203.0.113.0/24'],
    allowList: ['2001:db8::/32', 'health-checker', '203.0.113.5'], // 203.0.113.5: deny wins
  })
  const lines: string[] = []
  const show = (key: string, d: Decision) =>
    lines.push(`${key}: ${d.allowed ? 'allowed' : 'denied'} reason=${d.reason} remaining=${d.remaining} retryAfterMs=${d.retryAfterMs}`)
  for (const key of ['user-1', 'user-1', 'user-1']) show(key, limiter.hit(key) as Decision)
  show('203.0.113.5', limiter.hit('203.0.113.5') as Decision)
  show('::ffff:203.0.113.9', limiter.hit('::ffff:203.0.113.9') as Decision) // an IPv4-mapped address is the same address
  show('scraper-key', limiter.hit('scraper-key') as Decision)
  for (let i = 0; i < 3; i++) show('2001:db8::42', limiter.hit('2001:db8::42') as Decision)
  const counted = limiter.counts('2001:db8::42')[0]?.current
  lines.push(`2001:db8::42 counted: ${counted}`)
  return lines
}

if (import.meta.url === `file://${process.argv[1]}`) for (const line of runListsExample()) console.log(line)
