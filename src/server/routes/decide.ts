import type { IncomingMessage, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import type { AlgorithmResult } from '../../algorithms/types.js'
import { StoreError } from '../../core/errors.js'
import type { ListVerdict } from '../../core/key-lists.js'
import {
  isAnswerable,
  listedResult,
  rateLimitHeaderList,
  resultBody,
  send,
  sendDecision,
  sendError,
  shadowBody,
  shadowHeaders,
} from '../http-responses.js'
import type { ServiceMetrics } from '../metrics.js'
import { withOverride } from '../overrides.js'
import type { Policy, Runtime } from '../runtime.js'
import type { ShadowLog } from '../shadow-log.js'
import { topKeysOf } from '../top-keys.js'

// The decision path that POST /v1/check and /v1/forward-auth share, and the store failures of
// the routes that call a policy's algorithm (these two and /v1/users).

/**
 * Decides `cost` for `sentId` on `policy` and answers: 200 when allowed (and for a shadow
 * denial), `deniedStatus` when denied (429 on /v1/check, `forward-auth.denied-status` on
 * /v1/forward-auth), `on-store-error`'s answer when the store fails (`deniedStatus` for `deny`).
 */
export type Decide = (
  req: IncomingMessage,
  res: ServerResponse,
  runtime: Runtime,
  policy: Policy,
  sentId: string,
  cost: number,
  deniedStatus: number,
) => void

/** What the decision path needs from the service. */
export interface DecideContext {
  readonly metrics: ServiceMetrics
  readonly logger: Logger
  readonly shadowLog: ShadowLog
}

/**
 * Counts the store failures of requests, and logs them: a store outage fails every request, so
 * the first failure of each second is logged, with the count of those left out since.
 */
export class StoreErrorLog {
  private lastLogMs = 0
  private suppressed = 0

  constructor(
    private readonly metrics: ServiceMetrics,
    private readonly logger: Logger,
  ) {}

  /** Counts and (at most once a second) logs `err` of `operation` (decide, peek, reset) on `policy`. */
  note(err: unknown, runtime: Runtime, policy: Policy, operation: string): void {
    this.metrics.storeError(runtime.store.type, operation)
    const now = Date.now()
    if (now - this.lastLogMs < 1000) {
      this.suppressed++
      return
    }
    this.lastLogMs = now
    this.logger.warn({ err, policy: policy.name, operation, suppressed: this.suppressed }, 'store call failed')
    this.suppressed = 0
  }
}

/**
 * The policy a request names (the default one when it names none), or undefined once the
 * problem is answered: 400 for a name that is not a string, 404 for one not configured.
 */
export function policyOf(runtime: Runtime, res: ServerResponse, name: unknown): Policy | undefined {
  if (name === undefined || name === null) return runtime.defaultPolicy
  if (typeof name !== 'string') {
    sendError(res, 400, 'invalid_request', `policy must be a string, got ${typeof name}`)
    return undefined
  }
  const policy = runtime.policies.get(name)
  if (policy === undefined) sendError(res, 404, 'unknown_policy', `policy ${JSON.stringify(name)} is not configured`)
  return policy
}

/**
 * The decision path of the routes that consume. A request that can no longer be answered (its
 * connection is closing, as after a 413, or gone) is never decided, so never counted.
 */
export function createDecide(ctx: DecideContext, storeErrors: StoreErrorLog): Decide {
  const { metrics, logger, shadowLog } = ctx
  const top = topKeysOf(metrics)

  // answers a store failure as the policy's on-store-error says (deny with deniedStatus)
  function failed(res: ServerResponse, runtime: Runtime, policy: Policy, err: unknown, started: number, deniedStatus: number): void {
    const seconds = (performance.now() - started) / 1000
    const tally = metrics.tally(policy)
    if (!(err instanceof StoreError)) {
      tally.record('store_error', seconds)
      logger.error({ err, policy: policy.name }, 'decision failed')
      sendError(res, 500, 'internal_error', 'the decision failed; see the service log')
      return
    }
    storeErrors.note(err, runtime, policy, 'decide')
    // the policy's own (inherited from rate-limiter); share is decided by the escrow engine, so a
    // failure that still reaches here is answered as error
    const mode = policy.onStoreError
    if (mode === 'error' || mode === 'share') {
      tally.record('store_error', seconds)
      sendError(res, 503, 'store_unavailable', `the ${runtime.store.type} store did not answer: ${err.message}`, { 'retry-after': '1' })
      return
    }
    const allowed = mode === 'allow'
    tally.record(allowed ? 'failed_open' : 'failed_closed', seconds)
    const limit = policy.limit
    const body = JSON.stringify({
      allowed,
      count: allowed ? 0 : limit,
      limit,
      remaining: allowed ? limit : 0,
      resetMs: 0,
      retryAfterMs: allowed ? 0 : 1000,
      reason: 'store-error',
      degraded: true,
    })
    send(res, allowed ? 200 : deniedStatus, body, allowed ? {} : { 'retry-after': '1' })
  }

  return function decide(req, res, runtime, configured, sentId, cost, deniedStatus): void {
    // the connection was closed or is closing since the request arrived: no answer can reach the client
    if (!isAnswerable(req)) return
    // compared as key-normalization says, the lists and overrides too
    const userId = runtime.normalizeKey(sentId)
    // the user's own limit, when it has an override: the same counters, the limit it applies
    const policy = withOverride(configured, userId)
    runtime.enter()
    const started = performance.now()
    // verdict: a deny or allow list decided, the algorithm was not asked
    const done = (r: AlgorithmResult, verdict?: ListVerdict) => {
      runtime.leave()
      const seconds = (performance.now() - started) / 1000
      const reason = verdict ?? 'limit'
      // who is being limited (GET /v1/top): O(1), one read of the service's clock
      if (top !== undefined) top.policy(configured.name).record(userId, !r.allowed, top.clock())
      if (!r.allowed && policy.shadowMode) {
        // counted as usual, answered as allowed: the denial shows in the body, a header, the metrics and the log
        metrics.tally(policy).record('shadow_denied', seconds)
        shadowLog.denied(`policy ${policy.name}`, { policy: policy.name, userId })
        sendDecision(res, 200, shadowBody(r, reason), shadowHeaders(rateLimitHeaderList(policy, r, runtime)))
        return
      }
      metrics.tally(policy).record(verdict ?? (r.allowed ? 'allowed' : 'denied'), seconds)
      sendDecision(res, r.allowed ? 200 : deniedStatus, resultBody(r, reason), rateLimitHeaderList(policy, r, runtime))
    }
    if (policy.lists !== undefined) {
      // before the algorithm, so the lists work for every use-algo and a listed key costs no store call
      const verdict = policy.lists.match(userId)
      if (verdict !== undefined) {
        done(listedResult(policy.limit, verdict), verdict)
        return
      }
    }
    const fail = (err: unknown) => {
      runtime.leave()
      failed(res, runtime, policy, err, started, deniedStatus)
    }
    let result: ReturnType<typeof policy.algorithm.check>
    try {
      result = policy.algorithm.check(userId, cost)
    } catch (err) {
      fail(err)
      return
    }
    if (result instanceof Promise) result.then(done, fail)
    else done(result)
  }
}
