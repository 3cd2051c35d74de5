import { readJsonBody, userIdProblem } from '../http-input.js'
import { sendError } from '../http-responses.js'
import type { RouteHandler } from '../router.js'
import { type Decide, policyOf } from './decide.js'

/** Largest `cost` one request may ask for. */
export const MAX_COST = 1_000_000

// The fields of a POST /v1/check body.
const CHECK_FIELDS = new Set(['userId', 'policy', 'cost'])

/**
 * `POST /v1/check`: consumes `cost` (default 1) of `userId`'s limit in `policy` (default
 * `default`) and answers 200 or 429 with the decision (docs/SERVICE.md). The body is checked
 * whole before anything is decided: an unknown field, a bad id or cost is a 400 naming it.
 */
export function checkRoute(decide: Decide): RouteHandler {
  return function check({ req, res, runtime }) {
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
}
