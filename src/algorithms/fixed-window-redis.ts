import type { Clock } from '../core/clock.js'
import { Denials, resetKey } from './denials.js'
import { FIXED_WINDOW_CHECK, FIXED_WINDOW_PEEK } from './lua.js'
import type { KeyNames } from './keys.js'
import { checkRequest, fixedWindowResult, resolveRedisOptions } from './options.js'
import { runScript } from './redis-script.js'
import type { RedisAdapter } from '../strategies/redis/scripts.js'
import type { AlgorithmResult, RateLimitAlgorithm, RedisAlgorithmOptions } from './types.js'

/** Options of {@link RedisFixedWindow}. */
export interface RedisFixedWindowOptions extends RedisAlgorithmOptions {
  /** Whether a denied request still counts, as the seed's `INCR` does. @default true */
  readonly countDenied?: boolean
}

/**
 * The seed's fixed window on Redis, with its exact data: a STRING counter per user per bucket
 * at `<prefix>:<userId>:<window>` (window = `floor(now / windowMs)`, so
 * `rlaas:rate_limit:u1:28333333` for a 60 s window), `INCR` (`INCRBY cost`), and `EXPIRE
 * windowSize` when the call created the key; admitted iff the counter is at most the limit.
 * One script, so the count, the decision and the expiry are atomic. A cost above the limit is
 * denied without being written. With a `scope`, the key is `<prefix>@<scope>:fixed:<userId>:<window>`.
 *
 * Time is the client's clock, passed to Redis as the bucket in the key name: every key the
 * script touches is then declared in KEYS (Redis Cluster requires it), and tests can move time.
 * Service instances need clocks in sync (NTP) to agree on bucket boundaries.
 *
 * @example
 * import { Redis } from 'ioredis'
 * const fw = new RedisFixedWindow({ client: new Redis(), limit: 100, windowMs: 60_000 })
 * const { allowed } = await fw.check('u1')
 */
export class RedisFixedWindow implements RateLimitAlgorithm {
  readonly name = 'fixed-window'
  readonly store = 'redis'
  readonly limit: number
  readonly windowMs: number
  readonly keys: KeyNames
  readonly countDenied: boolean
  private readonly client: RedisAdapter
  private readonly clock: Clock
  private readonly timeoutMs: number
  private readonly ttl: string
  private readonly ttlUnit: 's' | 'ms'
  private readonly options: RedisFixedWindowOptions
  private readonly denials: Denials | undefined

  /** `denials` is internal: the variants of `withLimit()` share their algorithm's. */
  constructor(options: RedisFixedWindowOptions, denials?: Denials) {
    const resolved = resolveRedisOptions(options)
    this.options = options
    this.limit = resolved.limit
    this.windowMs = resolved.windowMs
    this.clock = resolved.clock
    this.keys = resolved.keys
    this.timeoutMs = resolved.timeoutMs
    this.client = resolved.client
    this.countDenied = options.countDenied ?? true
    // the seed's EXPIRE in seconds; PEXPIRE only for windows that are not whole seconds
    this.ttlUnit = this.windowMs % 1000 === 0 ? 's' : 'ms'
    this.ttl = String(this.ttlUnit === 's' ? this.windowMs / 1000 : this.windowMs)
    this.denials = options.rememberDenials === false ? undefined : (denials ?? new Denials())
  }

  /** The key of `userId`'s bucket at `nowMs`: `<prefix>:<userId>:<floor(nowMs / windowMs)>` without a scope. */
  key(userId: string, nowMs: number = this.clock()): string {
    return this.keys.fixedWindow(userId, Math.floor(nowMs / this.windowMs))
  }

  async check(userId: string, cost = 1): Promise<AlgorithmResult> {
    checkRequest(userId, cost)
    const nowMs = this.clock()
    const index = Math.floor(nowMs / this.windowMs)
    const key = this.keys.fixedWindow(userId, index)
    const denials = this.denials
    // the count only grows until the window ends: a denial holds till then for this cost or more
    let held = denials?.get(key, cost, this.limit, nowMs)
    if (held !== undefined) {
      // a check of the key on its way was made first: what it admits counts in this answer
      if (denials?.pending(key) === true) held = await denials.after(key, held)
      // as the script: a denied cost counts when denials count, one above the limit never
      if (this.countDenied && cost <= this.limit) {
        held.count += cost
        held.local += cost
      }
      return fixedWindowResult(this.limit, this.windowMs, index, nowMs, held.count, false, cost)
    }
    const call = runScript(
      this.client,
      FIXED_WINDOW_CHECK,
      [key],
      [cost, this.limit, this.ttl, this.ttlUnit, this.countDenied ? '1' : '0'],
      this.timeoutMs,
      'fixed window',
      2,
    ) as Promise<[number, number]>
    denials?.sent(key, call)
    let reply: [number, number]
    try {
      reply = await call
    } finally {
      denials?.settled(key, call)
    }
    const [allowedFlag, count] = reply
    const allowed = allowedFlag === 1
    // a denied cost that counts leaves the count above the limit: every cost is denied after it;
    // any other answer gives a denial still held (of a larger cost, a lower limit) the new count
    if (allowed || cost > this.limit) denials?.refresh(key, count)
    else
      denials?.set(
        key,
        {
          untilMs: (index + 1) * this.windowMs,
          cost: this.countDenied ? 1 : cost,
          limit: this.limit,
          untilWindowEnd: true,
          count,
          local: 0,
          resetAtMs: 0,
        },
        nowMs,
      )
    return fixedWindowResult(this.limit, this.windowMs, index, nowMs, count, allowed, cost)
  }

  async peek(userId: string): Promise<AlgorithmResult> {
    checkRequest(userId, 1)
    const nowMs = this.clock()
    const index = Math.floor(nowMs / this.windowMs)
    const key = this.keys.fixedWindow(userId, index)
    // denied requests answered here count in this process's answers, not in Redis: those answered
    // before this read (Redis runs the checks sent before it first)
    const local = this.denials?.local(key, nowMs) ?? 0
    const [stored] = (await runScript(this.client, FIXED_WINDOW_PEEK, [key], [], this.timeoutMs, 'fixed window peek', 1)) as [number]
    const count = stored + local
    const allowed = count + 1 <= this.limit
    return fixedWindowResult(this.limit, this.windowMs, index, nowMs, count, allowed, 1)
  }

  /** Deletes the user's current bucket (older buckets no longer count and expire by themselves). */
  async reset(userId: string): Promise<void> {
    checkRequest(userId, 1)
    await resetKey(this.client, this.denials, this.key(userId), 'string', this.timeoutMs, 'fixed window reset')
  }

  /** Requests denied without a Redis call, from a denial Redis made (`rememberDenials`); its `withLimit()` variants' too. */
  get deniedLocally(): number {
    return this.denials?.answered ?? 0
  }

  withLimit(limit: number): RedisFixedWindow {
    return new RedisFixedWindow({ ...this.options, limit }, this.denials)
  }
}
