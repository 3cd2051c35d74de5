import { checkRequest } from '../algorithms/options.js'
import type { AlgorithmResult, MaybePromise, RateLimitAlgorithm } from '../algorithms/types.js'
import type { Clock } from '../core/clock.js'
import type { Decision, Limiter } from '../core/limiter.js'
import type { NamespaceStats } from '../core/namespace.js'
import type { OnStoreError } from '../core/options.js'
import { RateLimiting } from '../core/rate-limiting.js'
import type { Strategy } from '../core/strategy.js'

/** Options of {@link CounterEngine}. */
export interface CounterEngineOptions {
  /** The namespace (the policy name): it scopes the counters in the store. */
  readonly namespace: string
  /** Window length, whole seconds. */
  readonly windowSize: number
  /** Seconds between syncs: > 0 periodic, 0 every hit, < 0 local only. */
  readonly syncRate: number
  /** The central store; unused when `syncRate < 0`. */
  readonly strategy: Strategy | undefined
  /** Longest wait for one store call, ms. */
  readonly storeTimeoutMs: number
  /**
   * Synchronous mode, and an escrow namespace that can get no grant: "local" decides on local
   * counts when the store fails; "deny"/"allow" report the failure (the service's fail policy
   * answers); "share" (escrow only) admits `limit / n` per process, and that decision is the answer.
   */
  readonly onStoreError: OnStoreError
  /** Periodic mode: admit only against budgets the store granted (docs/ARCHITECTURE.md, "Escrow"). @default false */
  readonly escrow?: boolean
  /** Called with every store failure. */
  readonly onError: (error: Error) => void
  /** The engine's clock, epoch ms. @default the engine's cached Date.now */
  readonly clock?: Clock
}

/**
 * The engine behind `sliding-window-counter-algo` for one policy: its own RateLimiting instance
 * and namespace, so it can be kept across reloads and closed (flushed) on its own.
 */
export class CounterEngine {
  readonly rl: RateLimiting
  readonly namespace: string
  readonly windowSize: number
  readonly syncRate: number
  readonly storeName: string
  readonly escrow: boolean
  /** Whether a decision made without the store (escrow's `share`) is the answer, rather than a failure. */
  readonly answersStoreErrors: boolean
  private closing: Promise<void> | undefined

  constructor(options: CounterEngineOptions) {
    this.namespace = options.namespace
    this.windowSize = options.windowSize
    this.syncRate = options.syncRate
    this.storeName = options.syncRate < 0 || options.strategy === undefined ? 'memory' : options.strategy.name
    this.escrow = options.escrow === true
    this.answersStoreErrors = options.onStoreError === 'share'
    this.rl = RateLimiting.newInstance(`ratelimiting-server:${options.namespace}`)
    this.rl.new({
      namespace: options.namespace,
      windowSizes: [options.windowSize],
      syncRate: options.syncRate,
      ...(options.syncRate >= 0 ? { strategy: options.strategy } : {}),
      storeTimeoutMs: options.storeTimeoutMs,
      onStoreError: options.onStoreError,
      ...(this.escrow ? { escrow: true } : {}),
      onError: options.onError,
      ...(options.clock !== undefined ? { clock: options.clock } : {}),
    })
  }

  /** A limiter with `limit` per window over this engine's counters. */
  limiter(limit: number): Limiter {
    return this.rl.limiter({
      namespace: this.namespace,
      limits: [{ limit, window: this.windowSize, name: this.namespace }],
    })
  }

  /** The namespace's sync statistics (for the metrics). */
  stats(): NamespaceStats {
    return this.rl.stats(this.namespace)
  }

  /** Stops the sync timer and flushes unsynced counts to the store. */
  close(): Promise<void> {
    this.closing ??= this.rl.close()
    return this.closing
  }
}

function resultOf(d: Decision): AlgorithmResult {
  // a synchronous namespace reports a failed store on the decision: the service's fail policy decides
  if (d.storeError !== undefined) throw d.storeError
  return answerOf(d)
}

// The decision as the answer, a failed store included (escrow's `share` decided it without one).
function answerOf(d: Decision): AlgorithmResult {
  return {
    allowed: d.allowed,
    count: d.rate,
    limit: d.limit,
    remaining: d.remaining,
    resetMs: d.resetMs,
    retryAfterMs: d.retryAfterMs,
  }
}

// The answer to a cost above the limit: denied, counted nowhere, never admissible.
function tooCostly(d: Decision): AlgorithmResult {
  const r = resultOf(d)
  return { ...r, allowed: false, retryAfterMs: Number.POSITIVE_INFINITY }
}

/**
 * `sliding-window-counter-algo`: the engine's eventually consistent sliding-window counter
 * behind the algorithms' interface. `count` is the weighted estimate (it may be fractional). A
 * cost above the limit is denied without being counted.
 */
export class CounterAlgorithm implements RateLimitAlgorithm {
  readonly name = 'sliding-window-counter'
  readonly store: string
  readonly limit: number
  readonly windowMs: number
  readonly engine: CounterEngine
  private readonly limiter: Limiter
  private readonly result: (d: Decision) => AlgorithmResult

  constructor(engine: CounterEngine, limit: number) {
    this.engine = engine
    this.store = engine.storeName
    this.limit = limit
    this.windowMs = engine.windowSize * 1000
    this.limiter = engine.limiter(limit)
    this.result = engine.answersStoreErrors ? answerOf : resultOf
  }

  check(userId: string, cost = 1): MaybePromise<AlgorithmResult> {
    checkRequest(userId, cost)
    // never admitted, so never counted: the denial is a read (as on the other algorithms)
    if (cost > this.limit) {
      const d = this.limiter.peek(userId)
      return d instanceof Promise ? d.then(tooCostly) : tooCostly(d)
    }
    // an escrow namespace answers a Promise when its budget must be asked for
    const d = this.limiter.hit(userId, cost)
    return d instanceof Promise ? d.then(this.result) : this.result(d)
  }

  peek(userId: string): MaybePromise<AlgorithmResult> {
    checkRequest(userId, 1)
    const d = this.limiter.peek(userId)
    return d instanceof Promise ? d.then(this.result) : this.result(d)
  }

  reset(userId: string): Promise<void> {
    return this.limiter.reset(userId)
  }

  withLimit(limit: number): CounterAlgorithm {
    return new CounterAlgorithm(this.engine, limit)
  }
}
