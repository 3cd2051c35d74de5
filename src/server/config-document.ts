import type { PolicyConfig, ServiceConfig } from './config.js'

// The config in force as a document in the config file's shape (kebab-case keys, every default
// filled in), with its secrets redacted: what GET /v1/config answers.

/** What a secret reads as in {@link configDocument}. */
export const REDACTED = '<redacted>'

/** A JSON value. */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json }

/** What the running service applies over its config: the command line's and `startService`'s options, the ports it got. */
export interface InForce {
  /** `--host` / `options.host`. */
  readonly host?: string
  /** The HTTP port listened on (`--port`, a port 0 resolved). */
  readonly port?: number
  /** `--log-level` / `options.logLevel`. */
  readonly logLevel?: string
  /** The gRPC listener's port (`options.grpcPort`, a port 0 resolved). */
  readonly grpcPort?: number
}

// Keys whose values are secrets wherever they appear: auth tokens, and the passwords a store
// section may hold (sentinel and TLS options included, whatever other store options come).
const SECRET_KEY = /password|passphrase|secret|token|credential/i
// query parameters that carry a secret in a store URL (postgres's ?password=, ?sslpassword=)
const SECRET_PARAM = /pass|secret|token/i

/**
 * `url` with its credentials replaced by {@link REDACTED}: the user and password before `@`
 * (`redis://<redacted>@10.0.0.5:6379/2`), and the value of a query parameter such as
 * `password`. Host, port, database and the other parameters stay. A string without a scheme is
 * read as `user:password@host:port` (memcached servers, cluster nodes). When unsure where the
 * credentials end, more is redacted, never less.
 *
 * @example
 * redactUrl('redis://app:hunter2@127.0.0.1:6379/2') // 'redis://<redacted>@127.0.0.1:6379/2'
 */
export function redactUrl(url: string): string {
  const scheme = /^[A-Za-z][A-Za-z0-9+.-]*:\/\//.exec(url)?.[0] ?? ''
  let rest = url.slice(scheme.length)
  // the userinfo ends at the last '@': a password may hold '/', '?', '#' or '@' unencoded (an '@'
  // in the query hides the host too, which is the safe way to be wrong)
  const at = rest.lastIndexOf('@')
  if (at >= 0) rest = `${REDACTED}${rest.slice(at)}`
  const q = rest.indexOf('?')
  if (q < 0) return scheme + rest
  const hash = rest.indexOf('#', q)
  const end = hash < 0 ? rest.length : hash
  const params = rest
    .slice(q + 1, end)
    .split('&')
    .map((p) => {
      const eq = p.indexOf('=')
      return eq > 0 && SECRET_PARAM.test(p.slice(0, eq)) ? `${p.slice(0, eq + 1)}${REDACTED}` : p
    })
  return `${scheme}${rest.slice(0, q + 1)}${params.join('&')}${rest.slice(end)}`
}

/** `maxBodyBytes` → `max-body-bytes`: the config file's key of a normalized config's field. */
function kebab(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)
}

/** A normalized section back in the file's shape: fields renamed to kebab-case, recursively; undefined ones left out. */
function section(value: unknown): Json {
  if (value === null || typeof value !== 'object') return value as Json
  if (Array.isArray(value)) return value.map(section)
  if (value instanceof Map) return Object.fromEntries([...value].map(([k, v]) => [String(k), section(v)]))
  const out: Record<string, Json> = {}
  for (const [k, v] of Object.entries(value)) if (v !== undefined) out[kebab(k)] = section(v)
  return out
}

/** Redacts every value under a secret key, and, under `store`, the credentials of every string. */
function redact(value: Json, inStore: boolean, secret: boolean): Json {
  if (typeof value === 'string') return secret ? REDACTED : inStore ? redactUrl(value) : value
  if (value === null || typeof value !== 'object') return secret && value !== null ? REDACTED : value
  if (Array.isArray(value)) return value.map((v) => redact(v, inStore, secret))
  const out: Record<string, Json> = {}
  for (const [k, v] of Object.entries(value)) out[k] = redact(v, inStore, secret || SECRET_KEY.test(k))
  return out
}

function policyDocument(p: PolicyConfig, defaults: PolicyConfig | undefined): Record<string, Json> {
  const isDefault = defaults === undefined
  const counter = p.algo === 'sliding-window-counter-algo'
  return {
    'use-algo': p.algo,
    'max-requests': p.maxRequests,
    'window-size': p.windowSize,
    // a named policy may set it only for the counter; the default policy carries it for those that inherit it
    ...(isDefault || counter ? { 'sync-rate': p.syncRate } : {}),
    // only the counter has it (a policy of another algorithm may not set it)
    ...(counter ? { escrow: p.escrow } : {}),
    // the default policy's is rate-limiter's, below; a named policy shows its own where it differs
    ...(!isDefault && p.onStoreError !== defaults.onStoreError ? { 'on-store-error': p.onStoreError } : {}),
    'shadow-mode': p.shadowMode,
    'deny-list': [...p.denyList],
    'allow-list': [...p.allowList],
    overrides: Object.fromEntries([...p.overrides].map(([userId, max]) => [userId, { 'max-requests': max }])),
  }
}

/**
 * The config in force as the config file would write it (kebab-case keys, every default filled
 * in, the environment overrides applied, then `inForce`), its secrets redacted: auth tokens,
 * any password-like key, and the credentials of store URLs (see {@link redactUrl}).
 *
 * @example
 * const doc = configDocument(parseConfig('store: { type: redis, url: "redis://:pw@127.0.0.1:6379" }', 'inline'))
 * // doc.store: { type: 'redis', url: 'redis://<redacted>@127.0.0.1:6379', 'timeout-ms': 1000 }
 */
export function configDocument(config: ServiceConfig, inForce: InForce = {}): Record<string, Json> {
  const limiter = config.policies.get('default')
  const named = [...config.policies.values()].filter((p) => p.name !== 'default')
  const { domains, algo, ...envoy } = config.gateway.envoy
  const doc: Record<string, Json> = {
    'log-level': inForce.logLevel ?? config.logLevel,
    'key-normalization': config.keyNormalization,
    server: section({
      ...config.server,
      ...(inForce.host !== undefined ? { host: inForce.host } : {}),
      ...(inForce.port !== undefined ? { port: inForce.port } : {}),
    }),
    'rate-limiter': {
      ...(limiter === undefined ? {} : policyDocument(limiter, undefined)),
      'key-prefix': config.keyPrefix,
      'hash-tag': config.hashTag,
      'on-store-error': config.onStoreError,
      'overrides-refresh': config.overridesRefresh,
    },
    policies: Object.fromEntries(named.map((p) => [p.name, policyDocument(p, limiter)])),
    store: section(config.store),
    'shadow-mode': config.gateway.shadowMode,
    ...(config.gateway.grpc !== undefined
      ? { grpc: section({ ...config.gateway.grpc, ...(inForce.grpcPort !== undefined ? { port: inForce.grpcPort } : {}) }) }
      : {}),
    envoy: { ...(domains !== undefined ? { domains } : {}), 'use-algo': algo, ...(section(envoy) as Record<string, Json>) },
    'forward-auth': section(config.gateway.forwardAuth),
    ...(config.auth !== undefined ? { auth: section(config.auth) } : {}),
  }
  const out: Record<string, Json> = {}
  for (const [k, v] of Object.entries(doc)) out[k] = redact(v, k === 'store', SECRET_KEY.test(k))
  return out
}
