import type { ServerResponse } from 'node:http'
import { send, sendError } from '../http-responses.js'
import type { RouteHandler } from '../router.js'
import type { Runtime } from '../runtime.js'
import { OWN_LIMITS_RULE, type TopKeys, type TopReport } from '../top-keys.js'

/** The largest `n` of `GET /v1/top`. */
export const MAX_TOP = 100

/** What `GET /v1/top` answers: the policy's, or the rule's, top keys over the last minute. */
export type TopBody = ({ policy: string } | { domain: string; rule: string }) & TopReport

/**
 * The top keys that `query` asks for, or undefined once the problem is answered: 400 naming the
 * bad parameter, 404 for a policy, domain or rule the config does not have. Without `policy`,
 * `domain` and `rule`, the default policy's.
 */
export function topOf(top: TopKeys, runtime: Runtime, res: ServerResponse, query: string): TopBody | undefined {
  const params = new URLSearchParams(query)
  const nText = params.get('n')
  let n = 10
  if (nText !== null) {
    n = Number(nText)
    if (!/^\d+$/.test(nText) || n < 1 || n > MAX_TOP) {
      sendError(res, 400, 'invalid_request', `n must be an integer from 1 to ${MAX_TOP}, got ${JSON.stringify(nText)}`)
      return undefined
    }
  }
  const policy = params.get('policy')
  const domain = params.get('domain')
  const rule = params.get('rule')
  if (domain !== null || rule !== null) {
    if (policy !== null) {
      sendError(res, 400, 'invalid_request', 'policy: give either policy or domain and rule, not both')
      return undefined
    }
    if (domain === null || domain === '') {
      sendError(res, 400, 'invalid_request', 'domain: an Envoy rule is named by domain and rule; domain is missing')
      return undefined
    }
    if (rule === null || rule === '') {
      sendError(res, 400, 'invalid_request', 'rule: an Envoy rule is named by domain and rule (its stats key); rule is missing')
      return undefined
    }
    const domains = runtime.envoy.domains
    if (!domains.hasDomain(domain)) {
      sendError(res, 404, 'unknown_domain', `domain ${JSON.stringify(domain)} is not in the domain files`)
      return undefined
    }
    const known = rule === OWN_LIMITS_RULE || [...domains.rules()].some((r) => r.domain === domain && r.statsKey === rule && !r.unlimited)
    if (!known) {
      sendError(
        res,
        404,
        'unknown_rule',
        `domain ${JSON.stringify(domain)} has no limited rule with stats key ${JSON.stringify(rule)} (nor is it ${OWN_LIMITS_RULE})`,
      )
      return undefined
    }
    return { domain, rule, ...top.topOfRule(domain, rule, n) }
  }
  if (policy === '') {
    sendError(res, 400, 'invalid_request', 'policy must not be empty')
    return undefined
  }
  const name = policy ?? runtime.defaultPolicy.name
  if (!runtime.policies.has(name)) {
    sendError(res, 404, 'unknown_policy', `policy ${JSON.stringify(name)} is not configured`)
    return undefined
  }
  return { policy: name, ...top.topOfPolicy(name, n) }
}

/**
 * `GET /v1/top?policy=NAME&n=10` or `?domain=D&rule=STATSKEY` (an admin token when auth is on):
 * the keys with the most denials and the most hits over the last minute, each with its estimated
 * count and the error bound of the estimate (docs/SERVICE.md, "Who is being limited").
 */
export function topRoute(top: TopKeys): RouteHandler {
  return function topKeys({ res, runtime, query }) {
    const body = topOf(top, runtime, res, query)
    if (body !== undefined) send(res, 200, JSON.stringify(body), {})
  }
}
