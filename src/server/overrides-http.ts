import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { StoreError } from '../core/errors.js'
import { MAX_REQUESTS_LIMIT } from './config-schema.js'
import { readJsonBody, userIdProblem } from './http-input.js'
import { send, sendError } from './http-responses.js'
import type { ServiceMetrics } from './metrics.js'
import { MAX_RUNTIME_OVERRIDES } from './overrides.js'
import { isOverrideLimit } from './overrides-store.js'
import type { Policy, Runtime } from './runtime.js'

// The admin routes of per-user limits (docs/SERVICE.md, "Per-user limits"):
//   GET    /v1/overrides/{policy}            the policy's overrides in force, config and runtime
//   GET    /v1/overrides/{policy}/{userId}   one user's
//   PUT    /v1/overrides/{policy}/{userId}   {"maxRequests": N}: set a runtime override
//   DELETE /v1/overrides/{policy}/{userId}   remove the runtime override
// With auth configured, each needs an admin token: the route table (src/server/http.ts) checks it
// before any of these, so a request without one learns nothing of policies or paths.

/** The routes' path prefix. */
export const OVERRIDES_PATH = '/v1/overrides/'

/** What the routes need from the service. */
export interface OverridesContext {
  readonly metrics: ServiceMetrics
  readonly logger: Logger
}

/** Answers a request under {@link OVERRIDES_PATH}; `rest` is the path after it. */
export function answerOverrides(req: IncomingMessage, res: ServerResponse, runtime: Runtime, rest: string, ctx: OverridesContext): void {
  const slash = rest.indexOf('/')
  const policyPart = slash < 0 ? rest : rest.slice(0, slash)
  const userPart = slash < 0 ? undefined : rest.slice(slash + 1)
  if (policyPart === '' || userPart?.includes('/') === true || userPart === '') {
    sendError(
      res,
      404,
      'not_found',
      'no such route: /v1/overrides/{policy} or /v1/overrides/{policy}/{userId}; percent-encode "/" in user ids',
    )
    return
  }
  const allow = userPart === undefined ? 'GET' : 'GET, PUT, DELETE'
  if (!allow.split(', ').includes(req.method ?? '')) {
    sendError(res, 405, 'method_not_allowed', `${req.method} is not allowed here; use ${allow}`, { allow })
    return
  }
  let policyName: string
  let userId: string | undefined
  try {
    policyName = decodeURIComponent(policyPart)
    userId = userPart === undefined ? undefined : decodeURIComponent(userPart)
  } catch {
    sendError(res, 400, 'invalid_request', 'the path is not valid percent-encoding')
    return
  }
  const policy = runtime.policies.get(policyName)
  if (policy === undefined) {
    sendError(res, 404, 'unknown_policy', `policy ${JSON.stringify(policyName)} is not configured`)
    return
  }
  if (userId === undefined) {
    run(res, runtime, policy, ctx, async () => {
      await runtime.overrides.refresh()
      send(res, 200, JSON.stringify({ policy: policy.name, limit: policy.limit, overrides: policy.overrides.list() }), {})
    })
    return
  }
  const problem = userIdProblem(userId, runtime.config.server.maxUserIdLength)
  if (problem !== undefined) {
    sendError(res, 400, 'invalid_request', problem)
    return
  }
  // stored and looked up in the form checks compare keys in (key-normalization)
  const user = runtime.normalizeKey(userId)
  if (req.method === 'GET') {
    run(res, runtime, policy, ctx, async () => {
      await runtime.overrides.refresh()
      const entry = policy.overrides.list().find((e) => e.userId === user)
      if (entry === undefined) noOverride(res, policy, user)
      else send(res, 200, JSON.stringify({ policy: policy.name, ...entry }), {})
    })
    return
  }
  if (runtime.overrides.backend === undefined) {
    sendError(
      res,
      501,
      'not_implemented',
      `store type ${runtime.store.type} cannot hold runtime overrides (it cannot list keys nor keep a version that every instance reads); set them under overrides in the config, which every store supports`,
    )
    return
  }
  if (req.method === 'DELETE') {
    run(res, runtime, policy, ctx, async () => {
      if (await runtime.overrides.remove(policy.name, user)) {
        ctx.logger.info({ policy: policy.name, userId: user }, 'override removed')
        res.writeHead(204)
        res.end()
      } else noOverride(res, policy, user)
    })
    return
  }
  readJsonBody(req, res, runtime.config.server.maxBodyBytes, 'the body must be JSON such as {"maxRequests":1000}', (input) => {
    const maxRequests = limitOf(res, input)
    if (maxRequests === undefined) return
    const held = runtime.overrides.of(policy.name)
    if (held !== undefined && held.size >= MAX_RUNTIME_OVERRIDES && !held.has(user)) {
      sendError(
        res,
        409,
        'too_many_overrides',
        `policy ${policy.name} has ${MAX_RUNTIME_OVERRIDES} runtime overrides, the most it may have`,
      )
      return
    }
    run(res, runtime, policy, ctx, async () => {
      await runtime.overrides.set(policy.name, user, maxRequests)
      ctx.logger.info({ policy: policy.name, userId: user, maxRequests }, 'override set')
      send(res, 200, JSON.stringify({ policy: policy.name, userId: user, maxRequests, source: 'runtime' }), {})
    })
  })
}

/** The `maxRequests` of a PUT body, or undefined once the problem is answered. */
function limitOf(res: ServerResponse, input: unknown): number | undefined {
  if (typeof input !== 'object' || input === null || Array.isArray(input)) {
    sendError(res, 400, 'invalid_request', 'the body must be a JSON object such as {"maxRequests":1000}')
    return undefined
  }
  const fields = input as Record<string, unknown>
  const unknown = Object.keys(fields).find((k) => k !== 'maxRequests')
  if (unknown !== undefined) {
    sendError(res, 400, 'invalid_request', `unknown field ${JSON.stringify(unknown)}; the body is {"maxRequests": N}`)
    return undefined
  }
  if (!isOverrideLimit(fields.maxRequests, MAX_REQUESTS_LIMIT)) {
    const got = fields.maxRequests === undefined ? 'nothing' : JSON.stringify(fields.maxRequests)
    sendError(res, 400, 'invalid_request', `maxRequests must be an integer from 1 to ${MAX_REQUESTS_LIMIT}, got ${got}`)
    return undefined
  }
  return fields.maxRequests
}

function noOverride(res: ServerResponse, policy: Policy, userId: string): void {
  const configured = policy.overrides.config.get(userId)
  sendError(
    res,
    404,
    'no_override',
    configured === undefined
      ? `user ${JSON.stringify(userId)} has no override in policy ${policy.name}`
      : `user ${JSON.stringify(userId)} has no runtime override in policy ${policy.name}; its config override (max-requests ${configured}) applies`,
  )
}

/** Runs a store call of the routes: a store failure is 503 (the decisions keep the last overrides read). */
function run(res: ServerResponse, runtime: Runtime, policy: Policy, ctx: OverridesContext, call: () => Promise<void>): void {
  runtime.enter()
  call()
    .catch((err: unknown) => {
      if (res.headersSent) return
      if (err instanceof StoreError) {
        ctx.metrics.storeError(runtime.store.type, 'overrides')
        ctx.logger.warn({ err: { message: err.message, code: err.code }, policy: policy.name }, 'overrides: store call failed')
        sendError(res, 503, 'store_unavailable', `the ${runtime.store.type} store did not answer: ${err.message}`, { 'retry-after': '1' })
      } else {
        ctx.logger.error({ err, policy: policy.name }, 'overrides request failed')
        sendError(res, 500, 'internal_error', 'the request failed; see the service log')
      }
    })
    .finally(() => runtime.leave())
}
