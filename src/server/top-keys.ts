import type { Clock } from '../core/clock.js'

// Who is being limited: per policy and per Envoy rule, the keys with the most hits and the most
// denials over the last minute, in bounded memory. Each counts in a Space-Saving sketch
// (Metwally, Agrawal, El Abbadi, "Efficient computation of frequent and top-k elements in data
// streams", 2005) on its Stream-Summary structure, one per sub-window of a ring the clock turns.

/** One key of a top list: its estimated count and how much of it may be over-counting. */
export interface TopEntry {
  readonly key: string
  /** An upper bound of the key's decisions in the window. */
  readonly count: number
  /** The true count is in `[count - error, count]`. */
  readonly error: number
}

const NONE = -1

/**
 * A Space-Saving sketch of `capacity` counters on a Stream-Summary: counters with the same count
 * share a bucket, buckets are linked in increasing count order, so an increment of 1 moves one
 * counter to the next bucket (or a new one) in O(1), and the smallest counter (the one a new key
 * takes over) is the first bucket's. Every array is allocated once: a flood of new keys only
 * rewrites counters and the key map stays at `capacity` entries.
 */
export class SpaceSaving {
  readonly capacity: number
  private readonly index = new Map<string, number>()
  private readonly keys: (string | undefined)[]
  /** Count of the key when it took the counter over: what it may have been credited without being seen. */
  private readonly errors: Float64Array
  private readonly bucketOf: Int32Array
  private readonly prev: Int32Array
  private readonly next: Int32Array
  // buckets: at most one per counter, so `capacity` of them, recycled through a free stack
  private readonly bucketCount: Float64Array
  private readonly bucketHead: Int32Array
  private readonly bucketPrev: Int32Array
  private readonly bucketNext: Int32Array
  private readonly freeBuckets: Int32Array
  private freeTop = 0
  private minBucket = NONE
  private used = 0

  constructor(capacity: number) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`capacity must be a positive integer, got ${capacity}`)
    this.capacity = capacity
    this.keys = new Array<string | undefined>(capacity).fill(undefined)
    this.errors = new Float64Array(capacity)
    this.bucketOf = new Int32Array(capacity)
    this.prev = new Int32Array(capacity)
    this.next = new Int32Array(capacity)
    this.bucketCount = new Float64Array(capacity)
    this.bucketHead = new Int32Array(capacity)
    this.bucketPrev = new Int32Array(capacity)
    this.bucketNext = new Int32Array(capacity)
    this.freeBuckets = new Int32Array(capacity)
    this.clear()
  }

  /** Forgets every key. */
  clear(): void {
    this.index.clear()
    this.keys.fill(undefined)
    for (let i = 0; i < this.capacity; i++) this.freeBuckets[i] = this.capacity - 1 - i
    this.freeTop = this.capacity
    this.minBucket = NONE
    this.used = 0
  }

  /** Keys held (at most `capacity`). */
  get size(): number {
    return this.used
  }

  /** True once every counter holds a key: a key not held may then have counted up to {@link min}. */
  get full(): boolean {
    return this.used === this.capacity
  }

  /** The smallest count held (0 when empty). */
  get min(): number {
    return this.minBucket === NONE ? 0 : (this.bucketCount[this.minBucket] as number)
  }

  /** Counts one occurrence of `key`. */
  add(key: string): void {
    const c = this.index.get(key)
    if (c !== undefined) {
      this.increment(c)
      return
    }
    if (this.used < this.capacity) {
      const fresh = this.used++
      this.keys[fresh] = key
      this.errors[fresh] = 0
      this.index.set(key, fresh)
      // a new counter of count 1: the first bucket when it counts 1, else a new first bucket
      const first = this.minBucket
      if (first !== NONE && this.bucketCount[first] === 1) this.push(first, fresh)
      else this.push(this.newBucket(1, NONE, first), fresh)
      return
    }
    // full: the key takes over a counter of the smallest count, and may have been any of it
    const bucket = this.minBucket
    const victim = this.bucketHead[bucket] as number
    this.index.delete(this.keys[victim] as string)
    this.keys[victim] = key
    this.errors[victim] = this.bucketCount[bucket] as number
    this.index.set(key, victim)
    this.increment(victim)
  }

  /** Calls `visit` with each key held, its count and its error (`count - error` is a lower bound). */
  forEach(visit: (key: string, count: number, error: number) => void): void {
    for (let b = this.minBucket; b !== NONE; b = this.bucketNext[b] as number) {
      const count = this.bucketCount[b] as number
      for (let c = this.bucketHead[b] as number; c !== NONE; c = this.next[c] as number)
        visit(this.keys[c] as string, count, this.errors[c] as number)
    }
  }

  /** The count and error of `key`, or undefined when it is not held. */
  get(key: string): { count: number; error: number } | undefined {
    const c = this.index.get(key)
    if (c === undefined) return undefined
    return { count: this.bucketCount[this.bucketOf[c] as number] as number, error: this.errors[c] as number }
  }

  private increment(c: number): void {
    const bucket = this.bucketOf[c] as number
    const count = (this.bucketCount[bucket] as number) + 1
    const after = this.bucketNext[bucket] as number
    let target: number
    if (after !== NONE && this.bucketCount[after] === count) target = after
    else if (this.bucketHead[bucket] === c && this.next[c] === NONE) {
      // alone in its bucket, and no bucket of count + 1: the bucket itself moves up
      this.bucketCount[bucket] = count
      return
    } else target = this.newBucket(count, bucket, after)
    this.unlink(c, bucket)
    this.push(target, c)
  }

  private newBucket(count: number, before: number, after: number): number {
    const b = this.freeBuckets[--this.freeTop] as number
    this.bucketCount[b] = count
    this.bucketHead[b] = NONE
    this.bucketPrev[b] = before
    this.bucketNext[b] = after
    if (before === NONE) this.minBucket = b
    else this.bucketNext[before] = b
    if (after !== NONE) this.bucketPrev[after] = b
    return b
  }

  private push(bucket: number, c: number): void {
    const head = this.bucketHead[bucket] as number
    this.bucketOf[c] = bucket
    this.prev[c] = NONE
    this.next[c] = head
    if (head !== NONE) this.prev[head] = c
    this.bucketHead[bucket] = c
  }

  // takes c out of its bucket, and the bucket out of the list when that empties it
  private unlink(c: number, bucket: number): void {
    const p = this.prev[c] as number
    const n = this.next[c] as number
    if (p === NONE) this.bucketHead[bucket] = n
    else this.next[p] = n
    if (n !== NONE) this.prev[n] = p
    if (n !== NONE || p !== NONE) return
    const before = this.bucketPrev[bucket] as number
    const after = this.bucketNext[bucket] as number
    if (before === NONE) this.minBucket = after
    else this.bucketNext[before] = after
    if (after !== NONE) this.bucketPrev[after] = before
    this.freeBuckets[this.freeTop++] = bucket
  }
}

/** Options of {@link SlidingTopKeys} and {@link TopKeys}. */
export interface TopKeysOptions {
  /** Epoch ms; read once per recorded decision. @default Date.now */
  readonly clock?: Clock
  /** Counters per sub-window sketch. @default 128 */
  readonly capacity?: number
  /** Sub-windows in the ring. @default 6 */
  readonly slots?: number
  /** One sub-window, ms. @default 10_000 */
  readonly slotMs?: number
}

/** The top keys of one policy or rule, over the ring's window. */
export interface TopReport {
  readonly windowSeconds: number
  readonly byDenials: TopEntry[]
  readonly byHits: TopEntry[]
}

// one sub-window: the sketches of hits and of denials, and which sub-window (clock / slotMs) they count
interface Slot {
  epoch: number
  readonly hits: SpaceSaving
  readonly denials: SpaceSaving
}

/**
 * Hits and denials of one policy or rule over the last `slots × slotMs`: a ring of sub-window
 * sketches. Recording turns the ring when the clock entered a new sub-window (lazily, no timer);
 * a query sums the sub-windows still in the window.
 */
export class SlidingTopKeys {
  private readonly slots: Slot[]
  private readonly slotMs: number
  private epoch = Number.NEGATIVE_INFINITY

  constructor(options: { capacity: number; slots: number; slotMs: number }) {
    this.slotMs = options.slotMs
    this.slots = Array.from({ length: options.slots }, () => ({
      epoch: Number.NEGATIVE_INFINITY,
      hits: new SpaceSaving(options.capacity),
      denials: new SpaceSaving(options.capacity),
    }))
  }

  /** The window the queries cover, ms. */
  get windowMs(): number {
    return this.slots.length * this.slotMs
  }

  /** Counts one decision of `key` at `nowMs`: a hit, and a denial when `denied`. */
  record(key: string, denied: boolean, nowMs: number): void {
    const slot = this.current(nowMs)
    slot.hits.add(key)
    if (denied) slot.denials.add(key)
  }

  /** The `n` keys with the most denials and the most hits in the window that ends at `nowMs`. */
  top(n: number, nowMs: number): TopReport {
    const oldest = Math.floor(nowMs / this.slotMs) - this.slots.length + 1
    const live = this.slots.filter((s) => s.epoch >= oldest && s.epoch <= oldest + this.slots.length - 1)
    return {
      windowSeconds: this.windowMs / 1000,
      byDenials: merged(
        live.map((s) => s.denials),
        n,
      ),
      byHits: merged(
        live.map((s) => s.hits),
        n,
      ),
    }
  }

  /** Keys held across the ring (bounded by slots × 2 × capacity). */
  get size(): number {
    let size = 0
    for (const s of this.slots) size += s.hits.size + s.denials.size
    return size
  }

  private current(nowMs: number): Slot {
    const epoch = Math.floor(nowMs / this.slotMs)
    const slot = this.slots[((epoch % this.slots.length) + this.slots.length) % this.slots.length] as Slot
    if (epoch !== this.epoch) {
      this.epoch = epoch
      // the slot last counted a sub-window a whole ring ago (or never): start it over
      if (slot.epoch !== epoch) {
        slot.epoch = epoch
        slot.hits.clear()
        slot.denials.clear()
      }
    }
    return slot
  }
}

/**
 * The top `n` of the sum of `sketches`: a key's count is the sum of its counts, plus each full
 * sketch's minimum where it is absent (it may have counted up to that there); its lower bound is
 * the sum of its guaranteed counts (`count - error` where held, 0 elsewhere).
 */
function merged(sketches: readonly SpaceSaving[], n: number): TopEntry[] {
  const totals = new Map<string, { count: number; lower: number; seen: number }>()
  sketches.forEach((sketch, i) => {
    sketch.forEach((key, count, error) => {
      const t = totals.get(key)
      if (t === undefined) totals.set(key, { count, lower: count - error, seen: 1 << i })
      else {
        t.count += count
        t.lower += count - error
        t.seen |= 1 << i
      }
    })
  })
  const entries: TopEntry[] = []
  for (const [key, t] of totals) {
    let count = t.count
    sketches.forEach((sketch, i) => {
      if ((t.seen & (1 << i)) === 0 && sketch.full) count += sketch.min
    })
    entries.push({ key, count, error: count - t.lower })
  }
  // by count, then by the lower bound (the surer one first), then by key for a stable answer
  entries.sort((a, b) => b.count - a.count || a.error - b.error || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0))
  return entries.slice(0, n)
}

/** The bucket of an Envoy domain's descriptors that carry their own limit (one per domain). */
export const OWN_LIMITS_RULE = 'own-limits'

/**
 * The service's top keys: one {@link SlidingTopKeys} per policy (by name) and per Envoy rule (by
 * domain and stats key, or {@link OWN_LIMITS_RULE}), made on the first decision that counts in
 * it. Both are bounded by the config: policies and the domain files' rules.
 */
export class TopKeys {
  readonly clock: Clock
  private readonly options: { capacity: number; slots: number; slotMs: number }
  private readonly policies = new Map<string, SlidingTopKeys>()
  private readonly rules = new Map<string, Map<string, SlidingTopKeys>>()

  constructor(options: TopKeysOptions = {}) {
    this.clock = options.clock ?? Date.now
    this.options = { capacity: options.capacity ?? 128, slots: options.slots ?? 6, slotMs: options.slotMs ?? 10_000 }
    if (this.options.slots > 30) throw new RangeError(`slots must be at most 30, got ${this.options.slots}`)
  }

  /** The window a query covers, seconds. */
  get windowSeconds(): number {
    return (this.options.slots * this.options.slotMs) / 1000
  }

  /** The sketches of policy `name` (made on first use). */
  policy(name: string): SlidingTopKeys {
    let top = this.policies.get(name)
    if (top === undefined) this.policies.set(name, (top = new SlidingTopKeys(this.options)))
    return top
  }

  /** The sketches of the rule `statsKey` of `domain` (made on first use). */
  rule(domain: string, statsKey: string): SlidingTopKeys {
    let byRule = this.rules.get(domain)
    if (byRule === undefined) this.rules.set(domain, (byRule = new Map()))
    let top = byRule.get(statsKey)
    if (top === undefined) byRule.set(statsKey, (top = new SlidingTopKeys(this.options)))
    return top
  }

  /** The top `n` of policy `name` now (empty lists before its first decision). */
  topOfPolicy(name: string, n: number): TopReport {
    return this.policies.get(name)?.top(n, this.clock()) ?? this.empty()
  }

  /** The top `n` of a rule now (empty lists before its first decision). */
  topOfRule(domain: string, statsKey: string, n: number): TopReport {
    return this.rules.get(domain)?.get(statsKey)?.top(n, this.clock()) ?? this.empty()
  }

  private empty(): TopReport {
    return { windowSeconds: this.windowSeconds, byDenials: [], byHits: [] }
  }
}

// The decision paths reach the service's TopKeys through the metrics they already hold (the
// service's ServiceMetrics, its GatewayMetrics on the Envoy path), so their contexts need no new field.
const attached = new WeakMap<object, TopKeys>()

/** Makes `top` the top keys of the decisions reported to each of `owners` (the service's metrics objects). */
export function attachTopKeys(top: TopKeys, ...owners: object[]): void {
  for (const owner of owners) attached.set(owner, top)
}

/** The top keys attached to `owner`, if any. */
export function topKeysOf(owner: object): TopKeys | undefined {
  return attached.get(owner)
}
