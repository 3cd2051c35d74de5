import type { CounterDict } from './counter-dict.js'
import { SLOT, slotRate, WindowTable } from './counter-table.js'
import type { CounterRow, GrantRequest, GrantRow, WindowPush } from './strategy.js'
import { retryAfterMs, windowStartMs } from './window.js'

// The slot layout (counter-table.ts), as this module's own constants: V8 folds those, not an
// imported object's fields, on spend(), the local path of an escrow hit.
const { STRIDE, START, CUR_MINE, CUR_ACKED, PREV_MINE, PREV_ACKED, PREV_OTHERS, REFERENCED, VISITED, ESC_STRIDE } = SLOT

// Escrow columns (dict.esc, ESC_STRIDE per slot; docs/ARCHITECTURE.md, "Escrow"): the seq of the
// newest call sent for each window's register, when a refusal ends, whether the slot is queued,
// and which registers were written by a call not answered yet.
const ESC_CUR_SENT = 0 // seq of the newest call sent for the current window's register
const ESC_PREV_SENT = 1 // the same for the previous window
const ESC_REFUSED = 2 // until when the store refused this key a hit, epoch ms
const ESC_QUEUED = 3 // 1 while in the table's queue
const ESC_UNANSWERED = 4 // bits: a write of the current (1) / previous (2) window's register not answered yet

/**
 * The counters of an escrow namespace for one window size (docs/ARCHITECTURE.md, "Escrow"): a
 * {@link WindowTable} whose `acked` column is the reservation the store granted this process, so
 * that `acked - mine` is the budget a hit may spend here, plus the escrow columns. Split from
 * counter-table.ts so that a namespace without escrow carries none of it.
 */
export class EscrowTable extends WindowTable {
  constructor(dict: CounterDict, namespace: string, sizeMs: number, synced: boolean) {
    super(dict, namespace, sizeMs, synced, false, true)
  }

  /**
   * Escrow: spends `cost` of `key`'s budget in the current window at `nowMs` (counts the hit) and
   * returns the sliding rate after it, or returns NaN and counts nothing when the budget
   * (`acked - mine`) is short.
   */
  spend(key: string, cost: number, nowMs: number): number {
    const slot = this.slots.get(key)
    if (slot === undefined) return Number.NaN
    const d = this.dict.data
    const base = slot * STRIDE
    const start = nowMs < this.endMs && nowMs >= this.startMs ? this.startMs : this.moveTo(nowMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    const mine = (d[base + CUR_MINE] as number) + cost
    if (mine > (d[base + CUR_ACKED] as number)) return Number.NaN
    d[base + CUR_MINE] = mine
    this.dict.flags[slot] = (this.dict.flags[slot] as number) | REFERENCED
    return slotRate(d, base, (this.endMs - nowMs) / this.sizeMs)
  }

  /**
   * Escrow: counts `cost` for `key` outside any budget (a hit denied but counted, or admitted
   * while no grant could be had); the next sync writes it. Returns the rate after it.
   */
  countOutside(key: string, cost: number, nowMs: number): number {
    const rate = this.add(key, cost, nowMs)
    const slot = this.slots.get(key)
    if (slot !== undefined) this.queueEscrow(slot)
    return rate
  }

  /** Escrow: this process's hits of `key` in the current window at `nowMs`. */
  mine(key: string, nowMs: number): number {
    const slot = this.slots.get(key)
    if (slot === undefined) return 0
    const d = this.dict.data
    const base = slot * STRIDE
    const start = windowStartMs(nowMs, this.sizeMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    return d[base + CUR_MINE] as number
  }

  /** Escrow: whether `key`'s budget in the current window at `nowMs` covers `cost`. */
  covers(key: string, cost: number, nowMs: number): boolean {
    const slot = this.slots.get(key)
    if (slot === undefined) return cost <= 0
    const d = this.dict.data
    const base = slot * STRIDE
    const start = windowStartMs(nowMs, this.sizeMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    return (d[base + CUR_MINE] as number) + cost <= (d[base + CUR_ACKED] as number)
  }

  /** Escrow: until when the store's last refusal of `key` holds, epoch ms (0: none). */
  refusedUntil(key: string): number {
    const slot = this.slots.get(key)
    return slot === undefined ? 0 : (this.dict.esc[slot * ESC_STRIDE + ESC_REFUSED] as number)
  }

  /**
   * Escrow: the grant a hit of `cost` asks for: at least this process's hits and the cost, at most
   * the limit; the store adds its share of what is left (GrantRequest).
   */
  grantRequest(key: string, cost: number, limit: number, nowMs: number, countRefused: boolean): GrantRequest {
    const start = windowStartMs(nowMs, this.sizeMs)
    let slot = this.slots.get(key)
    if (slot === undefined) slot = this.allocateEscrow(key, nowMs, start)
    const d = this.dict.data
    const base = slot * STRIDE
    if ((d[base + START] as number) < start) this.roll(base, start)
    const minimum = (d[base + CUR_MINE] as number) + cost
    const request = { key, windowStartMs: start, windowSizeMs: this.sizeMs, target: Math.max(minimum, limit), limit, minimum }
    return countRefused ? { ...request, countRefused } : request
  }

  /** Escrow: a call of seq `seq` carries `count` for `key`'s window at `windowStartMs`: lowers the budget believed held to it. */
  noteSent(key: string, windowStartMs: number, count: number, seq: number): void {
    const slot = this.slots.get(key)
    if (slot === undefined) return
    const d = this.dict.data
    const base = slot * STRIDE
    const start = d[base + START] as number
    const column = windowStartMs === start ? 0 : windowStartMs === start - this.sizeMs ? 1 : -1
    if (column < 0) return
    const esc = this.dict.esc
    const e = slot * ESC_STRIDE
    esc[e + (column === 0 ? ESC_CUR_SENT : ESC_PREV_SENT)] = seq
    // until answered, the write is sent again by every sync: the register believed held is
    // lowered now, so mine === acked no longer tells that the store has it
    esc[e + ESC_UNANSWERED] = (esc[e + ESC_UNANSWERED] as number) | (column === 0 ? 1 : 2)
    const acked = base + (column === 0 ? CUR_ACKED : PREV_ACKED)
    if (count < (d[acked] as number)) d[acked] = count
  }

  /** Escrow: queues `key` for the next sync (its write failed). */
  requeueEscrow(key: string): void {
    const slot = this.slots.get(key)
    if (slot !== undefined) this.queueEscrow(slot)
  }

  /** Escrow: a grant of seq `seq` for `key` was sent. */
  noteGrantSent(key: string, seq: number): void {
    const slot = this.slots.get(key)
    if (slot !== undefined) this.dict.esc[slot * ESC_STRIDE + ESC_CUR_SENT] = seq
  }

  /**
   * Escrow: merges a row answered to the call of seq `seq`. The register (`acked`) is taken as
   * answered only from the newest call sent for that window; an older answer may only lower it,
   * since a later call (a return) may have lowered the store's since. The others' total is taken
   * either way. A row that shows hits to write, or a reservation to return later, queues the key.
   */
  applyEscrow(row: CounterRow, seq: number, nowMs: number): void {
    const slot = this.slots.get(row.key)
    if (slot === undefined) return
    const d = this.dict.data
    const base = slot * STRIDE
    const start = windowStartMs(nowMs, this.sizeMs)
    if ((d[base + START] as number) < start) this.roll(base, start)
    const slotStart = d[base + START] as number
    const esc = this.dict.esc
    const e = slot * ESC_STRIDE
    if (row.windowStartMs === slotStart) {
      if (seq >= (esc[e + ESC_CUR_SENT] as number)) esc[e + ESC_UNANSWERED] = (esc[e + ESC_UNANSWERED] as number) & ~1
      this.takeRegister(base + CUR_MINE, esc[e + ESC_CUR_SENT] as number, seq, row.own, row.count)
    } else if (row.windowStartMs === slotStart - this.sizeMs) {
      if (seq >= (esc[e + ESC_PREV_SENT] as number)) esc[e + ESC_UNANSWERED] = (esc[e + ESC_UNANSWERED] as number) & ~2
      this.takeRegister(base + PREV_MINE, esc[e + ESC_PREV_SENT] as number, seq, row.own, row.count)
    } else return
    const grant = row as Partial<GrantRow>
    if (grant.previousCount !== undefined && row.windowStartMs === slotStart)
      this.takeRegister(base + PREV_MINE, esc[e + ESC_PREV_SENT] as number, seq, grant.previousOwn ?? 0, grant.previousCount)
    this.queueEscrow(slot)
  }

  /** Escrow: the store refused `key` a hit; it is denied here without a store call until `untilMs`. */
  refuse(key: string, untilMs: number): void {
    const slot = this.slots.get(key)
    if (slot !== undefined) this.dict.esc[slot * ESC_STRIDE + ESC_REFUSED] = untilMs
  }

  /**
   * Escrow: the instant a hit of `cost` could fit under `limit` again on this view (the previous
   * window's weight decaying, or the window's end), epoch ms.
   */
  refusalEnd(key: string, cost: number, limit: number, nowMs: number): number {
    const { current, previous } = this.counts(key, nowMs)
    const wait = retryAfterMs(current, previous, nowMs, this.sizeMs, limit, cost)
    return Number.isFinite(wait) ? nowMs + Math.max(1, wait) : Number.POSITIVE_INFINITY
  }

  /**
   * Escrow: the store lost its reservations (a new epoch): every budget is dropped (the register
   * believed held is 0) and every key with hits is queued, so the next sync writes them again.
   */
  escrowLost(): void {
    const d = this.dict.data
    for (const slot of this.slots.values()) {
      const base = slot * STRIDE
      d[base + CUR_ACKED] = 0
      d[base + PREV_ACKED] = 0
      this.dict.esc[slot * ESC_STRIDE + ESC_REFUSED] = 0
      this.queueEscrow(slot)
    }
  }

  // Takes a register from a row (`mine` is CUR_MINE or PREV_MINE; acked and others follow it).
  private takeRegister(mine: number, sentSeq: number, seq: number, own: number, count: number): void {
    const d = this.dict.data
    const acked = mine + 1
    if (seq >= sentSeq) d[acked] = own
    else if (own < (d[acked] as number)) d[acked] = own
    d[mine + 2] = count - own
  }

  private allocateEscrow(key: string, nowMs: number, start: number): number {
    const slot = this.dict.allocate(this, key, nowMs)
    this.dict.data[slot * STRIDE + START] = start
    return slot
  }

  // Queued for the next sync whatever the namespace's hit-queueing (escrow tables queue no hits).
  private queueEscrow(slot: number): void {
    const e = slot * ESC_STRIDE + ESC_QUEUED
    if (this.dict.esc[e] === 1) return
    this.dict.esc[e] = 1
    this.enqueue(slot)
  }

  // An escrow sync's visit: the previous window's register goes back to the hits counted there
  // (unused budget returned, or hits counted while denied written), the current one's up to the
  // hits when they passed it; the key stays queued while it holds a reservation (returned once
  // its window closes). Nothing is read back: escrow decides on grants, not on refreshed counts.
  // An explicit sync (rl.sync(), close(): returnAll) returns every unused budget of a closed window.
  protected override visitSlot(slot: number, startMs: number, _weight: number, windows: WindowPush[]): void {
    const d = this.dict.data
    const base = slot * STRIDE
    if ((d[base + START] as number) < startMs) {
      this.roll(base, startMs)
      if (d[base + PREV_MINE] === 0 && d[base + PREV_ACKED] === 0 && d[base + CUR_MINE] === 0 && d[base + CUR_ACKED] === 0) {
        this.dict.release(slot)
        return
      }
    }
    const key = this.dict.keys[slot] as string
    const sizeMs = this.sizeMs
    const unanswered = this.dict.esc[slot * ESC_STRIDE + ESC_UNANSWERED] as number
    const prevMine = d[base + PREV_MINE] as number
    const prevAcked = d[base + PREV_ACKED] as number
    // unused budget goes back only where the fleet was near the limit: elsewhere the closed
    // window's weight, budget included, leaves room to spare, and a return is a store operation
    // per key and process (about half of what a key far below its limit cost)
    const returns = prevAcked > prevMine && (this.returnAll || prevAcked + (d[base + PREV_OTHERS] as number) >= this.nearLimit)
    if (prevMine > prevAcked || returns || (unanswered & 2) !== 0)
      windows.push({ key, windowStartMs: startMs - sizeMs, windowSizeMs: sizeMs, count: prevMine, diff: prevMine - prevAcked })
    const curMine = d[base + CUR_MINE] as number
    const curAcked = d[base + CUR_ACKED] as number
    if (curMine > curAcked || (unanswered & 1) !== 0)
      windows.push({ key, windowStartMs: startMs, windowSizeMs: sizeMs, count: Math.max(curMine, curAcked), diff: curMine - curAcked })
    if (curMine > 0 || curAcked > 0 || prevMine > prevAcked || unanswered !== 0) this.queueEscrow(slot)
  }

  // Queued slots are marked in the escrow columns (an escrow table queues no hits).
  protected override dequeue(slot: number, flags: number): boolean {
    const e = slot * ESC_STRIDE + ESC_QUEUED
    if (this.dict.esc[e] !== 1 || (flags & VISITED) !== 0) return false
    this.dict.esc[e] = 0
    return true
  }

  // The registers' bookkeeping rolls with the windows.
  protected override roll(base: number, startMs: number): void {
    const slot = base / STRIDE
    const adjacent = this.dict.data[base + START] === startMs - this.sizeMs
    const esc = this.dict.esc
    const e = slot * ESC_STRIDE
    esc[e + ESC_PREV_SENT] = adjacent ? (esc[e + ESC_CUR_SENT] as number) : 0
    esc[e + ESC_CUR_SENT] = 0
    esc[e + ESC_REFUSED] = 0
    esc[e + ESC_UNANSWERED] = adjacent && ((esc[e + ESC_UNANSWERED] as number) & 1) !== 0 ? 2 : 0
    super.roll(base, startMs)
  }
}
