import type { Clock } from './clock.js'
import type { WindowTable } from './counter-table.js'
import { ConfigError, type StoreError } from './errors.js'
import { AppliedLimits, compileLimits, type Limit } from './limit-set.js'
import type { Decision, LimiterOptions, LimitState } from './limiter-types.js'
import type { Namespace } from './namespace.js'
import { rowsRate } from './previous-reads.js'
import type { CounterRow } from './strategy.js'
import { retryAfterMs as computeRetryAfterMs } from './window.js'

/**
 * What a {@link Limiter} decides with: its checked limits, their tables, the arrays one decision
 * fills, and the Decision objects built from them (plain, blocked, or blocking). Split from
 * limiter.ts, which holds the calls (hit, peek, acquire, refund, block).
 */
export abstract class Decisions {
  /** @internal the namespace whose counters the limiter uses */
  readonly namespace: Namespace
  readonly countDenied: boolean
  /** The namespace's clock (epoch ms): the time the limiter decides at. */
  readonly clock: Clock
  /** Whether a denial by a limit with `blockMs` blocks the key (false in acquire's tries). */
  readonly blocksOnDeny: boolean
  protected readonly limits: readonly Limit[]
  protected readonly tables: readonly WindowTable[]
  protected readonly rates: Float64Array
  protected readonly before: Float64Array
  // the limit each limit applies in the decision being made (a function's answer, an override)
  protected readonly set: AppliedLimits

  constructor(namespace: Namespace, options: LimiterOptions) {
    const { countDenied = true } = options
    if (typeof countDenied !== 'boolean')
      throw new ConfigError('INVALID_OPTION', `countDenied must be a boolean, got ${String(countDenied)}`)
    this.limits = compileLimits(namespace, options.limits)
    this.namespace = namespace
    this.clock = namespace.clock
    this.countDenied = countDenied
    this.tables = this.limits.map((l) => l.table)
    this.rates = new Float64Array(this.limits.length)
    this.before = new Float64Array(this.limits.length)
    this.set = new AppliedLimits(this.limits)
    const blocking = this.limits.findIndex((l) => l.blockMs > 0)
    this.blocksOnDeny = blocking >= 0
    if (this.blocksOnDeny) namespace.enableBlocking(`limits[${blocking}].blockMs`)
  }

  protected decision(key: string, cost: number, nowMs: number, allowed: boolean, storeError: StoreError | undefined): Decision {
    const states: LimitState[] = []
    let decider = 0
    for (let i = 0; i < this.limits.length; i++) {
      const l = this.limits[i] as Limit
      const limit = this.set.current[i] as number
      const rate = this.rates[i] as number
      const remaining = limit - rate
      // A denial waits for every limit: one that allowed may be full now that the denied hit
      // counted (countDenied), and the hit is allowed again once each limit lets it through
      // (each limit's rate only falls while nothing is counted, so the latest of the waits).
      const retryAfterMs = allowed ? 0 : this.retryAfter(l, limit, key, cost, nowMs)
      states.push({
        name: l.name,
        limit,
        window: l.window,
        remaining: remaining > 0 ? Math.floor(remaining) : 0,
        rate,
        resetMs: l.table.msToWindowEnd(nowMs),
        retryAfterMs,
      })
    }
    for (let i = 1; i < states.length; i++) {
      const s = states[i] as LimitState
      const d = states[decider] as LimitState
      const better =
        s.retryAfterMs > d.retryAfterMs ||
        (s.retryAfterMs === d.retryAfterMs && (s.remaining < d.remaining || (s.remaining === d.remaining && s.window > d.window)))
      if (better) decider = i
    }
    const d = states[decider] as LimitState
    const decision: Decision = { allowed, ...d, reason: storeError !== undefined ? 'store-error' : 'limit' }
    return {
      ...decision,
      ...(states.length > 1 ? { policies: states } : {}),
      ...(storeError !== undefined ? { storeError } : {}),
    }
  }

  /** The decision of a one-limit limiter, built in one object literal (the hot path's). */
  protected single(l: Limit, limit: number, allowed: boolean, rate: number, nowMs: number, retryAfterMs: number): Decision {
    const remaining = limit - rate
    return {
      allowed,
      name: l.name,
      limit,
      window: l.window,
      remaining: remaining > 0 ? Math.floor(remaining) : 0,
      rate,
      resetMs: l.table.msToWindowEnd(nowMs),
      retryAfterMs,
      reason: 'limit',
    }
  }

  protected retryAfter(l: Limit, limit: number, key: string, cost: number, nowMs: number): number {
    const { current, previous } = l.table.counts(key, nowMs)
    return computeRetryAfterMs(current, previous, nowMs, l.table.sizeMs, limit, cost)
  }

  // A denial by the limits: when a denying limit has blockMs, the key is blocked from now.
  protected startBlock(d: Decision, key: string, cost: number, nowMs: number): Decision {
    const limits = this.limits
    // one limit: it denied (its decision fills no arrays); several: the longest of those that denied
    let blockMs = limits.length === 1 ? (limits[0] as Limit).blockMs : 0
    for (let i = 0; limits.length > 1 && i < limits.length; i++) {
      const l = limits[i] as Limit
      if (l.blockMs > blockMs && (this.before[i] as number) + cost > (this.set.current[i] as number)) blockMs = l.blockMs
    }
    if (blockMs === 0) return d
    const blocks = this.namespace.blocks
    if (blocks === undefined) return d
    const end = blocks.block(key, Math.ceil(nowMs + blockMs), nowMs)
    return { ...d, blocked: true, retryAfterMs: Math.max(d.retryAfterMs, end - nowMs) }
  }

  // The decision of a blocked key: the limits' state without counting, the wait to the block's end.
  protected blockedDecision(
    key: string,
    cost: number,
    nowMs: number,
    untilMs: number,
    override: number | undefined,
    rows: CounterRow[] | undefined,
  ): Decision {
    this.set.apply(key, override)
    for (let i = 0; i < this.limits.length; i++) {
      const rate = rowsRate((this.limits[i] as Limit).table, key, rows, nowMs)
      this.rates[i] = rate
      this.before[i] = rate
    }
    const d = this.decision(key, cost, nowMs, false, undefined)
    return { ...d, reason: 'blocked', blocked: true, retryAfterMs: Math.max(d.retryAfterMs, untilMs - nowMs) }
  }
}
