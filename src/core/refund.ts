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

/**
 * Takes `cost` back from `key`'s window of `table` that holds `atMs`: the current window or the
 * one before it (older windows no longer weigh; a time in the future takes nothing). Only this
 * process's own hits can be taken back, and never below zero. The key is queued for the next
 * sync, which writes the lower cumulative count under a newer seq.
 */
export function takeBack(table: WindowTable, key: string, cost: number, atMs: number, nowMs: number): void {
  const sizeMs = table.sizeMs
  const start = windowStartMs(nowMs, sizeMs)
  const hitStart = windowStartMs(atMs, sizeMs)
  if (hitStart === start) {
    table.add(key, -cost, nowMs)
    return
  }
  const slot = table.slots.get(key)
  if (hitStart !== start - sizeMs || slot === undefined) return
  table.counts(key, nowMs) // rolls the slot to the current window
  const d = table.dict.data
  const i = slot * SLOT.STRIDE + SLOT.PREV_MINE
  const left = (d[i] as number) - cost
  d[i] = left > 0 ? left : 0
  table.requeue(key)
}
