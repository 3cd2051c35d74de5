import type { ForwardAuthKeyEntry } from './config-gateway.js'
import { sendError } from './http-responses.js'
import { userIdProblem } from './http-input.js'
import type { RouteHandler } from './router.js'
import type { Decide } from './routes/decide.js'

// `/v1/forward-auth[/<policy>]`: one decision per request a gateway is about to proxy, asked
// as nginx's auth_request, Traefik's ForwardAuth and Caddy's forward_auth ask (docs/GATEWAY.md).

/** The route's path: alone it decides on the default policy (or `?policy=`), `/<policy>` names one. */
export const FORWARD_AUTH_PATH = '/v1/forward-auth'

/**
 * The entry of a header value that `entry` picks; `''` when that entry is empty. A proxy that
 * appends to X-Forwarded-For (nginx's `$proxy_add_x_forwarded_for`, Traefik) writes the address it
 * saw last, after whatever the client sent: `last` is the entry a client cannot choose.
 */
export function keyEntryOf(value: string, entry: ForwardAuthKeyEntry): string {
  if (entry === 'whole') return value
  const comma = entry === 'last' ? value.lastIndexOf(',') : value.indexOf(',')
  if (comma < 0) return value
  return (entry === 'last' ? value.slice(comma + 1) : value.slice(0, comma)).trim()
}

/**
 * Answers `/v1/forward-auth`, `/v1/forward-auth?policy=<name>` and `/v1/forward-auth/<name>`,
 * whatever the method (nginx, Traefik and Caddy send GET; other gateways may forward the
 * client's): the key is the configured header (`forward-auth.key-header`, the entry `key-entry`
 * picks), the cost is 1, and nothing of the body is read. The decision is made and answered as
 * a `/v1/check` one (`decide`), a denial with `forward-auth.denied-status`.
 */
export function forwardAuthRoute(decide: Decide): RouteHandler {
  return function forwardAuth({ req, res, runtime, path, query }) {
    let name: string | null = null
    // the query is not read on the path form: Caddy's forward_auth keeps the client's query string
    // when its `uri` has none, and a client must not pick its policy. Policy names need no decoding.
    if (path.length > FORWARD_AUTH_PATH.length) name = path.slice(FORWARD_AUTH_PATH.length + 1)
    else if (query !== '') name = new URLSearchParams(query).get('policy')
    const policy = name === null ? runtime.defaultPolicy : runtime.policies.get(name)
    if (policy === undefined) {
      sendError(res, 404, 'unknown_policy', `policy ${JSON.stringify(name)} is not configured`)
      return
    }
    const config = runtime.config.gateway.forwardAuth
    const header = req.headers[config.keyHeader]
    if (header === undefined) {
      sendError(
        res,
        400,
        'invalid_key',
        `the ${config.keyHeader} header is missing: the gateway must set it to the client's key (nginx: proxy_set_header in the auth location; see docs/GATEWAY.md)`,
      )
      return
    }
    // only set-cookie arrives as an array; any other repeated header is joined with ", " by Node
    const key = keyEntryOf(typeof header === 'string' ? header : header.join(', '), config.keyEntry)
    const problem = userIdProblem(key, runtime.config.server.maxUserIdLength, 'the key')
    if (problem !== undefined) {
      sendError(res, 400, 'invalid_key', `${problem} (read from the ${config.keyHeader} header, key-entry ${config.keyEntry})`)
      return
    }
    decide(req, res, runtime, policy, key, 1, config.deniedStatus)
  }
}
