/**
 * Window math shared by the engine, the decisions and every strategy.
 * Windows align to the epoch; sizes are whole seconds; the weight uses milliseconds.
 */

/** Start, in epoch seconds, of the window of `sizeSec` seconds that contains `nowMs`. */
export function windowStartSec(nowMs: number, sizeSec: number): number {
  return Math.floor(nowMs / (sizeSec * 1000)) * sizeSec
}

/**
 * Weight of the previous window at `nowMs`: `(sizeMs - nowMs % sizeMs) / sizeMs`, from 1 at the
 * start of the current window down to (almost) 0 at its end.
 */
export function previousWeight(nowMs: number, sizeMs: number): number {
  return (sizeMs - (nowMs % sizeMs)) / sizeMs
}

/** The sliding rate: `current + previous * weight`, not rounded. */
export function slidingRate(current: number, previous: number, weight: number): number {
  return current + previous * weight
}

/**
 * Milliseconds from `nowMs` until a hit of `cost` would be allowed (`rate + cost <= limit`),
 * assuming no other hit arrives. 0 when it is allowed now, `Infinity` when it never can be
 * (`cost > limit`). Exact to the millisecond: the result is the first whole ms at which the
 * engine's own rate formula admits the hit.
 *
 * Derivation: the rate only falls with time. Inside the current window it is
 * `cur + prev * (1 - p)`; once the window ends, `cur` becomes the previous window and the rate
 * is `cur * (1 - p')` over the next one.
 */
export function retryAfterMs(current: number, previous: number, nowMs: number, sizeMs: number, limit: number, cost: number): number {
  const windowStartMs = Math.floor(nowMs / sizeMs) * sizeMs
  if (isAllowedAt(nowMs, windowStartMs, current, previous, sizeMs, limit, cost)) return 0
  if (cost > limit) return Number.POSITIVE_INFINITY
  let at: number
  if (current + cost <= limit) {
    // previous > 0 here, or the hit would be allowed now
    at = windowStartMs + sizeMs * (1 - (limit - current - cost) / previous)
  } else {
    at = windowStartMs + sizeMs + sizeMs * Math.max(0, 1 - (limit - cost) / current)
  }
  let t = Math.max(nowMs + 1, Math.ceil(at))
  // Floating point may put the closed form one ms off; settle on the engine's own formula.
  while (!isAllowedAt(t, windowStartMs, current, previous, sizeMs, limit, cost)) t++
  while (t - 1 > nowMs && isAllowedAt(t - 1, windowStartMs, current, previous, sizeMs, limit, cost)) t--
  return t - nowMs
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
