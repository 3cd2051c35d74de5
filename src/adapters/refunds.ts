/**
 * Refunds in our own middleware: express-rate-limit's `skipFailedRequests` and
 * `skipSuccessfulRequests`. The hit is counted when the request arrives; when its response ends
 * it is taken back with `limiter.refund(key, cost, { at })` if it failed (or succeeded), once,
 * in the window that counted it. Nothing here imports a framework: each adapter tells a
 * {@link RequestRefund} how its response ended.
 */
import type { ServerResponse } from 'node:http'
import { ConfigError } from '../core/errors.js'
import type { Decision, Limiter } from '../core/limiter.js'
import { optionError } from './common.js'

/** The refund options of our middleware; `Ends` are the arguments `requestWasSuccessful` receives. */
export interface RefundOptions<Ends extends readonly unknown[]> {
  /**
   * Give the hit back when the request failed: `requestWasSuccessful` answered false (a 429 or
   * a 503 of this middleware included), or the connection closed before the response was
   * ended. Such requests then never use up the limit. @default false
   */
  readonly skipFailedRequests?: boolean
  /** Give the hit back when the request succeeded: only failures use up the limit. @default false */
  readonly skipSuccessfulRequests?: boolean
  /**
   * Whether a request succeeded, asked once its response ended. An error it throws (or a
   * rejection) goes to `onError` and leaves the hit counted. @default a status below 400
   */
  readonly requestWasSuccessful?: (...args: Ends) => boolean | Promise<boolean>
}

/**
 * The refunds of one middleware: its options, checked once, and the refunds in flight (`close()`
 * and `settled()` wait for them). Made only when `skipFailedRequests` or
 * `skipSuccessfulRequests` is on: without them a request pays for nothing here.
 */
export class RefundPolicy<Ends extends readonly unknown[]> {
  readonly skipFailed: boolean
  readonly skipSuccessful: boolean
  private readonly wasSuccessful: (...args: Ends) => boolean | Promise<boolean>
  private readonly limiter: Limiter
  private readonly maxCost: number
  private readonly onError: ((error: Error) => void) | undefined
  private readonly inFlight = new Set<Promise<void>>()

  /**
   * The policy of `options`, or undefined when neither skip option is on. `maxCost` is the
   * smallest limit (a higher cost is never counted); `onError` gets the errors of
   * `requestWasSuccessful` and of the refund itself.
   */
  static of<Ends extends readonly unknown[]>(
    options: RefundOptions<Ends>,
    who: string,
    defaultSuccess: (...args: Ends) => boolean,
    limiter: Limiter,
    maxCost: number,
    onError: ((error: Error) => void) | undefined,
  ): RefundPolicy<Ends> | undefined {
    const { skipFailedRequests = false, skipSuccessfulRequests = false, requestWasSuccessful } = options
    if (typeof skipFailedRequests !== 'boolean') throw optionError(who, 'skipFailedRequests', 'a boolean', skipFailedRequests)
    if (typeof skipSuccessfulRequests !== 'boolean') throw optionError(who, 'skipSuccessfulRequests', 'a boolean', skipSuccessfulRequests)
    if (requestWasSuccessful !== undefined && typeof requestWasSuccessful !== 'function')
      throw optionError(who, 'requestWasSuccessful', 'a function of the request returning a boolean', requestWasSuccessful)
    if (!skipFailedRequests && !skipSuccessfulRequests) {
      if (requestWasSuccessful !== undefined)
        throw new ConfigError(
          'INVALID_OPTION',
          `${who}: requestWasSuccessful is only asked with skipFailedRequests or skipSuccessfulRequests; set one of them to true`,
        )
      return undefined
    }
    return new RefundPolicy(skipFailedRequests, skipSuccessfulRequests, requestWasSuccessful ?? defaultSuccess, limiter, maxCost, onError)
  }

  private constructor(
    skipFailed: boolean,
    skipSuccessful: boolean,
    wasSuccessful: (...args: Ends) => boolean | Promise<boolean>,
    limiter: Limiter,
    maxCost: number,
    onError: ((error: Error) => void) | undefined,
  ) {
    this.skipFailed = skipFailed
    this.skipSuccessful = skipSuccessful
    this.wasSuccessful = wasSuccessful
    this.limiter = limiter
    this.maxCost = maxCost
    this.onError = onError
  }

  /**
   * The refund of a request's hit, or undefined when the hit was not counted: a cost of 0 or
   * above a limit, a listed key, or a denial when denied hits do not count. `atMs` is the
   * limiter's clock read just before the hit.
   */
  ticket(decision: Decision, key: string, cost: number, atMs: number): RequestRefund | undefined {
    if (!(cost > 0) || cost > this.maxCost) return undefined
    if (decision.reason !== 'limit' && decision.reason !== 'store-error') return undefined
    if (!decision.allowed && !this.limiter.countDenied) return undefined
    return new RequestRefund(this, key, cost, atMs)
  }

  /** The response of `refund`'s request ended: asks `requestWasSuccessful(...args)` and refunds as the options say. */
  settle(refund: RequestRefund, ...args: Ends): void {
    if (!refund.claim()) return
    let answer: boolean | Promise<boolean>
    try {
      answer = this.wasSuccessful(...args)
    } catch (err) {
      this.report(err)
      return
    }
    if (typeof answer === 'boolean') this.decide(refund, answer)
    else
      this.track(
        Promise.resolve(answer).then(
          (ok) => this.decide(refund, ok === true),
          (err: unknown) => this.report(err),
        ),
      )
  }

  /** Resolves once every refund started so far is done (in synchronous mode, in the store). */
  async settled(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.all(this.inFlight)
  }

  /** A request that failed (connection closed before its response ended, or the handler threw). */
  failed(refund: RequestRefund): void {
    if (refund.claim() && this.skipFailed) this.give(refund)
  }

  private decide(refund: RequestRefund, successful: boolean): void {
    if (successful ? this.skipSuccessful : this.skipFailed) this.give(refund)
  }

  private give(refund: RequestRefund): void {
    let done: Promise<void>
    try {
      // never rejects for a store failure: the refund stays queued for a later sync
      done = this.limiter.refund(refund.key, refund.cost, { at: refund.atMs })
    } catch (err) {
      // the namespace was closed meanwhile, say
      this.report(err)
      return
    }
    this.track(done)
  }

  private track(done: Promise<void>): void {
    const tracked = done.then(
      () => {
        this.inFlight.delete(tracked)
      },
      (err: unknown) => {
        this.inFlight.delete(tracked)
        this.report(err)
      },
    )
    this.inFlight.add(tracked)
  }

  private report(err: unknown): void {
    const onError = this.onError
    if (onError === undefined) return
    try {
      onError(err instanceof Error ? err : new Error(String(err)))
    } catch {
      // an onError that throws must not take the process down from an event listener
    }
  }
}

/** One counted request's hit, refunded at most once, whichever way its response ends. */
export class RequestRefund {
  readonly key: string
  readonly cost: number
  /** The hit's time on the limiter's clock. */
  readonly atMs: number
  private readonly policy: RefundPolicy<never>
  private open = true

  constructor(policy: RefundPolicy<never>, key: string, cost: number, atMs: number) {
    this.policy = policy
    this.key = key
    this.cost = cost
    this.atMs = atMs
  }

  /** True the first time only: the one way this request's response ended. */
  claim(): boolean {
    if (!this.open) return false
    this.open = false
    return true
  }

  /** The request failed without a response to judge: its connection closed first, or the handler threw. */
  failed(): void {
    this.policy.failed(this)
  }
}

/**
 * Settles `refund` when a node:http response ends (Express's, Fastify's raw one): on 'finish'
 * by `requestWasSuccessful(...args)`, on a 'close' before the response was ended as a failure
 * (the client went away). One listener for both; a response already closed while the decision
 * was awaited is settled at once.
 */
export function settleOnEnd<Ends extends readonly unknown[]>(
  policy: RefundPolicy<Ends>,
  refund: RequestRefund,
  res: ServerResponse,
  ...args: Ends
): void {
  const ended = (): void => {
    if (res.writableEnded) policy.settle(refund, ...args)
    else refund.failed()
  }
  if (res.destroyed || res.writableFinished) {
    ended()
    return
  }
  res.once('finish', ended)
  res.once('close', ended)
}
