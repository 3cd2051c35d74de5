import { randomBytes } from 'node:crypto'
import type { Clock } from '../core/clock.js'
import { Denials, resetKey } from './denials.js'
import { SLIDING_LOG_CHECK, SLIDING_LOG_PEEK } from './lua.js'
import type { KeyNames } from './keys.js'
import { checkRequest, remainingOf, resolveRedisOptions } from './options.js'
import { runScript } from './redis-script.js'
import type { RedisAdapter } from '../strategies/redis/scripts.js'
import type { AlgorithmResult, RateLimitAlgorithm, RedisAlgorithmOptions } from './types.js'

/** Options of {@link RedisSlidingLog}. */
export type RedisSlidingLogOptions = RedisAlgorithmOptions

/**
 * The seed's exact sliding log on Redis, with its exact data: one ZSET per user at
 * `<prefix>:<userId>` (with a `scope`, `<prefix>@<scope>:log:<userId>`), one unique member per
 * admitted request scored by its ms time. One script prunes entries at or before `now -
 * window`, counts, admits iff `count + cost <= limit`, adds the member and sets `PEXPIRE 2 x
 * window`, so concurrent requests never both take the last slot.
 *
 * A request of cost 1 is a member `<ms>-<instance>-<seq>`, as in the seed (ZCARD is the count);
 * one of cost c > 1 is a single member `<ms>-<instance>-<seq>:<c>`, and the member `#cost`
 * (scored -1 - the sum of the extra costs, so the seed's prune never removes it) keeps the count
 * O(1) to read: the work per request does not depend on the cost (see lua.ts).
 *
 * Time is the client's clock (passed as ARGV): deterministic, testable, and members are made
 * unique client-side instead of relying on Lua's `math.random`,
 * which older Redis versions seed identically for every script. Service instances need clocks
 * in sync (NTP): a skew of d ms shifts an entry's lifetime by d ms.
 *
 * @example
 * import { Redis } from 'ioredis'
 * const log = new RedisSlidingLog({ client: new Redis(), limit: 100, windowMs: 60_000 })
 * const { allowed, retryAfterMs } = await log.check('u1')
 */
export class RedisSlidingLog implements RateLimitAlgorithm {
  readonly name = 'sliding-log'
  readonly store = 'redis'
  readonly limit: number
  readonly windowMs: number
  readonly keys: KeyNames
  private readonly client: RedisAdapter
  private readonly clock: Clock
  private readonly timeoutMs: number
  private readonly instanceId = randomBytes(6).toString('hex')
  private seq = 0
  private readonly options: RedisSlidingLogOptions
  private readonly denials: Denials | undefined

  /** `denials` is internal: the variants of `withLimit()` share their algorithm's. */
  constructor(options: RedisSlidingLogOptions, denials?: Denials) {
    const resolved = resolveRedisOptions(options)
    this.options = options
    this.limit = resolved.limit
    this.windowMs = resolved.windowMs
    this.clock = resolved.clock
    this.keys = resolved.keys
    this.timeoutMs = resolved.timeoutMs
    this.client = resolved.client
    this.denials = options.rememberDenials === false ? undefined : (denials ?? new Denials())
  }

  /** The key of `userId`'s log: `<prefix>:<userId>` without a scope. */
  key(userId: string): string {
    return this.keys.slidingLog(userId)
  }

  async check(userId: string, cost = 1): Promise<AlgorithmResult> {
    checkRequest(userId, cost)
    const nowMs = this.clock()
    const key = this.keys.slidingLog(userId)
    // a denied request is not logged, and entries leave no sooner than the script says: a full
    // log's denial of cost 1 holds, count and all, until its first entry leaves
    const held = this.denials?.get(key, cost, this.limit, nowMs)
    if (held !== undefined) return this.result(false, held.count, held.untilMs, held.resetAtMs, nowMs)
    const member = `${nowMs}-${this.instanceId}-${++this.seq}`
    const [allowedFlag, count, retryAt, resetAt] = (await runScript(
      this.client,
      SLIDING_LOG_CHECK,
      [key],
      [nowMs, this.windowMs, this.limit, cost, member],
      this.timeoutMs,
      'sliding log',
      4,
    )) as [number, number, number, number]
    const allowed = allowedFlag === 1
    // an admitted request (a variant's higher limit) adds an entry the held denial did not see
    if (allowed) this.denials?.delete(key)
    // only then is the answer the same until retryAt: a larger cost (or a log past its limit)
    // waits for several entries, and the count falls as the first ones leave
    else if (cost === 1 && count === this.limit && retryAt >= 0)
      this.denials?.set(
        key,
        { untilMs: retryAt, cost, limit: this.limit, untilWindowEnd: false, count, local: 0, resetAtMs: resetAt },
        nowMs,
      )
    return this.result(allowed, count, retryAt, resetAt, nowMs)
  }

  async peek(userId: string): Promise<AlgorithmResult> {
    checkRequest(userId, 1)
    const nowMs = this.clock()
    const [count, retryAt, resetAt] = (await runScript(
      this.client,
      SLIDING_LOG_PEEK,
      [this.keys.slidingLog(userId)],
      [nowMs, this.windowMs, this.limit],
      this.timeoutMs,
      'sliding log peek',
      3,
    )) as [number, number, number]
    return this.result(count + 1 <= this.limit, count, retryAt, resetAt, nowMs)
  }

  async reset(userId: string): Promise<void> {
    checkRequest(userId, 1)
    await resetKey(this.client, this.denials, this.key(userId), 'zset', this.timeoutMs, 'sliding log reset')
  }

  /** Requests denied without a Redis call, from a denial Redis made (`rememberDenials`); its `withLimit()` variants' too. */
  get deniedLocally(): number {
    return this.denials?.answered ?? 0
  }

  withLimit(limit: number): RedisSlidingLog {
    return new RedisSlidingLog({ ...this.options, limit }, this.denials)
  }

  private result(allowed: boolean, count: number, retryAt: number, resetAt: number, nowMs: number): AlgorithmResult {
    return {
      allowed,
      count,
      limit: this.limit,
      remaining: remainingOf(this.limit, count),
      resetMs: resetAt < 0 ? 0 : Math.max(0, resetAt - nowMs),
      retryAfterMs: allowed ? 0 : retryAt < 0 ? Number.POSITIVE_INFINITY : Math.max(0, retryAt - nowMs),
    }
  }
}
