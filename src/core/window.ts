/**
 * Window math shared by the engine, the decisions and every strategy. Windows align to the
 * epoch and are whole milliseconds; the API takes their sizes in seconds (Kong's unit), with
 * fractions down to 0.001 s.
 */

/**
 * The longest window, ms: 2^54 (about 570,000 years; @fastify/rate-limit's tests use 285,421
 * years, just past 2^53 ms). Times past 2^53 ms round to a few ms, since doubles hold every whole
 * number only up to there; the retry time stays safe (never early), see {@link retryAfterMs}.
 */
export const MAX_WINDOW_MS = 2 ** 54

/** The largest value one hit may add or take back: 2^53 - 1, so counts stay finite and whole. */
export const MAX_HIT_VALUE = Number.MAX_SAFE_INTEGER

/**
 * The whole milliseconds of a window size given in seconds, or NaN when it is not a positive,
 * finite number of whole milliseconds (at least 0.001 s, at most {@link MAX_WINDOW_MS}).
 * `0.05` is 50 ms; `0.0005` and `1e14` are NaN.
 */
export function windowSizeMs(sizeSec: number): number {
  if (typeof sizeSec !== 'number' || !(sizeSec > 0)) return Number.NaN
  const exact = sizeSec * 1000
  const ms = Math.round(exact)
  // 0.007 * 1000 is 7.000000000000001: a size that is whole ms up to float error is accepted
  if (ms < 1 || ms > MAX_WINDOW_MS || Math.abs(exact - ms) > 1e-6 * ms) return Number.NaN
  return ms
}

/** Start, in epoch ms, of the window of `sizeMs` that contains `nowMs`. */
export function windowStartMs(nowMs: number, sizeMs: number): number {
  return Math.floor(nowMs / sizeMs) * sizeMs
}

/**
 * Weight of the previous window at `nowMs`: `(sizeMs - nowMs % sizeMs) / sizeMs`, from 1 at the
 * start of the current window down to (almost) 0 at its end.
 */
export function previousWeight(nowMs: number, sizeMs: number): number {
  return (sizeMs - (nowMs - windowStartMs(nowMs, sizeMs))) / sizeMs
}

/** The sliding rate: `current + previous * weight`, not rounded. */
export function slidingRate(current: number, previous: number, weight: number): number {
  return current + previous * weight
}

// Steps the closed form may be moved by the engine's own formula: floating point puts it at most
// a ms or so off. A bound, so the work never depends on the window or the time.
const CORRECTION_STEPS = 4

/**
 * Milliseconds from `nowMs` until a hit of `cost` would be allowed (`rate + cost <= limit`),
 * assuming no other hit arrives. 0 when it is allowed now, `Infinity` when it never can be
 * (`cost > limit`). Exact to the millisecond: the result is the first whole ms at which the
 * engine's own rate formula admits the hit (where times pass 2^53 ms and whole ms no longer
 * exist, it is never earlier than that instant).
 *
 * Derivation: the rate only falls with time. Inside the current window it is
 * `cur + prev * (1 - p)`; once the window ends, `cur` becomes the previous window and the rate
 * is `cur * (1 - p')` over the next one. Solving `rate + cost = limit` gives the instant; a
 * bounded correction settles it on the formula's own rounding. No loop runs longer than
 * {@link CORRECTION_STEPS} steps, whatever the window or the time.
 */
export function retryAfterMs(current: number, previous: number, nowMs: number, sizeMs: number, limit: number, cost: number): number {
  const startMs = windowStartMs(nowMs, sizeMs)
  if (isAllowedAt(nowMs, startMs, current, previous, sizeMs, limit, cost)) return 0
  if (cost > limit) return Number.POSITIVE_INFINITY
  let at: number
  if (current + cost <= limit) {
    // previous > 0 here, or the hit would be allowed now
    at = startMs + sizeMs * (1 - (limit - current - cost) / previous)
  } else {
    at = startMs + sizeMs + sizeMs * Math.max(0, 1 - (limit - cost) / current)
  }
  let t = Math.max(nowMs + 1, Math.ceil(at))
  for (let i = 0; i < CORRECTION_STEPS && !isAllowedAt(t, startMs, current, previous, sizeMs, limit, cost); i++) t++
  for (let i = 0; i < CORRECTION_STEPS && t - 1 > nowMs && isAllowedAt(t - 1, startMs, current, previous, sizeMs, limit, cost); i++) t--
  // Past 2^53 ms, t + 1 === t and now + (t - now) may round below t: the steps above may not
  // reach an instant that a caller adding the wait to now finds allowed. Both windows have passed
  // by startMs + 2 * sizeMs, where the rate is 0; now + 2 * sizeMs rounds to no less than that.
  const wait = t - nowMs
  if (isAllowedAt(nowMs + wait, startMs, current, previous, sizeMs, limit, cost)) return wait
  const untilBothPass = startMs + 2 * sizeMs - nowMs
  if (isAllowedAt(nowMs + untilBothPass, startMs, current, previous, sizeMs, limit, cost)) return untilBothPass
  return 2 * sizeMs
}

/**
 * Whether a hit of `cost` passes at `t`, no other hit arriving after the window starting at
 * `startMs` held `current` (and the one before it `previous`). A plain function, not a closure:
 * it runs on every denied hit; see bench/engine.bench.ts.
 */
function isAllowedAt(t: number, startMs: number, current: number, previous: number, sizeMs: number, limit: number, cost: number): boolean {
  let rate: number
  if (t < startMs + sizeMs) rate = current + previous * ((startMs + sizeMs - t) / sizeMs)
  else if (t < startMs + 2 * sizeMs) rate = current * ((startMs + 2 * sizeMs - t) / sizeMs)
  else rate = 0
  return rate + cost <= limit
}
