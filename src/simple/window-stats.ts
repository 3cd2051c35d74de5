/**
 * The stats of one `allowWithStats()` call, and their JSON in the Go limiter's field names.
 */

/** The JSON of {@link WindowStats}: the Go limiter's field names, in its order. */
export type GoWindowStats = {
  FormattedWindowTime: string
  CurrentWindowIndex: number
  CurrentCounter: number
  PreviousWindowIndex: number
  PreviousWindowUsedPercent: number
  PreviousWindowUseCount: number
  RollingCounter: number
  Allow: boolean
}

/** The values behind one decision of a simple limiter; see {@link WindowStats}. */
export type WindowStatsFields = {
  readonly formattedWindowTime: string
  readonly currentWindowIndex: number
  readonly currentCounter: number
  readonly previousWindowIndex: number
  readonly previousWindowUsedPercent: number
  readonly previousWindowUseCount: number
  readonly rollingCounter: number
  readonly allow: boolean
  readonly retryAfterMs: number
}

/**
 * What a simple limiter based one decision on, as the Go limiter's `AllowWithStats` reports it.
 * Every count is the state *before* this call, so `allow` is `rollingCounter + 1 <= limit`.
 * `JSON.stringify(stats)` prints the Go limiter's shape:
 * `{"FormattedWindowTime":"H 10 M 54 S 10 MS 754","CurrentWindowIndex":28401054,...}`.
 *
 * Two deliberate differences from the Go limiter: window indexes count windows since the Unix
 * epoch (`windowStart = index * windowMs`) instead of a position inside the hour or minute that
 * wraps, and the previous window's share is not truncated to an integer (the decision uses it
 * exactly).
 *
 * @example
 * const stats = await limiter.allowWithStats('user-1')
 * if (!stats.allow) console.log(`retry in ${stats.retryAfterMs} ms`, JSON.stringify(stats))
 */
export class WindowStats implements WindowStatsFields {
  /** The time of the call in UTC: `H <hour> M <minute> S <second> MS <millisecond>`. */
  readonly formattedWindowTime: string
  /** Windows since the epoch up to the current one: `floor(nowMs / windowMs)`. */
  readonly currentWindowIndex: number
  /** Hits counted in the current window before this call (all processes, as far as known). */
  readonly currentCounter: number
  /** `currentWindowIndex - 1`: never wraps, never names a stale window. */
  readonly previousWindowIndex: number
  /**
   * The share of the previous window still inside the sliding window, from 1 at the start of
   * the current window down towards 0 at its end (the Go limiter's name, a fraction).
   */
  readonly previousWindowUsedPercent: number
  /** `previous window count * previousWindowUsedPercent`, not rounded. */
  readonly previousWindowUseCount: number
  /** `currentCounter + previousWindowUseCount`: the sliding count the decision compared. */
  readonly rollingCounter: number
  /** Whether this call was allowed (and counted). */
  readonly allow: boolean
  /** Ms until a call would be allowed, assuming no other call; 0 when allowed. Not in the JSON. */
  readonly retryAfterMs: number

  constructor(fields: WindowStatsFields) {
    this.formattedWindowTime = fields.formattedWindowTime
    this.currentWindowIndex = fields.currentWindowIndex
    this.currentCounter = fields.currentCounter
    this.previousWindowIndex = fields.previousWindowIndex
    this.previousWindowUsedPercent = fields.previousWindowUsedPercent
    this.previousWindowUseCount = fields.previousWindowUseCount
    this.rollingCounter = fields.rollingCounter
    this.allow = fields.allow
    this.retryAfterMs = fields.retryAfterMs
  }

  /** The Go limiter's JSON field names and order. */
  toJSON(): GoWindowStats {
    return {
      FormattedWindowTime: this.formattedWindowTime,
      CurrentWindowIndex: this.currentWindowIndex,
      CurrentCounter: this.currentCounter,
      PreviousWindowIndex: this.previousWindowIndex,
      PreviousWindowUsedPercent: this.previousWindowUsedPercent,
      PreviousWindowUseCount: this.previousWindowUseCount,
      RollingCounter: this.rollingCounter,
      Allow: this.allow,
    }
  }
}

/** `H 10 M 54 S 10 MS 754` for a time in epoch ms, in UTC (the Go limiter used local time). */
export function formatWindowTime(nowMs: number): string {
  const d = new Date(nowMs)
  return `H ${d.getUTCHours()} M ${d.getUTCMinutes()} S ${d.getUTCSeconds()} MS ${d.getUTCMilliseconds()}`
}
