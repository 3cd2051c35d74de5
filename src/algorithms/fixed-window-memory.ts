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

// The counters of one bucket, and its ids in insertion order for eviction.
//
// Eviction takes the oldest id from `order` in O(1). It does not ask the Map for its first key:
// after many deletions V8's Map walks past every deleted entry to find it (O(n) per eviction).
// An id reset meanwhile is skipped; one reset and stored again sits in `order` twice, and its
// first place makes it evicted early: resets are rare (admin).
class Bucket {
  readonly counts = new Map<string, number>()
  private order: string[] = []
  private head = 0
  constructor(readonly index: number) {}

  /** Stores the first count of `userId`. */
  add(userId: string, count: number): void {
    this.counts.set(userId, count)
    this.order.push(userId)
  }

  /** Forgets the user stored longest ago. */
  evictOldest(): void {
    const { counts, order } = this
    while (this.head < order.length && !counts.delete(order[this.head++] as string));
    if (this.head >= COMPACT_AFTER && this.head * 2 >= order.length) {
      this.order = order.slice(this.head)
      this.head = 0
    }
  }
}

// The buckets held: the newest one the clock has reached, and one more, the bucket before it or,
// when the clock stepped back further, the one it stepped back to. Buckets are aligned to the
// epoch, so every user shares them: when the clock moves on, older buckets are dropped whole (no
// timer, no sweep). A clock that steps back (an NTP step, an injected clock) finds the bucket
// before with its counts, as Redis finds its key, and the newest one intact when it comes back.
class Buckets {
  newest = new Bucket(Number.NaN)
  other = new Bucket(Number.NaN)
  constructor(readonly maxKeys: number) {}

  /** The bucket `index`, made when not held: a later one drops every bucket before its previous. */
  at(index: number): Bucket {
    const newest = this.newest
    if (index === newest.index) return newest
    if (!(index < newest.index)) {
      this.other = index === newest.index + 1 ? newest : new Bucket(Number.NaN)
      this.newest = new Bucket(index)
      return this.newest
    }
    if (index !== this.other.index) this.other = new Bucket(index)
    return this.other
  }

  /** The bucket `index` if held. */
  find(index: number): Bucket | undefined {
    if (index === this.newest.index) return this.newest
    return index === this.other.index ? this.other : undefined
  }

  /** Users held, in both buckets. */
  get size(): number {
    return this.newest.counts.size + this.other.counts.size
  }

  /**
   * Stores the first count of `userId` in `bucket`; when full, forgets the user stored longest
   * ago in the other bucket first (its counts matter only while the clock is stepped back).
   */
  add(bucket: Bucket, userId: string, count: number): void {
    if (this.size >= this.maxKeys) (this.other.counts.size > 0 ? this.other : this.newest).evictOldest()
    bucket.add(userId, count)
  }
}

/**
 * The seed's fixed window in process memory: one counter per user per bucket
 * `floor(now / windowMs)`, admitted while the counter (this request included) is at most the
 * limit. A user can burst to twice the limit across a bucket boundary: the algorithm's known
 * trade-off. A cost above the limit is denied without being counted. A clock that steps back
 * into the bucket before counts there, and loses no count of the later bucket, as on Redis.
 * Memory is bounded: the bucket before the current one is kept, older ones are dropped whole,
 * and at most `maxKeys` users are held in all (the user stored longest ago is forgotten first,
 * in O(1)).
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

  /** Users held: with a counter in the current bucket or in the other bucket held (see Buckets). */
  get size(): number {
    return this.buckets.size
  }

  check(userId: string, cost = 1): AlgorithmResult {
    checkRequest(userId, cost)
    const nowMs = this.clock()
    const index = Math.floor(nowMs / this.windowMs)
    const bucket = this.buckets.at(index)
    const before = bucket.counts.get(userId)
    let count = (before ?? 0) + cost
    const allowed = count <= this.limit
    if (allowed || (this.countDenied && cost <= this.limit)) {
      if (before === undefined) this.buckets.add(bucket, userId, count)
      else bucket.counts.set(userId, count)
    } else {
      count -= cost
    }
    return fixedWindowResult(this.limit, this.windowMs, index, nowMs, count, allowed, cost)
  }

  peek(userId: string): AlgorithmResult {
    checkRequest(userId, 1)
    const nowMs = this.clock()
    const index = Math.floor(nowMs / this.windowMs)
    const count = this.buckets.find(index)?.counts.get(userId) ?? 0
    const allowed = count + 1 <= this.limit
    return fixedWindowResult(this.limit, this.windowMs, index, nowMs, count, allowed, 1)
  }

  /** Forgets the user's count in the bucket of now, as Redis deletes that bucket's key. */
  reset(userId: string): void {
    checkRequest(userId, 1)
    this.buckets.find(Math.floor(this.clock() / this.windowMs))?.counts.delete(userId)
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
