import type { Clock } from '../core/clock.js'
import { checkRequest, remainingOf, resolveMaxKeys, resolveOptions } from './options.js'
import type { AlgorithmResult, MemoryAlgorithmOptions, RateLimitAlgorithm } from './types.js'

// Logs stale for the sweep to look at each time a new user is stored: stale logs go at the rate
// users arrive, without a timer per user.
const SWEEP_PER_INSERT = 2

// Entries before `head` that left the window: dropped from the arrays once they are this many
// and half of them, so pruning costs O(1) amortized per request.
const COMPACT_AFTER = 32

/** Options of {@link MemorySlidingLog}. */
export type MemorySlidingLogOptions = MemoryAlgorithmOptions

// One user's log: one entry per admitted request, oldest first, whatever its cost. Users are
// also a list in the order they were stored (`older`/`newer`), so eviction and the stale sweep
// take O(1) each: V8's Map, asked for its first key after many deletions, walks past every
// deleted entry (O(n)).
class UserLog {
  readonly id: string
  /** Times (epoch ms) of the admitted requests, ascending; those before `head` left the window. */
  times: number[] = []
  /** Cumulative cost through each entry, once one cost more than 1; until then entry i's is i + 1. */
  cum: number[] | undefined = undefined
  head = 0
  older: UserLog | undefined = undefined
  newer: UserLog | undefined = undefined

  constructor(id: string) {
    this.id = id
  }

  /** Cumulative cost through entry `i` (-1: none). */
  private through(i: number): number {
    if (i < 0) return 0
    return this.cum === undefined ? i + 1 : (this.cum[i] as number)
  }

  /** The cost of the requests in the log. */
  count(): number {
    const last = this.times.length - 1
    return this.through(last) - this.through(this.head - 1)
  }

  newest(): number | undefined {
    return this.times.length > this.head ? this.times[this.times.length - 1] : undefined
  }

  /** Drops the times at or before `cutoffMs` (the seed's `ZREMRANGEBYSCORE key 0 now-window`). */
  prune(cutoffMs: number): void {
    const times = this.times
    let head = this.head
    while (head < times.length && (times[head] as number) <= cutoffMs) head++
    if (head === times.length) {
      this.times = []
      this.cum = undefined
      this.head = 0
    } else if (head >= COMPACT_AFTER && head * 2 >= times.length) {
      const base = this.through(head - 1)
      times.splice(0, head)
      const cum = this.cum
      if (cum !== undefined) {
        cum.splice(0, head)
        for (let i = 0; i < cum.length; i++) cum[i] = (cum[i] as number) - base
      }
      this.head = 0
    } else {
      this.head = head
    }
  }

  /**
   * Logs a request of `cost` at `nowMs`: one entry, whatever the cost. A clock that stepped
   * back logs it at the newest time instead, so the order prune relies on holds and the entry
   * leaves no earlier than it should.
   */
  push(nowMs: number, cost: number): void {
    const times = this.times
    const last = times.length - 1
    const at = last >= 0 && (times[last] as number) > nowMs ? (times[last] as number) : nowMs
    if (this.cum === undefined && cost !== 1) this.cum = Array.from({ length: times.length }, (_, i) => i + 1)
    if (this.cum !== undefined) this.cum.push(this.through(last) + cost)
    // a first push would give the array room for 17; most users of a flood make one request
    if (last < 0) this.times = [at]
    else times.push(at)
  }

  /** The time the `need`-th unit of cost, oldest first, leaves the window (binary search). */
  leavingAt(need: number, windowMs: number): number {
    const base = this.through(this.head - 1)
    let lo = this.head
    let hi = this.times.length - 1
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (this.through(mid) - base >= need) hi = mid
      else lo = mid + 1
    }
    return (this.times[lo] as number) + windowMs
  }
}

// Every user's log, in a Map for lookups and a list in insertion order for eviction and sweeps.
class Logs {
  readonly logs = new Map<string, UserLog>()
  private oldest: UserLog | undefined
  private newest: UserLog | undefined
  private sweeper: UserLog | undefined
  constructor(readonly maxKeys: number) {}

  /** A new, empty log for `userId`; makes room first and sweeps a few stale logs. */
  create(userId: string, cutoffMs: number): UserLog {
    if (this.logs.size >= this.maxKeys && this.oldest !== undefined) this.remove(this.oldest)
    for (let i = 0; i < SWEEP_PER_INSERT; i++) {
      const log = this.sweeper ?? this.oldest
      if (log === undefined) break
      this.sweeper = log.newer
      const newest = log.newest()
      if (newest === undefined || newest <= cutoffMs) this.remove(log)
    }
    const log = new UserLog(userId)
    log.older = this.newest
    if (this.newest !== undefined) this.newest.newer = log
    else this.oldest = log
    this.newest = log
    this.logs.set(userId, log)
    return log
  }

  remove(log: UserLog): void {
    if (this.sweeper === log) this.sweeper = log.newer
    if (log.older !== undefined) log.older.newer = log.newer
    else this.oldest = log.newer
    if (log.newer !== undefined) log.newer.older = log.older
    else this.newest = log.older
    log.older = undefined
    log.newer = undefined
    this.logs.delete(log.id)
  }
}

/**
 * The seed's exact sliding log in process memory: the times of the admitted requests of the
 * last `windowMs`; a request is admitted iff `count + cost <= limit` (the seed's `count <
 * limit` for cost 1), and only admitted requests are logged, one entry each whatever its cost
 * (the work per request does not depend on the cost). No boundary bursts; memory is at most
 * `limit` entries per user. Bounded: stale logs are swept as new users arrive, and at most
 * `maxKeys` users are held (the user stored longest ago is forgotten first, in O(1)).
 *
 * @example
 * const log = new MemorySlidingLog({ limit: 100, windowMs: 60_000 })
 * const { allowed, retryAfterMs } = log.check('u1')
 */
export class MemorySlidingLog implements RateLimitAlgorithm {
  readonly name = 'sliding-log'
  readonly store = 'memory'
  readonly limit: number
  readonly windowMs: number
  private readonly clock: Clock
  private state: Logs

  constructor(options: MemorySlidingLogOptions) {
    const resolved = resolveOptions(options)
    this.limit = resolved.limit
    this.windowMs = resolved.windowMs
    this.clock = resolved.clock
    this.state = new Logs(resolveMaxKeys(options.maxKeys))
  }

  /** Users with a log held now (stale ones included until swept). */
  get size(): number {
    return this.state.logs.size
  }

  check(userId: string, cost = 1): AlgorithmResult {
    checkRequest(userId, cost)
    const nowMs = this.clock()
    const cutoffMs = nowMs - this.windowMs
    let log = this.state.logs.get(userId)
    if (log !== undefined) log.prune(cutoffMs)
    let count = log === undefined ? 0 : log.count()
    const allowed = count + cost <= this.limit
    if (allowed) {
      if (log === undefined) log = this.state.create(userId, cutoffMs)
      log.push(nowMs, cost)
      count += cost
    } else if (log !== undefined && count === 0) {
      this.state.remove(log)
    }
    return this.result(log, count, cost, allowed, nowMs)
  }

  peek(userId: string): AlgorithmResult {
    checkRequest(userId, 1)
    const nowMs = this.clock()
    const log = this.state.logs.get(userId)
    if (log !== undefined) log.prune(nowMs - this.windowMs)
    const count = log === undefined ? 0 : log.count()
    return this.result(log, count, 1, count + 1 <= this.limit, nowMs)
  }

  reset(userId: string): void {
    checkRequest(userId, 1)
    const log = this.state.logs.get(userId)
    if (log !== undefined) this.state.remove(log)
  }

  withLimit(limit: number): MemorySlidingLog {
    const sibling = new MemorySlidingLog({
      limit,
      windowMs: this.windowMs,
      clock: this.clock,
      maxKeys: 1,
    })
    sibling.state = this.state
    return sibling
  }

  private result(log: UserLog | undefined, count: number, cost: number, allowed: boolean, nowMs: number): AlgorithmResult {
    let retryAfterMs = 0
    if (!allowed) {
      // enough cost must leave the window for this one to fit: count + cost - limit of it
      retryAfterMs =
        cost > this.limit || log === undefined ? Number.POSITIVE_INFINITY : log.leavingAt(count + cost - this.limit, this.windowMs) - nowMs
    }
    const newest = count > 0 ? log?.newest() : undefined
    return {
      allowed,
      count,
      limit: this.limit,
      remaining: remainingOf(this.limit, count),
      resetMs: newest === undefined ? 0 : newest + this.windowMs - nowMs,
      retryAfterMs,
    }
  }
}
