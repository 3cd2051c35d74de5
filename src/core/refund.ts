import { SLOT, type WindowTable } from './counter-table.js'
import { usageRangeError } from './errors.js'
import { windowStartMs } from './window.js'

// Refunds: `limiter.refund(key, cost, { at })` takes back hits this process counted, in the
// window that counted them (docs/ARCHITECTURE.md, "Refunds").

/** Options of `limiter.refund()`. */
export interface RefundOptions {
  /**
   * When the refunded hit was counted, epoch ms on the limiter's clock (`limiter.clock()` read
   * just before the hit): the refund goes to that hit's window. A hit older than the previous
   * window weighs nothing any more and nothing is taken back. @default now
   */
  readonly at?: number
}

/** The time of a refund's hit, checked: `options.at` or `nowMs`. */
export function refundTime(options: RefundOptions | undefined, nowMs: number): number {
  if (options === undefined) return nowMs
  if (typeof options !== 'object' || options === null)
    throw usageRangeError('INVALID_VALUE', `refund options must be an object such as { at }, got ${String(options)}`)
  const at = options.at
  if (at === undefined) return nowMs
  if (typeof at !== 'number' || !Number.isFinite(at))
    throw usageRangeError('INVALID_VALUE', `refund option at must be finite epoch ms, got ${String(at)}`)
  return at
}

/** This process's own counts a synced reset took in, for one key in one table. */
interface Floor {
  readonly start: number // the current window's start at the reset, epoch ms
  readonly current: number
  readonly previous: number
}

/**
 * What synced resets covered (docs/ARCHITECTURE.md, "Refunds"): a reset in the store offsets
 * the key's total, this process's own hits included, while its own cumulative counts stay as
 * they are; a refund of a hit counted before the reset would lower the total below zero and
 * give the key that much more room. So a refund takes back at most the hits counted since.
 * Resets are rare (an admin, a successful login): a map per namespace, of at most `maxKeys`
 * keys (past that the oldest is dropped; its refunds are then bounded by zero only).
 */
export class ResetFloors {
  private readonly floors = new Map<WindowTable, Map<string, Floor>>()
  private size = 0
  private readonly maxKeys: number

  constructor(maxKeys: number) {
    this.maxKeys = maxKeys
  }

  /** Records what `key`'s reset covers: its own counts in `tables` now, just before the reset is pushed. */
  record(key: string, tables: readonly WindowTable[], nowMs: number): void {
    for (const table of tables) {
      const slot = table.slots.get(key)
      if (slot === undefined) continue
      table.counts(key, nowMs) // rolls the slot to the current window
      const base = slot * SLOT.STRIDE
      const d = table.dict.data
      let byKey = this.floors.get(table)
      if (byKey === undefined) this.floors.set(table, (byKey = new Map()))
      if (!byKey.delete(key)) this.size++
      byKey.set(key, {
        start: windowStartMs(nowMs, table.sizeMs),
        current: d[base + SLOT.CUR_MINE] as number,
        previous: d[base + SLOT.PREV_MINE] as number,
      })
      if (this.size > this.maxKeys) this.dropOldest(byKey)
    }
  }

  /** The own count of `key`'s window starting at `windowStart` that a reset covered, 0 if none. */
  floor(table: WindowTable, key: string, windowStart: number): number {
    const f = this.floors.get(table)?.get(key)
    if (f === undefined) return 0
    if (windowStart === f.start) return f.current
    if (windowStart === f.start - table.sizeMs) return f.previous
    return 0
  }

  private dropOldest(byKey: Map<string, Floor>): void {
    const oldest = byKey.keys().next()
    if (oldest.done !== true) {
      byKey.delete(oldest.value)
      this.size--
    }
  }
}

/**
 * Takes `cost` back from `key`'s window of `table` that holds `atMs`: the current window or the
 * one before it (older windows no longer weigh; a time in the future takes nothing). Only this
 * process's own hits can be taken back, never below zero nor below what a reset covered
 * (`floors`). The key is queued for the next sync, which writes the lower cumulative count under
 * a newer seq.
 */
export function takeBack(table: WindowTable, key: string, cost: number, atMs: number, nowMs: number, floors?: ResetFloors): void {
  const slot = table.slots.get(key)
  if (slot === undefined) return
  const sizeMs = table.sizeMs
  const start = windowStartMs(nowMs, sizeMs)
  const hitStart = windowStartMs(atMs, sizeMs)
  if (hitStart !== start && hitStart !== start - sizeMs) return
  table.counts(key, nowMs) // rolls the slot to the current window
  const i = slot * SLOT.STRIDE + (hitStart === start ? SLOT.CUR_MINE : SLOT.PREV_MINE)
  const d = table.dict.data
  const mine = d[i] as number
  const floor = floors === undefined ? 0 : Math.min(mine, floors.floor(table, key, hitStart))
  d[i] = mine - cost > floor ? mine - cost : floor
  table.requeue(key)
}
