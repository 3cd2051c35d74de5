/**
 * The truth a cell is measured against: an exact sliding log per key over the hits the cell
 * truly admitted. For each hit it says whether an exact log of the last window would have
 * allowed it (`admitted in (t - window, t] + 1 <= limit`), and it records the largest number of
 * admitted hits in any window-long interval, which is the over-admission a user would see.
 */

// A per-key queue of times (epoch ms), oldest first; entries before `head` left the window.
class TimeQueue {
  times: number[] = []
  head = 0

  /** Drops the times at or before `cutoffMs` and answers how many are left. */
  countAfter(cutoffMs: number): number {
    const times = this.times
    let head = this.head
    while (head < times.length && (times[head] as number) <= cutoffMs) head++
    if (head > 64 && head * 2 > times.length) {
      this.times = times.slice(head)
      head = 0
    }
    this.head = head
    return this.times.length - head
  }

  push(t: number): void {
    this.times.push(t)
  }
}

/** What a cell reports: the accuracy of its decisions against the exact log. */
export interface AccuracyMetrics {
  /** Hits decided. */
  readonly hits: number
  /** Hits the cell allowed. */
  readonly allowed: number
  /** The most hits truly admitted in any window-long interval, over all keys, divided by the limit. */
  readonly worstWindow: number
  /** Share of all hits the cell allowed where the exact log denies. */
  readonly falseAllowShare: number
  /** Share of all hits the cell denied where the exact log allows. */
  readonly falseDenyShare: number
  /**
   * Runs of false denials: a false deny of a key whose previous hit was not one starts a run.
   * With denied hits counted, one hit denied below the limit can make every later hit of that
   * key a false deny until the window slides past (the exact log holds one hit fewer, the
   * limiter's count is over): a run, which this tells apart from many separate mistakes.
   */
  readonly falseDenyRuns: number
  /**
   * Mean of |the rate the cell decided on − the exact count of the hits it counted in the last
   * window|, as a share of the limit: the error of its estimate, not of its policy.
   */
  readonly meanRateError: number
  /** Keys whose truly admitted hits exceeded the limit in some window-long interval. */
  readonly keysOver: number
  /** Keys seen. */
  readonly keys: number
}

/**
 * Scores the decisions of one cell, hit by hit, in time order. One instance per cell.
 *
 * @example
 * const truth = new ExactTruth(100, 60_000, trace.keyNames.length)
 * truth.record(key, t, allowed, counted, rateBefore)
 * truth.metrics()
 */
export class ExactTruth {
  readonly limit: number
  readonly windowMs: number
  private readonly admitted: (TimeQueue | undefined)[]
  private readonly counted: (TimeQueue | undefined)[]
  private readonly worst: Uint32Array
  // per key: whether its last hit was a false deny
  private readonly inRun: Uint8Array
  private falseDenyRuns = 0
  private hits = 0
  private allowed = 0
  private falseAllows = 0
  private falseDenies = 0
  private rateError = 0

  constructor(limit: number, windowMs: number, keyCount: number) {
    this.limit = limit
    this.windowMs = windowMs
    this.admitted = new Array<TimeQueue | undefined>(keyCount)
    this.counted = new Array<TimeQueue | undefined>(keyCount)
    this.worst = new Uint32Array(keyCount)
    this.inRun = new Uint8Array(keyCount)
  }

  /**
   * Records one hit of cost 1 on `key` at `t`: whether the cell allowed it, whether the cell
   * counted it (a denied hit counts with `countDenied`), and the rate the cell decided on
   * (before this hit). Answers the exact count of counted hits in the window before this one,
   * the "true rate" the estimate is compared with.
   */
  record(key: number, t: number, allowed: boolean, counted: boolean, rateBefore: number): number {
    const cutoff = t - this.windowMs
    const admitted = (this.admitted[key] ??= new TimeQueue())
    const inWindow = admitted.countAfter(cutoff)
    const truthAllows = inWindow + 1 <= this.limit
    this.hits++
    let falseDeny = false
    if (allowed) {
      this.allowed++
      if (!truthAllows) this.falseAllows++
      admitted.push(t)
      if (inWindow + 1 > (this.worst[key] as number)) this.worst[key] = inWindow + 1
    } else if (truthAllows) {
      this.falseDenies++
      falseDeny = true
      if (this.inRun[key] === 0) this.falseDenyRuns++
    }
    this.inRun[key] = falseDeny ? 1 : 0
    const countedQueue = (this.counted[key] ??= new TimeQueue())
    const trueRate = countedQueue.countAfter(cutoff)
    if (counted) countedQueue.push(t)
    this.rateError += Math.abs(rateBefore - trueRate)
    return trueRate
  }

  metrics(): AccuracyMetrics {
    let worst = 0
    let keysOver = 0
    let keys = 0
    for (let k = 0; k < this.worst.length; k++) {
      const w = this.worst[k] as number
      if (this.admitted[k] !== undefined) keys++
      if (w > worst) worst = w
      if (w > this.limit) keysOver++
    }
    const hits = this.hits
    return {
      hits,
      allowed: this.allowed,
      worstWindow: worst / this.limit,
      falseAllowShare: hits === 0 ? 0 : this.falseAllows / hits,
      falseDenyShare: hits === 0 ? 0 : this.falseDenies / hits,
      falseDenyRuns: this.falseDenyRuns,
      meanRateError: hits === 0 ? 0 : this.rateError / hits / this.limit,
      keysOver,
      keys,
    }
  }
}
