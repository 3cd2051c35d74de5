// Predictive sync (docs/ARCHITECTURE.md, "Prediction"): between two syncs a periodic process
// knows its own hits exactly and the other processes' only as of the last sync. Each sync shows
// how much the others' count of a key grew since the one before; that growth over the time it
// took is the others' rate, and the hits they have made since the last sync are estimated as
// that rate times the time since, capped at one sync interval. The estimate is added to the
// rate a decision reads, never pushed nor counted: the sync invariants do not depend on it.
// No growth (no traffic, or a burst that stopped) gives a rate of 0 at the next sync.

/** Columns of a slot in the dict's `pred` array. */
export const PRED_STRIDE = 2
const RATE = 0 // the others' hits per ms, as measured between the last two syncs of the slot
const AT = 1 // when the others' count was last read (the sync's time), epoch ms; 0 never

/**
 * The others' hits estimated at `nowMs` since the slot's last sync: `rate × min(now − at,
 * capMs)`. Zero when nothing was measured.
 */
export function estimate(pred: Float64Array, slot: number, nowMs: number, capMs: number): number {
  const i = slot * PRED_STRIDE
  const rate = pred[i + RATE] as number
  if (rate === 0) return 0
  let elapsed = nowMs - (pred[i + AT] as number)
  if (elapsed > capMs) elapsed = capMs
  return elapsed > 0 ? rate * elapsed : 0
}

/**
 * A sync read the others' count of the slot's current window (it starts at `windowStartMs`):
 * `before` held until now, `after` the store's. The growth is measured over the time since the
 * last read, or since the window started when that was later (the count of a new window starts
 * at 0 there). The first read only sets the baseline. No growth is a rate of 0; growth seen in
 * no time (a read at the very start of the window) keeps the rate it had.
 */
export function observe(pred: Float64Array, slot: number, before: number, after: number, windowStartMs: number, nowMs: number): void {
  const i = slot * PRED_STRIDE
  const at = pred[i + AT] as number
  pred[i + AT] = nowMs
  // a first read (a new slot, a fetch) has nothing to compare with: it sets the baseline
  if (at === 0) return
  const from = at > windowStartMs ? at : windowStartMs
  const elapsed = nowMs - from
  const grown = after - before
  if (grown <= 0) pred[i + RATE] = 0
  else if (elapsed > 0) pred[i + RATE] = grown / elapsed
}
