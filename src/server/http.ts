import { isUtf8 } from 'node:buffer'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { performance } from 'node:perf_hooks'
import type { Logger } from 'pino'
import { userIdEncodingProblem } from '../algorithms/options.js'
import type { AlgorithmResult } from '../algorithms/types.js'
import { StoreError } from '../core/errors.js'
import type { Grant } from './auth.js'
import { rateLimitHeaderList, resultBody, send, sendDecision, sendError } from './http-responses.js'
import type { ServiceMetrics } from './metrics.js'
import type { Policy, Runtime } from './runtime.js'

/** Largest `cost` one request may ask for. */
export const MAX_COST = 1_000_000

/** What the request handler needs from the service. */
export interface HandlerContext {
  /** The runtime new requests use (a reload swaps it). */
  runtime(): Runtime
  /** True once shutdown began: responses then close their connection. */
  closing(): boolean
  readonly metrics: ServiceMetrics
  readonly logger: Logger
}

// A control character (C0, DEL, C1): refused in user ids, which end up in keys and logs.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/

/** Why a user id is refused, or undefined when it is fine. */
function userIdProblem(userId: unknown, maxLength: number): string | undefined {
  if (userId === undefined) return 'userId is required'
  if (typeof userId !== 'string')
    return `userId must be a string, got ${userId === null ? 'null' : Array.isArray(userId) ? 'an array' : typeof userId}`
  if (userId.length === 0) return 'userId must not be empty'
  if (userId.length > maxLength) return `userId must be at most ${maxLength} characters, got ${userId.length}`
  if (CONTROL.test(userId)) return 'userId must not contain control characters'
  return userIdEncodingProblem(userId)
}

/** Whether a Content-Type header says JSON: `application/json`, parameters allowed (charset utf-8 only). */
function isJson(contentType: string | undefined): boolean {
  if (contentType === 'application/json') return true
  if (contentType === undefined) return false
  const [type, ...params] = contentType.split(';')
  if ((type as string).trim().toLowerCase() !== 'application/json') return false
  for (const param of params) {
    const [name, value] = param.split('=')
    if (name?.trim().toLowerCase() === 'charset' && value?.trim().replace(/^"|"$/g, '').toLowerCase() !== 'utf-8') return false
  }
  return true
}

/**
 * The service's request handler: the routes of docs/SERVICE.md on plain `node:http`. Nothing a
 * client sends reaches an algorithm unchecked, and every failure is a JSON error. A request that
 * can no longer be answered (its connection is closing, as after a 413, or gone) is never decided,
 * so it is never counted.
 */
export function createRequestHandler(ctx: HandlerContext): (req: IncomingMessage, res: ServerResponse) => void {
  const { metrics, logger } = ctx
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

  /** Answers a store failure as the config's `on-store-error` says. */
  function failed(res: ServerResponse, runtime: Runtime, policy: Policy, err: unknown, started: number): void {
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
      degraded: true,
    })
    send(res, allowed ? 200 : 429, body, allowed ? {} : { 'retry-after': '1' })
  }

  function decide(req: IncomingMessage, res: ServerResponse, runtime: Runtime, policy: Policy, userId: string, cost: number): void {
    // the connection was closed or is closing since the request arrived: no answer can reach the client
    if (!req.socket.writable) return
    runtime.enter()
    const started = performance.now()
    const done = (r: AlgorithmResult) => {
      runtime.leave()
      metrics.tally(policy).record(r.allowed ? 'allowed' : 'denied', (performance.now() - started) / 1000)
      sendDecision(res, r.allowed ? 200 : 429, resultBody(r), rateLimitHeaderList(policy, r, runtime))
    }
    const fail = (err: unknown) => {
      runtime.leave()
      failed(res, runtime, policy, err, started)
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
    if (!isJson(req.headers['content-type'])) {
      const got = req.headers['content-type'] === undefined ? 'none' : JSON.stringify(req.headers['content-type'])
      sendError(res, 415, 'unsupported_media_type', `the body must be JSON, sent with Content-Type: application/json; got ${got}`)
      return
    }
    const max = runtime.config.server.maxBodyBytes
    const declared = req.headers['content-length']
    if (declared !== undefined && Number(declared) > max) {
      tooLarge(res, max)
      return
    }
    const chunks: Buffer[] = []
    let size = 0
    let over = false
    req.on('data', (chunk: Buffer) => {
      if (over) return
      size += chunk.length
      if (size > max) {
        over = true
        tooLarge(res, max)
        return
      }
      chunks.push(chunk)
    })
    req.on('error', () => undefined) // the client went away; nothing to answer
    req.on('end', () => {
      if (over) return
      const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks)
      // invalid UTF-8 would decode to U+FFFD, so different bytes would name the same user
      if (!isUtf8(body)) {
        sendError(res, 400, 'invalid_json', 'the body must be JSON in UTF-8')
        return
      }
      const text = body.toString('utf8')
      let input: unknown
      try {
        input = JSON.parse(text)
      } catch {
        sendError(res, 400, 'invalid_json', 'the body must be JSON such as {"userId":"u1","policy":"default","cost":1}')
        return
      }
      if (typeof input !== 'object' || input === null || Array.isArray(input)) {
        sendError(res, 400, 'invalid_request', 'the body must be a JSON object such as {"userId":"u1"}')
        return
      }
      const fields = input as Record<string, unknown>
      const problem = userIdProblem(fields.userId, runtime.config.server.maxUserIdLength)
      if (problem !== undefined) {
        sendError(res, 400, 'invalid_request', problem)
        return
      }
      const cost = fields.cost ?? 1
      if (typeof cost !== 'number' || !Number.isInteger(cost) || cost < 1 || cost > MAX_COST) {
        sendError(res, 400, 'invalid_request', `cost must be an integer from 1 to ${MAX_COST}, got ${JSON.stringify(cost)}`)
        return
      }
      const policy = policyOf(runtime, res, fields.policy)
      if (policy === undefined) return
      decide(req, res, runtime, policy, fields.userId as string, cost)
    })
  }

  function tooLarge(res: ServerResponse, max: number): void {
    // the rest of the body is not read: close the connection after the answer
    sendError(res, 413, 'payload_too_large', `the body must be at most ${max} bytes`, { connection: 'close' })
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
    const policy = policyOf(runtime, res, query === '' ? undefined : (new URLSearchParams(query).get('policy') ?? undefined))
    if (policy === undefined) return
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
          sendDecision(res, 200, resultBody(r), at < 0 ? list : [...list.slice(0, at), ...list.slice(at + 2)])
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

  return function handleRequest(req: IncomingMessage, res: ServerResponse): void {
    // pipelined behind an answer that closed the connection (a 413), or on a refused connection:
    // no answer can be sent, so nothing is decided
    if (!req.socket.writable) {
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
      } else if (path.startsWith('/v1/users/')) {
        user(req, res, path.slice('/v1/users/'.length), q < 0 ? '' : url.slice(q + 1))
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
