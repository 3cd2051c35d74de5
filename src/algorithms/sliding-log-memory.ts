import type { Clock } from '../core/clock.js'
import { checkRequest, remainingOf, resolveMaxKeys, resolveOptions } from './options.js'
import type { AlgorithmResult, MemoryAlgorithmOptions, RateLimitAlgorithm } from './types.js'

// Logs stale for the sweep to look at each time a new user is stored: stale logs go at the rate
// users arrive, without a timer per user.
const SWEEP_PER_INSERT = 2

/** Options of {@link MemorySlidingLog}. */
export type MemorySlidingLogOptions = MemoryAlgorithmOptions

// Every user's log: the times (epoch ms, ascending) of the admitted requests still in the window.
class Logs {
  readonly logs = new Map<string, number[]>()
  private sweeper: MapIterator<[string, number[]]> | undefined
  constructor(readonly maxKeys: number) {}

  /** A new, empty log for `userId`; makes room first and sweeps a few stale logs. */
  create(userId: string, cutoffMs: number): number[] {
    const logs = this.logs
    if (logs.size >= this.maxKeys) {
      // Map iterates in insertion order: the first user is the one stored longest ago
      const oldest = logs.keys().next().value as string
      logs.delete(oldest)
    }
    for (let i = 0; i < SWEEP_PER_INSERT; i++) {
      let next = this.sweeper?.next()
      if (next === undefined || next.done === true) {
        this.sweeper = logs.entries()
        next = this.sweeper.next()
        if (next.done === true) break
      }
      const [id, log] = next.value
      const newest = log[log.length - 1]
      if (newest === undefined || newest <= cutoffMs) logs.delete(id)
    }
    const log: number[] = []
    logs.set(userId, log)
    return log
  }
}

/** Drops the times at or before `cutoffMs` (the seed's `ZREMRANGEBYSCORE key 0 now-window`). */
function prune(log: number[], cutoffMs: number): void {
  let n = 0
  while (n < log.length && (log[n] as number) <= cutoffMs) n++
  if (n > 0) log.splice(0, n)
}

/**
 * The seed's exact sliding log in process memory: the times of the admitted requests of the
 * last `windowMs`; a request is admitted iff `count + cost <= limit` (the seed's `count <
 * limit` for cost 1), and only admitted requests are logged. No boundary bursts; memory is at
 * most `limit` times per user. Bounded: stale logs are swept as new users arrive, and at most
 * `maxKeys` users are held (the user stored longest ago is forgotten first).
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
    if (log !== undefined) prune(log, cutoffMs)
    let count = log === undefined ? 0 : log.length
    const allowed = count + cost <= this.limit
    if (allowed) {
      if (log === undefined) log = this.state.create(userId, cutoffMs)
      // a clock that stepped back would break the order prune relies on: insert in place
      let at = log.length
      while (at > 0 && (log[at - 1] as number) > nowMs) at--
      if (at === log.length) for (let i = 0; i < cost; i++) log.push(nowMs)
      else log.splice(at, 0, ...new Array<number>(cost).fill(nowMs))
      count += cost
    } else if (log !== undefined && count === 0) {
      this.state.logs.delete(userId)
    }
    return this.result(log, count, cost, allowed, nowMs)
  }

  peek(userId: string): AlgorithmResult {
    checkRequest(userId, 1)
    const nowMs = this.clock()
    const log = this.state.logs.get(userId)
    if (log !== undefined) prune(log, nowMs - this.windowMs)
    const count = log === undefined ? 0 : log.length
    return this.result(log, count, 1, count + 1 <= this.limit, nowMs)
  }

  reset(userId: string): void {
    checkRequest(userId, 1)
    this.state.logs.delete(userId)
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

  private result(log: number[] | undefined, count: number, cost: number, allowed: boolean, nowMs: number): AlgorithmResult {
    let retryAfterMs = 0
    if (!allowed) {
      // the (count + cost - limit)-th oldest time must leave the window first
      const oldest = cost > this.limit ? undefined : log?.[count + cost - this.limit - 1]
      retryAfterMs = oldest === undefined ? Number.POSITIVE_INFINITY : oldest + this.windowMs - nowMs
    }
    const newest = count > 0 ? log?.[count - 1] : undefined
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
