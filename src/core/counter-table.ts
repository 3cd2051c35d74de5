import type { CounterRow, WindowPush, WindowRef } from './strategy.js'
import { windowStartSec } from './window.js'

// Columns of one slot (a key in one window size), in one Float64Array: one allocation for the
// whole table, and about 56 bytes per key-window instead of an object per key.
const STRIDE = 7
const START = 0 // start of the slot's current window, epoch seconds
const CUR_MINE = 1 // this process's cumulative hits in the current window
const CUR_ACKED = 2 // what the store last said it holds for this process
const CUR_OTHERS = 3 // the other processes' total at the last sync
const PREV_MINE = 4
const PREV_ACKED = 5
const PREV_OTHERS = 6

const REFERENCED = 1 // CLOCK bit: hit since the eviction hand last passed

const INITIAL_CAPACITY = 1024
// How many slots one eviction looks at before it settles for a slot with unsynced hits.
const EVICTION_SCAN = 256
// Slots the sweep hand checks for staleness on each new key: stale slots are recycled at the
// rate keys arrive, without a timer per key.
const SWEEP_PER_INSERT = 2

/** Counts a dictionary keeps about itself; `stats()` returns a copy. */
export interface DictStats {
  /** Key-windows held now. */
  keys: number
  /** Slots allocated (held + free). */
  capacity: number
  /** Keys dropped to make room because the dictionary was full. */
  evictions: number
  /** Of those, keys whose hits had not reached the store yet. */
  evictedUnsynced: number
  /** Slots recycled because both their windows had passed. */
  expired: number
}

/**
 * A local counter dictionary: the in-memory table behind one or more namespaces (those naming
 * the same `dict`), bounded by `maxKeys` key-windows.
 *
 * Eviction policy when full: the CLOCK algorithm (second chance). A hand walks the slots;
 * a slot hit since the hand last passed gets another round; the first slot not hit and with
 * no unsynced hits is dropped. If none is found within 256 slots, the first unreferenced slot
 * seen is dropped even though its unsynced hits are then lost (counted in `evictedUnsynced`).
 * Slots whose windows have both passed are recycled first, and swept as new keys arrive.
 */
export class CounterDict {
  readonly name: string
  readonly maxKeys: number
  readonly tables: WindowTable[] = []
  data: Float64Array
  flags: Uint8Array
  owner: Uint16Array
  keys: (string | undefined)[] = []
  private capacity: number
  private top = 0
  private readonly free: number[] = []
  private hand = 0
  private sweepHand = 0
  private held = 0
  private evictions = 0
  private evictedUnsynced = 0
  private expired = 0

  constructor(name: string, maxKeys: number) {
    this.name = name
    this.maxKeys = maxKeys
    this.capacity = Math.min(INITIAL_CAPACITY, maxKeys)
    this.data = new Float64Array(this.capacity * STRIDE)
    this.flags = new Uint8Array(this.capacity)
    this.owner = new Uint16Array(this.capacity)
  }

  /** Adds a window table for one namespace and size. */
  addTable(namespace: string, sizeSec: number, synced: boolean): WindowTable {
    if (this.tables.length >= 0xffff) throw new RangeError(`dict "${this.name}": too many namespace window sizes`)
    const table = new WindowTable(this, this.tables.length, namespace, sizeSec, synced)
    this.tables.push(table)
    return table
  }

  stats(): DictStats {
    return {
      keys: this.held,
      capacity: this.capacity,
      evictions: this.evictions,
      evictedUnsynced: this.evictedUnsynced,
      expired: this.expired,
    }
  }

  /** A free slot for `key` in `table`, evicting one if the dictionary is full. */
  allocate(table: WindowTable, key: string, nowMs: number): number {
    this.sweep(nowMs)
    let slot: number
    if (this.free.length > 0) slot = this.free.pop() as number
    else if (this.top < this.capacity) slot = this.top++
    else if (this.capacity < this.maxKeys) {
      this.grow()
      slot = this.top++
    } else slot = this.evict(nowMs)
    this.keys[slot] = key
    this.owner[slot] = table.index
    this.flags[slot] = REFERENCED
    this.held++
    table.slots.set(key, slot)
    return slot
  }

  /** Forgets a slot and returns it to the free list. */
  release(slot: number): void {
    const key = this.keys[slot]
    if (key === undefined) return
    this.tables[this.owner[slot] as number]?.slots.delete(key)
    this.keys[slot] = undefined
    this.data.fill(0, slot * STRIDE, slot * STRIDE + STRIDE)
    this.flags[slot] = 0
    this.free.push(slot)
    this.held--
  }

  isStale(slot: number, nowMs: number): boolean {
    const table = this.tables[this.owner[slot] as number] as WindowTable
    return (this.data[slot * STRIDE + START] as number) < windowStartSec(nowMs, table.sizeSec) - table.sizeSec
  }

  hasUnsynced(slot: number): boolean {
    const table = this.tables[this.owner[slot] as number] as WindowTable
    if (!table.synced) return false
    const d = this.data
    const base = slot * STRIDE
    return d[base + CUR_MINE] !== d[base + CUR_ACKED] || d[base + PREV_MINE] !== d[base + PREV_ACKED]
  }

  private sweep(nowMs: number): void {
    if (this.top === 0) return
    for (let i = 0; i < SWEEP_PER_INSERT; i++) {
      if (this.sweepHand >= this.top) this.sweepHand = 0
      const slot = this.sweepHand++
      if (this.keys[slot] !== undefined && this.isStale(slot, nowMs)) {
        this.release(slot)
        this.expired++
      }
    }
  }

  private evict(nowMs: number): number {
    let fallback = -1
    for (let i = 0; i < EVICTION_SCAN; i++) {
      if (this.hand >= this.top) this.hand = 0
      const slot = this.hand++
      if (this.keys[slot] === undefined) continue
      if (this.isStale(slot, nowMs)) {
        this.expired++
        return this.take(slot)
      }
      if ((this.flags[slot] as number) & REFERENCED) {
        this.flags[slot] = (this.flags[slot] as number) & ~REFERENCED
        continue
      }
      if (!this.hasUnsynced(slot)) {
        this.evictions++
        return this.take(slot)
      }
      if (fallback < 0) fallback = slot
    }
    if (fallback < 0) {
      // every slot scanned was hit recently: take the one under the hand
      if (this.hand >= this.top) this.hand = 0
      fallback = this.hand++
    }
    this.evictions++
    if (this.hasUnsynced(fallback)) this.evictedUnsynced++
    return this.take(fallback)
  }

  private take(slot: number): number {
    this.release(slot)
    return this.free.pop() as number
  }

  private grow(): void {
    const capacity = Math.min(this.capacity * 2, this.maxKeys)
    const data = new Float64Array(capacity * STRIDE)
    data.set(this.data)
    const flags = new Uint8Array(capacity)
    flags.set(this.flags)
    const owner = new Uint16Array(capacity)
    owner.set(this.owner)
    this.data = data
    this.flags = flags
    this.owner = owner
    this.capacity = capacity
  }
}

/** One namespace's counters for one window size, stored in a {@link CounterDict}. */
export class WindowTable {
  readonly dict: CounterDict
  readonly index: number
  readonly namespace: string
  readonly sizeSec: number
  readonly sizeMs: number
  /** Whether the namespace syncs with a store (acked/others are kept). */
  readonly synced: boolean
  readonly slots = new Map<string, number>()
  /** Outcome of the last `decide()`. */
  lastAllowed = false
  // The window containing the last time seen: one division per window instead of a floor and a
  // float modulo (a C call for times beyond 2^31) per hit; see bench/engine.bench.ts.
  private startSec = 0
  private startMs = 0
  private endMs = Number.NEGATIVE_INFINITY

  constructor(dict: CounterDict, index: number, namespace: string, sizeSec: number, synced: boolean) {
    this.dict = dict
    this.index = index
    this.namespace = namespace
    this.sizeSec = sizeSec
    this.sizeMs = sizeSec * 1000
    this.synced = synced
  }

  /** Adds `value` to `key` at `nowMs`; returns the sliding rate after the addition. */
  add(key: string, value: number, nowMs: number): number {
    let slot = this.slots.get(key)
    if (slot === undefined) slot = this.dict.allocate(this, key, nowMs)
    const d = this.dict.data
    const base = slot * STRIDE
    const sizeMs = this.sizeMs
    const start = nowMs < this.endMs && nowMs >= this.startMs ? this.startSec : this.moveTo(nowMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    this.dict.flags[slot] = REFERENCED
    const mine = (d[base + CUR_MINE] as number) + value
    d[base + CUR_MINE] = mine
    const cur = mine + (d[base + CUR_OTHERS] as number)
    return cur + ((d[base + PREV_MINE] as number) + (d[base + PREV_OTHERS] as number)) * ((this.endMs - nowMs) / sizeMs)
  }

  /**
   * Decides one hit against one limit with a single lookup: allowed iff `rate + cost <= limit`.
   * Counts the hit when allowed or when `countDenied`. Returns the rate after (or, when not
   * counted, before) the hit; `lastAllowed` holds the outcome.
   */
  decide(key: string, cost: number, limit: number, countDenied: boolean, nowMs: number): number {
    const sizeMs = this.sizeMs
    let slot = this.slots.get(key)
    if (slot === undefined) {
      const allowed = cost <= limit
      this.lastAllowed = allowed
      if (!allowed && !countDenied) return 0
      slot = this.dict.allocate(this, key, nowMs)
    }
    const d = this.dict.data
    const base = slot * STRIDE
    const start = nowMs < this.endMs && nowMs >= this.startMs ? this.startSec : this.moveTo(nowMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    this.dict.flags[slot] = REFERENCED
    const rate =
      (d[base + CUR_MINE] as number) +
      (d[base + CUR_OTHERS] as number) +
      ((d[base + PREV_MINE] as number) + (d[base + PREV_OTHERS] as number)) * ((this.endMs - nowMs) / sizeMs)
    const allowed = rate + cost <= limit
    this.lastAllowed = allowed
    if (!allowed && !countDenied) return rate
    d[base + CUR_MINE] = (d[base + CUR_MINE] as number) + cost
    return rate + cost
  }

  /**
   * The sliding rate of `key` at `nowMs`. `curDiff` (Kong's `cur_diff`) replaces this
   * process's unsynced hits in the current window.
   */
  rate(key: string, nowMs: number, curDiff?: number): number {
    const slot = this.slots.get(key)
    const sizeMs = this.sizeMs
    if (slot === undefined) return curDiff ?? 0
    const d = this.dict.data
    const base = slot * STRIDE
    const start = nowMs < this.endMs && nowMs >= this.startMs ? this.startSec : this.moveTo(nowMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    let cur = (d[base + CUR_MINE] as number) + (d[base + CUR_OTHERS] as number)
    if (curDiff !== undefined) cur += curDiff - ((d[base + CUR_MINE] as number) - (d[base + CUR_ACKED] as number))
    return cur + ((d[base + PREV_MINE] as number) + (d[base + PREV_OTHERS] as number)) * ((this.endMs - nowMs) / sizeMs)
  }

  /** Current and previous window totals (this process's hits included) of `key` at `nowMs`. */
  counts(key: string, nowMs: number): { current: number; previous: number } {
    const slot = this.slots.get(key)
    if (slot === undefined) return { current: 0, previous: 0 }
    const d = this.dict.data
    const base = slot * STRIDE
    const start = windowStartSec(nowMs, this.sizeSec)
    if ((d[base + START] as number) < start) this.roll(base, start)
    return {
      current: (d[base + CUR_MINE] as number) + (d[base + CUR_OTHERS] as number),
      previous: (d[base + PREV_MINE] as number) + (d[base + PREV_OTHERS] as number),
    }
  }

  /** Forgets `key` here: its counts are gone from this process. */
  forget(key: string): void {
    const slot = this.slots.get(key)
    if (slot !== undefined) this.dict.release(slot)
  }

  /** Whether `key` has hits this process has not had acknowledged by the store. */
  hasUnsynced(key: string): boolean {
    const slot = this.slots.get(key)
    return slot !== undefined && this.dict.hasUnsynced(slot)
  }

  /** Ms from `nowMs` to the end of its window (no float modulo: the window is cached). */
  msToWindowEnd(nowMs: number): number {
    if (!(nowMs < this.endMs && nowMs >= this.startMs)) this.moveTo(nowMs)
    return this.endMs - nowMs
  }

  private moveTo(nowMs: number): number {
    const startMs = Math.floor(nowMs / this.sizeMs) * this.sizeMs
    this.startMs = startMs
    this.endMs = startMs + this.sizeMs
    this.startSec = startMs / 1000
    return this.startSec
  }

  private roll(base: number, start: number): void {
    const d = this.dict.data
    if (d[base + START] === start - this.sizeSec) {
      d[base + PREV_MINE] = d[base + CUR_MINE] as number
      d[base + PREV_ACKED] = d[base + CUR_ACKED] as number
      d[base + PREV_OTHERS] = d[base + CUR_OTHERS] as number
    } else {
      d[base + PREV_MINE] = 0
      d[base + PREV_ACKED] = 0
      d[base + PREV_OTHERS] = 0
    }
    d[base + CUR_MINE] = 0
    d[base + CUR_ACKED] = 0
    d[base + CUR_OTHERS] = 0
    d[base + START] = start
  }

  /**
   * Collects what one key needs from a sync at `nowMs`: a write for each window with unsynced
   * hits, a read-back for the others (none when `refresh` is omitted). Keys with nothing left in
   * either window are released.
   */
  collect(nowMs: number, windows: WindowPush[], refresh?: WindowRef[]): void {
    const d = this.dict.data
    const size = this.sizeSec
    const start = windowStartSec(nowMs, size)
    const prevStart = start - size
    for (const [key, slot] of this.slots) {
      const base = slot * STRIDE
      if ((d[base + START] as number) < start) {
        this.roll(base, start)
        if (d[base + PREV_MINE] === 0 && d[base + PREV_OTHERS] === 0 && d[base + PREV_ACKED] === 0) {
          this.dict.release(slot)
          continue
        }
      }
      const curMine = d[base + CUR_MINE] as number
      const curAcked = d[base + CUR_ACKED] as number
      if (curMine !== curAcked) {
        windows.push({ key, windowStart: start, windowSize: size, count: curMine, diff: curMine - curAcked })
      } else refresh?.push({ key, windowStart: start, windowSize: size })
      const prevMine = d[base + PREV_MINE] as number
      const prevAcked = d[base + PREV_ACKED] as number
      if (prevMine !== prevAcked) {
        windows.push({ key, windowStart: prevStart, windowSize: size, count: prevMine, diff: prevMine - prevAcked })
      } else refresh?.push({ key, windowStart: prevStart, windowSize: size })
    }
  }

  /**
   * What a single key's synchronous hit sends: its current window written (or read), and its
   * previous window written when it has unsynced hits, else read back unless `skipPrevious`
   * (the caller read it recently and uses the held value). A key not held is read in full.
   */
  collectKey(key: string, nowMs: number, windows: WindowPush[], refresh: WindowRef[], skipPrevious = false): void {
    const slot = this.slots.get(key)
    const size = this.sizeSec
    const start = windowStartSec(nowMs, size)
    if (slot === undefined) {
      refresh.push({ key, windowStart: start, windowSize: size }, { key, windowStart: start - size, windowSize: size })
      return
    }
    const d = this.dict.data
    const base = slot * STRIDE
    if ((d[base + START] as number) < start) this.roll(base, start)
    const curMine = d[base + CUR_MINE] as number
    const curAcked = d[base + CUR_ACKED] as number
    if (curMine !== curAcked) windows.push({ key, windowStart: start, windowSize: size, count: curMine, diff: curMine - curAcked })
    else refresh.push({ key, windowStart: start, windowSize: size })
    const prevMine = d[base + PREV_MINE] as number
    const prevAcked = d[base + PREV_ACKED] as number
    if (prevMine !== prevAcked)
      windows.push({ key, windowStart: start - size, windowSize: size, count: prevMine, diff: prevMine - prevAcked })
    else if (!skipPrevious) refresh.push({ key, windowStart: start - size, windowSize: size })
  }

  /**
   * Merges a row from the store: the other processes' total becomes `count - own`, and `own`
   * is what the store holds for this process. A store that lost this process's hits (a restart
   * without persistence) answers a lower `own`, so those hits become unsynced and are pushed
   * again. Rows for windows this process no longer holds are ignored; with `create`, a key not
   * held yet is added (warm-up by `fetch`).
   */
  apply(row: CounterRow, nowMs: number, create: boolean): void {
    let slot = this.slots.get(row.key)
    if (slot === undefined) {
      if (!create || row.count === 0) return
      const start = windowStartSec(nowMs, this.sizeSec)
      if (row.windowStart !== start && row.windowStart !== start - this.sizeSec) return
      slot = this.dict.allocate(this, row.key, nowMs)
      this.dict.flags[slot] = 0
      this.dict.data[slot * STRIDE + START] = start
    }
    const d = this.dict.data
    const base = slot * STRIDE
    const start = windowStartSec(nowMs, this.sizeSec)
    if ((d[base + START] as number) < start) this.roll(base, start)
    const slotStart = d[base + START] as number
    let column: number
    if (row.windowStart === slotStart) column = CUR_MINE
    else if (row.windowStart === slotStart - this.sizeSec) column = PREV_MINE
    else return
    d[base + column + 1] = row.own // acked
    d[base + column + 2] = row.count - row.own // others
  }
}
