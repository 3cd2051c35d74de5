import { SLOT, type WindowTable } from './counter-table.js'

// The slot layout, read once when the module loads (counter-table.ts defines it, next to the hot path).
const { STRIDE, START, CUR_MINE, CUR_ACKED, PREV_MINE, PREV_ACKED, REFERENCED, ESC_STRIDE } = SLOT

import { windowStartMs } from './window.js'

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
 * no unsynced hits is dropped. A new key starts without the bit (it is set by the key's next
 * hit, as in SIEVE): in a flood of keys each hit once, the hand finds one of them at once and
 * keys hit again keep their counts; were new keys marked, every scan would find them all
 * marked and drop whatever lay under the hand, keys in use included, and a flood of junk keys
 * would reset a victim's count. If none is found within 256 slots, the first unreferenced slot
 * seen is dropped even though its unsynced hits are then lost (counted in `evictedUnsynced`).
 * Slots whose windows have both passed are recycled first, and swept as new keys arrive.
 */
export class CounterDict {
  readonly name: string
  readonly maxKeys: number
  readonly tables: WindowTable[] = []
  data: Float64Array
  /** An escrow table's columns per slot (counter-table.ts: ESC_*), made when a table uses escrow; else empty. */
  esc = new Float64Array(0)
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

  /** Makes (or grows) the escrow columns: a table of this dict uses escrow. */
  enableEscrow(): void {
    const size = Math.max(this.capacity, this.data.length / STRIDE) * ESC_STRIDE
    if (this.esc.length >= size) return
    const esc = new Float64Array(size)
    esc.set(this.esc)
    this.esc = esc
  }

  /** Registers a window table (one namespace and size); returns its index in the dict. */
  addTable(table: WindowTable): number {
    if (this.tables.length >= 0xffff) throw new RangeError(`dict "${this.name}": too many namespace window sizes`)
    this.tables.push(table)
    return this.tables.length - 1
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
    // not referenced: a key earns its second chance with its second hit (see the class comment)
    this.flags[slot] = 0
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
    if (this.esc.length > 0) this.esc.fill(0, slot * ESC_STRIDE, slot * ESC_STRIDE + ESC_STRIDE)
    this.flags[slot] = 0
    this.free.push(slot)
    this.held--
  }

  isStale(slot: number, nowMs: number): boolean {
    const table = this.tables[this.owner[slot] as number] as WindowTable
    return (this.data[slot * STRIDE + START] as number) < windowStartMs(nowMs, table.sizeMs) - table.sizeMs
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
    if (this.esc.length > 0) this.enableEscrow()
    this.flags = flags
    this.owner = owner
    this.capacity = capacity
  }
}
