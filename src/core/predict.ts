// Predictive sync (docs/ARCHITECTURE.md, "Prediction"): between two syncs a periodic process
// knows its own hits exactly and the other processes' only as of the last sync. The growth of
// the others' count of a key between two reads about a sync interval apart, over the time
// between them, is the others' rate. At a decision, the others' hits expected since the later
// of those reads (rate × time since, at most two intervals) minus those seen since then is the
// estimate of the hits not seen yet, added to the rate the decision reads. It is never pushed
// nor counted: the sync invariants do not depend on it. An interval with no growth (no traffic,
// or a burst that stopped) sets the rate to 0. The rate is taken low: the growth less one
// standard deviation of a Poisson count of that size (see observe()).

/** Columns of a slot in the dict's `pred` array. */
export const PRED_STRIDE = 3
const RATE = 0 // the others' hits per ms, as last measured
const BASE = 1 // the others' count in the current window at the baseline read
const BASE_AT = 2 // when the baseline was read, epoch ms; 0: never

// A rate is measured between reads at least this share of a sync interval apart: a timer-driven
// sync reads twice (the push's reply, then the read-back a twentieth of the interval later), and
// the fleet pushes in between, so the growth seen between two close reads is an interval's worth
// of the others' hits, not their rate. Reads in between move the estimate by what they saw.
const MIN_SPAN = 0.75

/**
 * The others' hits not seen yet at `nowMs`: `rate × min(now − baseline, 2 × capMs)` minus the
 * growth seen since the baseline (`others` is their count now, in the window that starts at
 * `windowStartMs`), never below 0.
 */
export function estimate(pred: Float64Array, slot: number, others: number, windowStartMs: number, nowMs: number, capMs: number): number {
  const i = slot * PRED_STRIDE
  const rate = pred[i + RATE] as number
  if (rate === 0) return 0
  let baseAt = pred[i + BASE_AT] as number
  let base = pred[i + BASE] as number
  if (baseAt < windowStartMs) {
    // a new window: its count started at 0 when it did
    baseAt = windowStartMs
    base = 0
  }
  let span = nowMs - baseAt
  if (span > 2 * capMs) span = 2 * capMs
  const unseen = rate * span - (others - base)
  return unseen > 0 ? unseen : 0
}

/**
 * A sync read `others`, the others' count of the slot's current window (it starts at
 * `windowStartMs`), at `nowMs`. The first read sets the baseline. A read at least `MIN_SPAN` of
 * `capMs` (the sync interval) after the baseline measures the rate and becomes the baseline;
 * a closer read changes nothing here. When the window turned since the baseline, the growth is
 * the new window's count (hits since its start) over the whole span: an underestimate for one
 * measurement, and 0 when the others were quiet, as they must read then.
 */
export function observe(pred: Float64Array, slot: number, others: number, windowStartMs: number, nowMs: number, capMs: number): void {
  const i = slot * PRED_STRIDE
  const baseAt = pred[i + BASE_AT] as number
  if (baseAt !== 0) {
    const span = nowMs - baseAt
    if (span < MIN_SPAN * capMs) return
    const grown = others - (baseAt < windowStartMs ? 0 : (pred[i + BASE] as number))
    // What the growth shows for sure, not its face value: a count of g hits from random arrivals
    // is off by about √g, so the rate is (g − √g) / span. A key the others hit once or not at all
    // in the interval (most of a fleet's keys) predicts nothing; a busy one keeps most of its
    // rate (90% at 100 hits). Face value overshot often enough on sparse keys to cost +1.0 to
    // +1.3 points of false denials (docs/ACCURACY.md, "Prediction").
    const sure = grown > 0 ? grown - Math.sqrt(grown) : 0
    pred[i + RATE] = sure / span
  }
  pred[i + BASE] = others
  pred[i + BASE_AT] = nowMs
}
