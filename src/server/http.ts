import type { IncomingMessage, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import type { AlgorithmResult } from '../algorithms/types.js'
import { StoreError } from '../core/errors.js'
import type { ListVerdict } from '../core/key-lists.js'
import type { Grant } from './auth.js'
import { readJsonBody, userIdProblem } from './http-input.js'
import { FORWARD_AUTH_PATH, forwardAuth, type ForwardAuthGate } from './forward-auth.js'
import {
  isAnswerable,
  listedResult,
  noteArrival,
  rateLimitHeaderList,
  resultBody,
  send,
  sendDecision,
  sendError,
  shadowBody,
  shadowHeaders,
} from './http-responses.js'
import type { ServiceMetrics } from './metrics.js'
import { withOverride } from './overrides.js'
import { answerOverrides, OVERRIDES_PATH } from './overrides-http.js'
import type { Policy, Runtime } from './runtime.js'
import type { ShadowLog } from './shadow-log.js'
import type { EnvoyRequest, EnvoyResponse } from './gateway/envoy-decide.js'
import { answerEnvoyJson } from './gateway/json-api.js'

/** Largest `cost` one request may ask for. */
export const MAX_COST = 1_000_000

// The fields of a POST /v1/check body.
const CHECK_FIELDS = new Set(['userId', 'policy', 'cost'])

/** What the request handler needs from the service. */
export interface HandlerContext {
  /** The runtime new requests use (a reload swaps it). */
  runtime(): Runtime
  /** True once shutdown began: responses then close their connection. */
  closing(): boolean
  readonly metrics: ServiceMetrics
  readonly logger: Logger
  /** Logs shadow denials, throttled. */
  readonly shadowLog: ShadowLog
  /** Envoy's ShouldRateLimit with the runtime in use (POST /json). */
  readonly decideEnvoy: (request: EnvoyRequest) => Promise<EnvoyResponse>
}

/**
 * The service's request handler: the routes of docs/SERVICE.md on plain `node:http`. Nothing a
 * client sends reaches an algorithm unchecked, and every failure is a JSON error. A request that
 * can no longer be answered (its connection is closing, as after a 413, or gone) is never decided,
 * so it is never counted.
 */
export function createRequestHandler(ctx: HandlerContext): (req: IncomingMessage, res: ServerResponse) => void {
  const { metrics, logger } = ctx
  const { shadowLog } = ctx
  let lastStoreLogMs = 0
  let suppressedStoreErrors = 0

  // a store outage fails every request: log the first failure each second, count the rest
  function logStoreError(err: unknown, policy: Policy, operation: string): void {
    const store = ctx.runtime().store.type
    metrics.storeError(store, operation)
    const now = Date.now()
    if (now - lastStoreLogMs < 1000) {
      suppressedStoreErrors++
      return
    }
    lastStoreLogMs = now
    logger.warn(
      {
        err,
        policy: policy.name,
        operation,
        suppressed: suppressedStoreErrors,
      },
      'store call failed',
    )
    suppressedStoreErrors = 0
  }

  function unauthorized(res: ServerResponse, grant: Grant, needAdmin: boolean): boolean {
    if (grant === 'none') {
      sendError(res, 401, 'unauthorized', 'a valid bearer token is required (Authorization: Bearer <token>)', {
        'www-authenticate': 'Bearer realm="ratelimiting"',
      })
      return true
    }
    if (needAdmin && grant !== 'admin') {
      sendError(res, 403, 'forbidden', 'resetting a user needs an admin token')
      return true
    }
    return false
  }

  function policyOf(runtime: Runtime, res: ServerResponse, name: unknown): Policy | undefined {
    if (name === undefined || name === null) return runtime.defaultPolicy
    if (typeof name !== 'string') {
      sendError(res, 400, 'invalid_request', `policy must be a string, got ${typeof name}`)
      return undefined
    }
    const policy = runtime.policies.get(name)
    if (policy === undefined) sendError(res, 404, 'unknown_policy', `policy ${JSON.stringify(name)} is not configured`)
    return policy
  }

  /** Answers a store failure as the config's `on-store-error` says (`deny` with `deniedStatus`). */
  function failed(res: ServerResponse, runtime: Runtime, policy: Policy, err: unknown, started: number, deniedStatus: number): void {
    const seconds = (performance.now() - started) / 1000
    const tally = metrics.tally(policy)
    if (!(err instanceof StoreError)) {
      tally.record('store_error', seconds)
      logger.error({ err, policy: policy.name }, 'decision failed')
      sendError(res, 500, 'internal_error', 'the decision failed; see the service log')
      return
    }
    logStoreError(err, policy, 'decide')
    const mode = runtime.config.onStoreError
    if (mode === 'error') {
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

  /** Decides and answers: 200, or `deniedStatus` (429 on /v1/check, `forward-auth.denied-status` on /v1/forward-auth). */
  function decide(
    req: IncomingMessage,
    res: ServerResponse,
    runtime: Runtime,
    configured: Policy,
    sentId: string,
    cost: number,
    deniedStatus: number,
  ): void {
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

  function check(req: IncomingMessage, res: ServerResponse): void {
    const runtime = ctx.runtime()
    if (runtime.auth.enabled && unauthorized(res, runtime.auth.grant(req.headers.authorization), false)) return
    readJsonBody(
      req,
      res,
      runtime.config.server.maxBodyBytes,
      'the body must be JSON such as {"userId":"u1","policy":"default","cost":1}',
      (input) => {
        if (typeof input !== 'object' || input === null || Array.isArray(input)) {
          sendError(res, 400, 'invalid_request', 'the body must be a JSON object such as {"userId":"u1"}')
          return
        }
        const fields = input as Record<string, unknown>
        // a misspelt field ("Policy") would otherwise fall back to the default policy unseen
        const unknown = Object.keys(fields).find((name) => !CHECK_FIELDS.has(name))
        if (unknown !== undefined) {
          sendError(res, 400, 'invalid_request', `unknown field ${JSON.stringify(unknown)}; the fields are userId, policy and cost`)
          return
        }
        const problem = userIdProblem(fields.userId, runtime.config.server.maxUserIdLength)
        if (problem !== undefined) {
          sendError(res, 400, 'invalid_request', problem)
          return
        }
        const cost = fields.cost ?? 1
        if (typeof cost !== 'number' || !Number.isInteger(cost) || cost < 1 || cost > MAX_COST) {
          // JSON's 1e400 is Infinity, which JSON.stringify would call null
          const got = cost === Infinity ? 'a number too large' : cost === -Infinity ? 'a number too small' : JSON.stringify(cost)
          sendError(res, 400, 'invalid_request', `cost must be an integer from 1 to ${MAX_COST}, got ${got}`)
          return
        }
        const policy = policyOf(runtime, res, fields.policy)
        if (policy === undefined) return
        decide(req, res, runtime, policy, fields.userId as string, cost, 429)
      },
    )
  }

  function user(req: IncomingMessage, res: ServerResponse, rest: string, query: string): void {
    const method = req.method
    if (method !== 'GET' && method !== 'DELETE') {
      sendError(res, 405, 'method_not_allowed', `${method} is not allowed here; use GET or DELETE`, { allow: 'GET, DELETE' })
      return
    }
    const runtime = ctx.runtime()
    if (runtime.auth.enabled && unauthorized(res, runtime.auth.grant(req.headers.authorization), method === 'DELETE')) return
    if (rest.includes('/')) {
      sendError(res, 404, 'not_found', 'no such route; percent-encode "/" in user ids')
      return
    }
    let userId: string
    try {
      userId = decodeURIComponent(rest)
    } catch {
      sendError(res, 400, 'invalid_request', 'the user id in the path is not valid percent-encoding')
      return
    }
    const problem = userIdProblem(userId, runtime.config.server.maxUserIdLength)
    if (problem !== undefined) {
      sendError(res, 400, 'invalid_request', problem)
      return
    }
    const configured = policyOf(runtime, res, query === '' ? undefined : (new URLSearchParams(query).get('policy') ?? undefined))
    if (configured === undefined) return
    userId = runtime.normalizeKey(userId)
    const policy = withOverride(configured, userId)
    runtime.enter()
    const fail = (err: unknown) => {
      runtime.leave()
      if (err instanceof StoreError) {
        logStoreError(err, policy, method === 'GET' ? 'peek' : 'reset')
        sendError(res, 503, 'store_unavailable', `the ${runtime.store.type} store did not answer: ${err.message}`, { 'retry-after': '1' })
      } else {
        logger.error({ err, policy: policy.name }, `${method} user failed`)
        sendError(res, 500, 'internal_error', 'the request failed; see the service log')
      }
    }
    try {
      if (method === 'GET') {
        const answer = (r: AlgorithmResult) => {
          runtime.leave()
          const list = rateLimitHeaderList(policy, r, runtime)
          // a read is always answered: Retry-After belongs to a 429
          const at = list.indexOf('Retry-After')
          sendDecision(res, 200, resultBody(r, verdict ?? 'limit'), at < 0 ? list : [...list.slice(0, at), ...list.slice(at + 2)])
        }
        // a listed key reads as a check would answer it (the lists decide, nothing is counted)
        const verdict = policy.lists?.match(userId)
        if (verdict !== undefined) {
          answer(listedResult(policy.limit, verdict))
          return
        }
        const r = policy.algorithm.peek(userId)
        if (r instanceof Promise) r.then(answer, fail)
        else answer(r)
      } else {
        const answer = () => {
          runtime.leave()
          logger.info({ userId, policy: policy.name }, 'user reset')
          res.writeHead(204)
          res.end()
        }
        const r = policy.algorithm.reset(userId)
        if (r instanceof Promise) r.then(answer, fail)
        else answer()
      }
    } catch (err) {
      fail(err)
    }
  }

  function ready(res: ServerResponse): void {
    if (ctx.closing()) {
      send(res, 503, JSON.stringify({ status: 'shutting_down' }), {})
      return
    }
    const runtime = ctx.runtime()
    const store = runtime.store.type
    runtime.store.ready(runtime.config.store.timeoutMs).then(
      () => send(res, 200, JSON.stringify({ status: 'ready', store }), {}),
      (err: unknown) => {
        metrics.storeError(store, 'readiness')
        send(
          res,
          503,
          JSON.stringify({
            status: 'unavailable',
            store,
            error: err instanceof Error ? err.message : String(err),
          }),
          {},
        )
      },
    )
  }

  function metricsRoute(res: ServerResponse): void {
    metrics.render().then(
      ({ body, contentType }) => {
        res.writeHead(200, {
          'content-type': contentType,
          'content-length': String(Buffer.byteLength(body)),
        })
        res.end(body)
      },
      (err: unknown) => {
        logger.error({ err }, 'rendering metrics failed')
        sendError(res, 500, 'internal_error', 'rendering metrics failed')
      },
    )
  }

  function onlyGet(req: IncomingMessage, res: ServerResponse): boolean {
    if (req.method === 'GET' || req.method === 'HEAD') return true
    sendError(res, 405, 'method_not_allowed', `${req.method} is not allowed here; use GET`, { allow: 'GET' })
    return false
  }

  const forwardAuthGate: ForwardAuthGate = { unauthorized, decide }

  return function handleRequest(req: IncomingMessage, res: ServerResponse): void {
    noteArrival(req)
    // pipelined behind an answer that closed the connection (a 413), or on a refused connection:
    // no answer can be sent, so nothing is decided
    if (!isAnswerable(req)) {
      req.resume()
      return
    }
    if (ctx.closing()) res.setHeader('connection', 'close')
    const url = req.url ?? '/'
    const q = url.indexOf('?')
    const path = q < 0 ? url : url.slice(0, q)
    try {
      if (path === '/v1/check') {
        if (req.method === 'POST') check(req, res)
        else sendError(res, 405, 'method_not_allowed', `${req.method} is not allowed here; use POST`, { allow: 'POST' })
      } else if (path === '/json') {
        if (req.method === 'POST') {
          const runtime = ctx.runtime()
          if (!runtime.auth.enabled || !unauthorized(res, runtime.auth.grant(req.headers.authorization), false))
            answerEnvoyJson(req, res, runtime, ctx)
        } else sendError(res, 405, 'method_not_allowed', `${req.method} is not allowed here; use POST`, { allow: 'POST' })
      } else if (path.startsWith('/v1/users/')) {
        user(req, res, path.slice('/v1/users/'.length), q < 0 ? '' : url.slice(q + 1))
      } else if (path.startsWith(OVERRIDES_PATH)) {
        answerOverrides(req, res, ctx.runtime(), path.slice(OVERRIDES_PATH.length), ctx)
      } else if (path.startsWith(FORWARD_AUTH_PATH)) {
        forwardAuth(req, res, ctx.runtime(), path, q < 0 ? '' : url.slice(q + 1), forwardAuthGate)
      } else if (path === '/healthz') {
        if (onlyGet(req, res)) send(res, 200, '{"status":"ok"}', {})
      } else if (path === '/readyz') {
        if (onlyGet(req, res)) ready(res)
      } else if (path === '/metrics') {
        if (onlyGet(req, res)) metricsRoute(res)
      } else {
        sendError(res, 404, 'not_found', `no route ${req.method} ${path}`)
      }
    } catch (err) {
      logger.error({ err, url }, 'request failed')
      if (!res.headersSent) sendError(res, 500, 'internal_error', 'the request failed; see the service log')
      else res.destroy()
    }
  }
}
