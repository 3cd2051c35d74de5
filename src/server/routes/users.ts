import type { Logger } from 'pino'
import type { AlgorithmResult } from '../../algorithms/types.js'
import { StoreError } from '../../core/errors.js'
import { userIdProblem } from '../http-input.js'
import { listedResult, rateLimitHeaderList, resultBody, sendDecision, sendError } from '../http-responses.js'
import { withOverride } from '../overrides.js'
import type { RouteHandler } from '../router.js'
import { policyOf, type StoreErrorLog } from './decide.js'

/**
 * `GET /v1/users/{userId}?policy=` reads a user's usage without consuming (200, with the
 * decision a check would get now); `DELETE` forgets it (204). The id is percent-encoded in the
 * path, so it holds no `/`.
 */
export function userRoute(logger: Logger, storeErrors: StoreErrorLog): RouteHandler {
  return function user({ req, res, runtime, rest, query }) {
    const method = req.method
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
        storeErrors.note(err, runtime, policy, method === 'GET' ? 'peek' : 'reset')
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
}
