import type { Clock } from '../core/clock.js'
import { checkRequest, fixedWindowResult, resolveMaxKeys, resolveOptions } from './options.js'
import type { AlgorithmResult, MemoryAlgorithmOptions, RateLimitAlgorithm } from './types.js'

/** Options of {@link MemoryFixedWindow}. */
export interface MemoryFixedWindowOptions extends MemoryAlgorithmOptions {
  /** Whether a denied request still counts, as the seed's `INCR` does. @default true */
  readonly countDenied?: boolean
}

// Ids in `order` before `head` that were evicted: dropped from the array once they are this many
// and half of it, so the array costs O(1) amortized per insertion.
const COMPACT_AFTER = 1024

// The counters of the current bucket. Buckets are aligned to the epoch, so every user shares
// the bucket index: when it moves on, the whole map is dropped at once (no timer, no sweep).
//
// Eviction takes the oldest id from `order`, the ids in insertion order, in O(1). It does not
// ask the Map for its first key: after many deletions V8's Map walks past every deleted entry
// to find it (O(n) per eviction). An id reset meanwhile is skipped; one reset and stored again
// sits in `order` twice, and its first place makes it evicted early: resets are rare (admin).
class Buckets {
  index = Number.NaN
  readonly counts = new Map<string, number>()
  private order: string[] = []
  private head = 0
  constructor(readonly maxKeys: number) {}

  /** The map of the bucket `index`, emptied first when the bucket moved on. */
  at(index: number): Map<string, number> {
    if (index !== this.index) {
      this.index = index
      this.counts.clear()
      this.order = []
      this.head = 0
    }
    return this.counts
  }

  /** Stores the first count of `userId` in the current bucket, evicting the oldest user when full. */
  add(userId: string, count: number): void {
    const counts = this.counts
    if (counts.size >= this.maxKeys) {
      const order = this.order
      while (this.head < order.length && !counts.delete(order[this.head++] as string));
      if (this.head >= COMPACT_AFTER && this.head * 2 >= order.length) {
        this.order = order.slice(this.head)
        this.head = 0
      }
    }
    counts.set(userId, count)
    this.order.push(userId)
  }
}

/**
 * The seed's fixed window in process memory: one counter per user per bucket
 * `floor(now / windowMs)`, admitted while the counter (this request included) is at most the
 * limit. A user can burst to twice the limit across a bucket boundary: the algorithm's known
 * trade-off. A cost above the limit is denied without being counted. Memory is bounded: a
 * finished bucket is dropped whole, and at most `maxKeys` users are held (the user stored
 * longest ago is forgotten first, in O(1)).
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
    if (allowed || (this.countDenied && cost <= this.limit)) {
      if (before === undefined) this.buckets.add(userId, count)
      else counts.set(userId, count)
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
