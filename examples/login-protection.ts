/**
 * Login brute-force protection with blocking: a per-user and a per-IP limit on failed logins.
 *
 * - per user: 5 failed logins in 15 minutes, then the account is blocked for 15 minutes
 *   (someone guessing one user's password);
 * - per IP: 20 failed logins in an hour, then the address is blocked for an hour (one client
 *   trying many users: credential stuffing).
 *
 * Only failures are counted (a hit after the password check failed); a blocked user or IP is
 * turned away before the password is even checked (`peek`, which counts nothing). A success resets
 * the user's count and lifts its block. With a store (`strategy`), every process of the fleet
 * honours a block another one made (docs/ARCHITECTURE.md, "Blocks").
 *
 * Run: node --import tsx examples/login-protection.ts
 */
import { createFakeClock, type Decision, RateLimiting, type Strategy } from '../src/index.js'

const MINUTE = 60_000

/** What a login attempt got. */
export type LoginOutcome = 'ok' | 'wrong password' | `blocked for ${number} s`

export interface LoginGuardOptions {
  /** Share counts and blocks with other processes through this store (synchronous: exact). */
  readonly strategy?: Strategy
  readonly clock?: () => number
}

/** A login endpoint's guard; `check` stands for your password check. */
export function createLoginGuard(check: (user: string, password: string) => boolean, options: LoginGuardOptions = {}) {
  const rl = RateLimiting.newInstance(`login-example-${Math.random()}`)
  rl.new({
    namespace: 'login',
    windowSizes: [900, 3600],
    ...(options.clock === undefined ? {} : { clock: options.clock }),
    ...(options.strategy === undefined ? {} : { strategy: options.strategy, syncRate: 0 }),
  })
  const perUser = rl.limiter({ namespace: 'login', limits: [{ limit: 5, window: 900, blockMs: 15 * MINUTE, name: 'user' }] })
  const perIp = rl.limiter({ namespace: 'login', limits: [{ limit: 20, window: 3600, blockMs: 60 * MINUTE, name: 'ip' }] })
  const blockedFor = (d: Decision) => `blocked for ${Math.ceil(d.retryAfterMs / 1000)} s` as const

  return {
    async login(user: string, ip: string, password: string): Promise<LoginOutcome> {
      // turned away before the password is checked: a blocked key answers without counting
      for (const d of [await perIp.peek(`ip:${ip}`), await perUser.peek(`user:${user}`)]) if (d.blocked === true) return blockedFor(d)
      if (check(user, password)) {
        await perUser.reset(`user:${user}`)
        return 'ok'
      }
      // a failure counts against both; the one that goes over the limit blocks its key
      const [byIp, byUser] = [await perIp.hit(`ip:${ip}`), await perUser.hit(`user:${user}`)]
      for (const d of [byIp, byUser]) if (d.blocked === true) return blockedFor(d)
      return 'wrong password'
    },
    /**
     * Support forgives a user: `reset` lifts the block and forgets the failures (`unblock` alone
     * would lift the block, and the next failure would find the counts still over the limit).
     */
    forgiveUser: (user: string) => perUser.reset(`user:${user}`),
    close: () => rl.close(),
  }
}

export async function runLoginExample(): Promise<string[]> {
  const clock = createFakeClock(Date.UTC(2026, 0, 1))
  const guard = createLoginGuard((user, password) => user === 'alice' && password === 'correct horse', { clock: clock.now })
  const lines: string[] = []
  const attempt = async (user: string, ip: string, password: string) =>
    lines.push(`${user} from ${ip}: ${await guard.login(user, ip, password)}`)
  // someone guesses alice's password
  for (let i = 0; i < 6; i++) await attempt('alice', '198.51.100.7', `guess-${i}`)
  // alice herself, from home, with the right password: her account is blocked
  await attempt('alice', '203.0.113.20', 'correct horse')
  clock.advance(15 * MINUTE)
  await attempt('alice', '203.0.113.20', 'correct horse')
  // one address tries many users (credential stuffing): the address is blocked after 20 failures
  for (let i = 0; i < 21; i++) await guard.login(`user-${i}`, '192.0.2.66', 'password1')
  await attempt('bob', '192.0.2.66', 'password1')
  await attempt('bob', '192.0.2.99', 'password1')
  // support lifts a block by hand
  for (let i = 0; i < 6; i++) await guard.login('carol', '198.51.100.8', 'nope')
  await attempt('carol', '198.51.100.8', 'nope')
  await guard.forgiveUser('carol')
  await attempt('carol', '198.51.100.8', 'nope')
  await guard.close()
  return lines
}

if (import.meta.url === `file://${process.argv[1]}`) for (const line of await runLoginExample()) console.log(line)
