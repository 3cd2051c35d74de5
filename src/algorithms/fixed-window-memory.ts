import type { Clock } from '../core/clock.js'
import { checkRequest, fixedWindowResult, resolveMaxKeys, resolveOptions } from './options.js'
import type { AlgorithmResult, MemoryAlgorithmOptions, RateLimitAlgorithm } from './types.js'

/** Options of {@link MemoryFixedWindow}. */
export interface MemoryFixedWindowOptions extends MemoryAlgorithmOptions {
  /** Whether a denied request still counts, as the seed's `INCR` does. @default true */
  readonly countDenied?: boolean
}

// The counters of the current bucket. Buckets are aligned to the epoch, so every user shares
// the bucket index: when it moves on, the whole map is dropped at once (no timer, no sweep).
class Buckets {
  index = Number.NaN
  readonly counts = new Map<string, number>()
  constructor(readonly maxKeys: number) {}

  /** The map of the bucket `index`, emptied first when the bucket moved on. */
  at(index: number): Map<string, number> {
    if (index !== this.index) {
      this.index = index
      this.counts.clear()
    }
    return this.counts
  }
}

/**
 * The seed's fixed window in process memory: one counter per user per bucket
 * `floor(now / windowMs)`, admitted while the counter (this request included) is at most the
 * limit. A user can burst to twice the limit across a bucket boundary: the algorithm's known
 * trade-off. Memory is bounded: a finished bucket is dropped whole, and at most `maxKeys`
 * users are held (the user stored longest ago is forgotten first).
 *
 * @example
 * const fw = new MemoryFixedWindow({ limit: 100, windowMs: 60_000 })
 * const { allowed, remaining } = fw.check('u1')
 */
export class MemoryFixedWindow implements RateLimitAlgorithm {
  readonly name = 'fixed-window'
  readonly store = 'memory'
  readonly limit: number
  readonly windowMs: number
  readonly countDenied: boolean
  private readonly clock: Clock
  private buckets: Buckets

  constructor(options: MemoryFixedWindowOptions) {
    const resolved = resolveOptions(options)
    this.limit = resolved.limit
    this.windowMs = resolved.windowMs
    this.clock = resolved.clock
    this.countDenied = options.countDenied ?? true
    this.buckets = new Buckets(resolveMaxKeys(options.maxKeys))
  }

  /** Users with a counter in the current bucket. */
  get size(): number {
    return this.buckets.counts.size
  }

  check(userId: string, cost = 1): AlgorithmResult {
    checkRequest(userId, cost)
    const nowMs = this.clock()
    const index = Math.floor(nowMs / this.windowMs)
    const counts = this.buckets.at(index)
    const before = counts.get(userId)
    let count = (before ?? 0) + cost
    const allowed = count <= this.limit
    if (allowed || this.countDenied) {
      if (before === undefined && counts.size >= this.buckets.maxKeys) {
        // Map iterates in insertion order: the first key is the one stored longest ago
        const oldest = counts.keys().next().value as string
        counts.delete(oldest)
      }
      counts.set(userId, count)
    } else {
      count -= cost
    }
    return fixedWindowResult(this.limit, this.windowMs, index, nowMs, count, allowed, cost)
  }

  peek(userId: string): AlgorithmResult {
    checkRequest(userId, 1)
    const nowMs = this.clock()
    const index = Math.floor(nowMs / this.windowMs)
    const count = this.buckets.at(index).get(userId) ?? 0
    const allowed = count + 1 <= this.limit
    return fixedWindowResult(this.limit, this.windowMs, index, nowMs, count, allowed, 1)
  }

  reset(userId: string): void {
    checkRequest(userId, 1)
    this.buckets.counts.delete(userId)
  }

  withLimit(limit: number): MemoryFixedWindow {
    const sibling = new MemoryFixedWindow({
      limit,
      windowMs: this.windowMs,
      clock: this.clock,
      countDenied: this.countDenied,
      maxKeys: 1,
    })
    sibling.buckets = this.buckets
    return sibling
  }
}
