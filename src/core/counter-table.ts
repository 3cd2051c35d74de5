import type { CounterDict } from './counter-dict.js'
import type { CounterRow, WindowPush, WindowRef } from './strategy.js'
import { slidingRate, windowStartMs } from './window.js'

// Columns of one slot (a key in one window size), in one Float64Array: one allocation for the
// whole dict, and about 56 bytes per key-window instead of an object per key. Defined here, where
// the hot path reads them: V8 folds a module's own constants, not those it imports (an imported
// binding is a load and a check per use; 3-4 ns per hit, measured with bench/engine.bench.ts).
const STRIDE = 7
const START = 0 // start of the slot's current window, epoch ms
const CUR_MINE = 1 // this process's cumulative hits in the current window
const CUR_ACKED = 2 // what the store last said it holds for this process
const CUR_OTHERS = 3 // the other processes' total at the last sync
const PREV_MINE = 4
const PREV_ACKED = 5
const PREV_OTHERS = 6

// An escrow table's columns per slot, in dict.esc (escrow-table.ts says what they hold).
const ESC_STRIDE = 5

// Flag bits of a slot:
const REFERENCED = 1 // CLOCK bit: hit since the eviction hand last passed
const QUEUED = 2 // in its table's queue of slots the next sync visits (see WindowTable.collect)
const VISITED = 4 // visited by the sync being collected; cleared before it returns
const HIT_FLAGS = REFERENCED | QUEUED // what a hit leaves: referenced and queued

/** The slot layout, for the dict (its cold paths: allocation, eviction, release) and the escrow table. */
export const SLOT = {
  STRIDE,
  START,
  CUR_MINE,
  CUR_ACKED,
  CUR_OTHERS,
  PREV_MINE,
  PREV_ACKED,
  PREV_OTHERS,
  REFERENCED,
  QUEUED,
  VISITED,
  ESC_STRIDE,
} as const

// A key whose rate is at least this share of the smallest limit decided on its table is "near its
// limit": each sync refreshes it, hit or not, so that a hit after a pause decides on fresh counts.
const NEAR_LIMIT_SHARE = 0.5

/** The sliding rate of the slot at `base`: current window's total plus previous one's at `weight`. */
export function slotRate(d: Float64Array, base: number, weight: number): number {
  return slidingRate(
    (d[base + CUR_MINE] as number) + (d[base + CUR_OTHERS] as number),
    (d[base + PREV_MINE] as number) + (d[base + PREV_OTHERS] as number),
    weight,
  )
}

/** One namespace's counters for one window size, stored in a {@link CounterDict}. */
export class WindowTable {
  readonly dict: CounterDict
  readonly index: number
  readonly namespace: string
  /** Window size in seconds, as the API names it (fractions allowed). */
  readonly sizeSec: number
  /** Window size in whole ms. */
  readonly sizeMs: number
  /** Whether the namespace syncs with a store (acked/others are kept). */
  readonly synced: boolean
  /** Whether a hit queues its key for the next periodic sync (see {@link collect}). */
  readonly queuesHits: boolean
  /** Whether hits are admitted against budgets granted by the store (an escrow namespace). */
  readonly escrow: boolean
  readonly slots = new Map<string, number>()
  /** Outcome of the last `decide()`. */
  lastAllowed = false
  // The window containing the last time seen: one division per window instead of a floor and a
  // float modulo per hit; see bench/engine.bench.ts.
  protected startMs = 0
  protected endMs = Number.NEGATIVE_INFINITY
  // Slots the next periodic sync visits: hit (or read) since the last one, near their limit, or
  // whose write failed. A slot is queued once (its QUEUED flag); entries left by a slot recycled
  // since are skipped. Past queueLimit entries the next sync scans every slot instead.
  private queue: number[] = []
  private readonly queueLimit: number
  private queueOverflow = false
  protected nearLimit = Number.POSITIVE_INFINITY
  // an explicit sync (rl.sync(), close()) is being collected: see EscrowTable
  protected returnAll = false
  // The round-robin over every held key that refreshes idle ones, a slice per sync.
  private sweeper: IterableIterator<number> | undefined

  constructor(dict: CounterDict, namespace: string, sizeMs: number, synced: boolean, queuesHits: boolean, escrow = false) {
    this.dict = dict
    this.escrow = escrow
    if (escrow) dict.enableEscrow()
    this.namespace = namespace
    this.sizeMs = sizeMs
    this.sizeSec = sizeMs / 1000
    this.synced = synced
    this.queuesHits = queuesHits
    this.queueLimit = Math.max(1024, dict.maxKeys)
    this.index = dict.addTable(this)
  }

  /** Slots queued for the next sync (an entry may be stale: a slot released since). */
  get queued(): number {
    return this.queue.length
  }

  /** Key-windows held. */
  get size(): number {
    return this.slots.size
  }

  /** Adds `value` to `key` at `nowMs`; returns the sliding rate after the addition. */
  add(key: string, value: number, nowMs: number): number {
    let slot = this.slots.get(key)
    if (slot === undefined) slot = this.hold(key, nowMs)
    else if (this.dict.flags[slot] !== HIT_FLAGS) this.touch(slot)
    const d = this.dict.data
    const base = slot * STRIDE
    const start = nowMs < this.endMs && nowMs >= this.startMs ? this.startMs : this.moveTo(nowMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    let mine = (d[base + CUR_MINE] as number) + value
    // a process takes back at most what it counted in the window: counts never go negative
    if (mine < 0) mine = 0
    d[base + CUR_MINE] = mine
    return slotRate(d, base, (this.endMs - nowMs) / this.sizeMs)
  }

  /**
   * Decides one hit against one limit with a single lookup: allowed iff `rate + cost <= limit`.
   * Counts it when allowed or when `countDenied` (never a cost above the limit, which no rate can
   * admit). Returns the rate after (when not counted, before) the hit; `lastAllowed` the outcome.
   */
  decide(key: string, cost: number, limit: number, countDenied: boolean, nowMs: number): number {
    let slot = this.slots.get(key)
    if (slot === undefined) {
      const allowed = cost <= limit
      this.lastAllowed = allowed
      if (!allowed) return 0
      slot = this.hold(key, nowMs)
    } else if (this.dict.flags[slot] !== HIT_FLAGS) this.touch(slot)
    const d = this.dict.data
    const base = slot * STRIDE
    const start = nowMs < this.endMs && nowMs >= this.startMs ? this.startMs : this.moveTo(nowMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    const rate = slotRate(d, base, (this.endMs - nowMs) / this.sizeMs)
    const allowed = rate + cost <= limit
    this.lastAllowed = allowed
    if (!allowed && (!countDenied || cost > limit)) return rate
    d[base + CUR_MINE] = (d[base + CUR_MINE] as number) + cost
    return rate + cost
  }

  /**
   * The sliding rate of `key` at `nowMs`. `curDiff` (Kong's `cur_diff`) replaces this
   * process's unsynced hits in the current window. A key read is refreshed by the next sync.
   */
  rate(key: string, nowMs: number, curDiff?: number): number {
    let slot = this.slots.get(key)
    if (slot === undefined) {
      // a key this process has not seen: in a periodic namespace it is held from now, so the
      // next sync reads the fleet's count; a read otherwise answered 0 for good
      if (!this.queuesHits) return curDiff ?? 0
      slot = this.hold(key, nowMs)
    } else if (this.dict.flags[slot] !== HIT_FLAGS) this.touch(slot)
    const d = this.dict.data
    const base = slot * STRIDE
    const start = nowMs < this.endMs && nowMs >= this.startMs ? this.startMs : this.moveTo(nowMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    const rate = slotRate(d, base, (this.endMs - nowMs) / this.sizeMs)
    if (curDiff === undefined) return rate
    return rate + curDiff - ((d[base + CUR_MINE] as number) - (d[base + CUR_ACKED] as number))
  }

  /** Current and previous window totals, this process's hits included, of `key` at `nowMs`. */
  counts(key: string, nowMs: number): { current: number; previous: number } {
    const slot = this.slots.get(key)
    if (slot === undefined) return { current: 0, previous: 0 }
    const d = this.dict.data
    const base = slot * STRIDE
    const start = windowStartMs(nowMs, this.sizeMs)
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

  /** A limiter decides `limit` on this table: keys near it are refreshed by every sync. */
  watchLimit(limit: number): void {
    const near = limit * NEAR_LIMIT_SHARE
    if (near < this.nearLimit) this.nearLimit = near
  }

  /** Queues `key` for the next sync (a push of it failed, so it must be written again). */
  requeue(key: string): void {
    const slot = this.slots.get(key)
    if (slot !== undefined) this.queueSlot(slot)
  }

  /**
   * Collects what the next sync sends for this table at `nowMs`: a write for each window with
   * unsynced hits and, with `refresh`, a read-back of the other windows visited. Visited: with
   * `all`, every key; else those queued (hit or read since the last sync, near their limit, or
   * whose push failed) plus the next `idleBudget` keys of a round-robin over all held keys. Keys
   * with nothing left in either window are released.
   */
  collect(nowMs: number, windows: WindowPush[], refresh: WindowRef[] | undefined, idleBudget: number, all: boolean): void {
    const { flags, keys, owner } = this.dict
    const startMs = windowStartMs(nowMs, this.sizeMs)
    const weight = (startMs + this.sizeMs - nowMs) / this.sizeMs
    const visited: number[] = []
    const queue = this.queue
    this.queue = []
    const full = all || this.queueOverflow
    this.returnAll = all
    this.queueOverflow = false
    if (full) {
      for (const slot of this.slots.values()) this.visit(slot, startMs, weight, windows, refresh, visited)
      this.sweeper = undefined
    } else {
      for (let i = 0; i < queue.length; i++) {
        const slot = queue[i] as number
        if (owner[slot] === this.index && keys[slot] !== undefined && this.dequeue(slot, flags[slot] as number))
          this.visit(slot, startMs, weight, windows, refresh, visited)
      }
      for (let n = idleBudget; n > 0; n--) {
        if (this.sweeper === undefined) this.sweeper = this.slots.values()
        const next = this.sweeper.next()
        if (next.done === true) {
          this.sweeper = undefined // a round is complete; the next sync starts another
          break
        }
        if (((flags[next.value] as number) & VISITED) === 0) this.visit(next.value, startMs, weight, windows, refresh, visited)
      }
    }
    for (let i = 0; i < visited.length; i++) {
      const slot = visited[i] as number
      flags[slot] = (flags[slot] as number) & ~VISITED
    }
  }

  /**
   * What a single key's synchronous hit sends: its current window written (or read), and its
   * previous window written when it has unsynced hits, else read back unless `skipPrevious`
   * (the caller read it recently and uses the held value). A key not held is read in full. With
   * `write` the current window is written even when equal to the acked count (see pushKey).
   */
  collectKey(key: string, nowMs: number, windows: WindowPush[], refresh: WindowRef[], skipPrevious = false, write = false): void {
    const slot = this.slots.get(key)
    const sizeMs = this.sizeMs
    const start = windowStartMs(nowMs, sizeMs)
    if (slot === undefined) {
      refresh.push({ key, windowStartMs: start, windowSizeMs: sizeMs }, { key, windowStartMs: start - sizeMs, windowSizeMs: sizeMs })
      return
    }
    const d = this.dict.data
    const base = slot * STRIDE
    if ((d[base + START] as number) < start) this.roll(base, start)
    this.windowOf(key, base, CUR_MINE, start, windows, refresh, write)
    if (d[base + PREV_MINE] !== d[base + PREV_ACKED] || !skipPrevious) this.windowOf(key, base, PREV_MINE, start - sizeMs, windows, refresh)
  }

  /**
   * Merges a row from the store: the other processes' total becomes `count - own`, and `own`
   * is what the store holds for this process. A store that lost this process's hits (a restart
   * without persistence) answers a lower `own`: those hits become unsynced and queued again. Rows
   * for windows no longer held are ignored; with `create`, a key not held is added (`fetch`).
   */
  apply(row: CounterRow, nowMs: number, create: boolean): void {
    const sizeMs = this.sizeMs
    const start = windowStartMs(nowMs, sizeMs)
    let slot = this.slots.get(row.key)
    if (slot === undefined) {
      if (!create || row.count === 0) return
      if (row.windowStartMs !== start && row.windowStartMs !== start - sizeMs) return
      slot = this.dict.allocate(this, row.key, nowMs)
      this.dict.flags[slot] = 0
      this.dict.data[slot * STRIDE + START] = start
    }
    const d = this.dict.data
    const base = slot * STRIDE
    if ((d[base + START] as number) < start) this.roll(base, start)
    const slotStart = d[base + START] as number
    let mine: number
    if (row.windowStartMs === slotStart) mine = CUR_MINE
    else if (row.windowStartMs === slotStart - sizeMs) mine = PREV_MINE
    else return
    d[base + mine + 1] = row.own // acked
    d[base + mine + 2] = row.count - row.own // others
    if (this.queuesHits && d[base + mine] !== row.own) this.queueSlot(slot)
  }

  // A sync visits one slot: roll it, release it if empty, write or read back its two windows,
  // and keep it queued while it is near its limit.
  private visit(
    slot: number,
    startMs: number,
    weight: number,
    windows: WindowPush[],
    refresh: WindowRef[] | undefined,
    visited: number[],
  ): void {
    const flags = this.dict.flags
    flags[slot] = ((flags[slot] as number) & ~QUEUED) | VISITED
    visited.push(slot)
    this.visitSlot(slot, startMs, weight, windows, refresh)
  }

  /** Whether a queued slot is to be visited now (taking it off the queue), given its flags. */
  protected dequeue(_slot: number, flags: number): boolean {
    return (flags & QUEUED) !== 0 && (flags & VISITED) === 0
  }

  /** A sync's visit of one slot, after its flags: its windows written or read back. */
  protected visitSlot(slot: number, startMs: number, weight: number, windows: WindowPush[], refresh: WindowRef[] | undefined): void {
    const d = this.dict.data
    const base = slot * STRIDE
    if ((d[base + START] as number) < startMs) {
      this.roll(base, startMs)
      if (d[base + PREV_MINE] === 0 && d[base + PREV_OTHERS] === 0 && d[base + PREV_ACKED] === 0) {
        this.dict.release(slot)
        return
      }
    }
    const key = this.dict.keys[slot] as string
    this.windowOf(key, base, CUR_MINE, startMs, windows, refresh)
    this.windowOf(key, base, PREV_MINE, startMs - this.sizeMs, windows, refresh)
    if (slotRate(d, base, weight) >= this.nearLimit) this.queueSlot(slot)
  }

  // A slot's window (`mine`: CUR_MINE or PREV_MINE): written when unsynced or `write`, else read back when `refresh` is given.
  private windowOf(
    key: string,
    base: number,
    mine: number,
    windowStartMs: number,
    windows: WindowPush[],
    refresh: WindowRef[] | undefined,
    write = false,
  ): void {
    const d = this.dict.data
    const count = d[base + mine] as number
    const acked = d[base + mine + 1] as number
    if (count !== acked || write) windows.push({ key, windowStartMs, windowSizeMs: this.sizeMs, count, diff: count - acked })
    else refresh?.push({ key, windowStartMs, windowSizeMs: this.sizeMs })
  }

  // A hit or read: referenced for CLOCK, and queued for the next periodic sync.
  private touch(slot: number): void {
    const flags = this.dict.flags
    const f = flags[slot] as number
    flags[slot] = f | HIT_FLAGS
    if ((f & QUEUED) === 0 && this.queuesHits) this.enqueue(slot)
  }

  // A new key's slot, queued but not referenced: eviction takes a key seen once before one hit
  // again, so a flood of new keys cannot push out the keys in use (counter-dict.ts).
  private hold(key: string, nowMs: number): number {
    const slot = this.dict.allocate(this, key, nowMs)
    this.queueSlot(slot)
    return slot
  }

  private queueSlot(slot: number): void {
    const flags = this.dict.flags
    const f = flags[slot] as number
    if ((f & QUEUED) !== 0 || !this.queuesHits) return
    flags[slot] = f | QUEUED
    this.enqueue(slot)
  }

  protected enqueue(slot: number): void {
    if (this.queue.length < this.queueLimit) this.queue.push(slot)
    else this.queueOverflow = true
  }

  protected moveTo(nowMs: number): number {
    const startMs = windowStartMs(nowMs, this.sizeMs)
    this.startMs = startMs
    this.endMs = startMs + this.sizeMs
    return startMs
  }

  protected roll(base: number, startMs: number): void {
    const d = this.dict.data
    if (d[base + START] === startMs - this.sizeMs) {
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
    d[base + START] = startMs
  }
}
