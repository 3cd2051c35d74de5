import { envFlag } from './config-gateway.js'

// The environment overrides of the config file, applied to the raw document before validation.

/** Environment variables read by {@link parseConfig}. */
export interface ConfigEnv {
  /** Overrides `store.url` (redis, postgres), `store.nodes` (redis, when comma-separated) or `store.servers` (memcached, comma-separated). */
  readonly RATELIMITING_STORE_URL?: string
  /** Redis Sentinel: overrides `store.password`, the data nodes' password (redis only). */
  readonly RATELIMITING_STORE_PASSWORD?: string
  /** Redis Sentinel: overrides `store.sentinel-password`, the Sentinels' password (redis only). */
  readonly RATELIMITING_STORE_SENTINEL_PASSWORD?: string
  /** Comma-separated bearer tokens, replacing `auth.tokens`. */
  readonly RATELIMITING_AUTH_TOKENS?: string
  /** Comma-separated admin tokens, replacing `auth.admin-tokens`. */
  readonly RATELIMITING_ADMIN_TOKENS?: string
  /** `true` or `false`, replacing `shadow-mode`. */
  readonly RATELIMITING_SHADOW_MODE?: string
  readonly [name: string]: string | undefined
}

export type Raw = Record<string, unknown>

export function section(raw: Raw, name: string): Raw {
  const value = raw[name]
  return typeof value === 'object' && value !== null ? (value as Raw) : {}
}

function list(value: string | undefined): string[] | undefined {
  if (value === undefined || value.trim() === '') return undefined
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
}

/** Applies the environment overrides to a raw (parsed, not yet validated) document. */
export function applyEnv(raw: Raw, env: ConfigEnv): Raw {
  const out: Raw = { ...raw }
  const url = env.RATELIMITING_STORE_URL
  const storeType = section(raw, 'store').type
  // the memory store has no URL: the override is for deployments that point a config at a server
  if (url !== undefined && url.trim() !== '' && storeType !== undefined && storeType !== 'memory') {
    const store = { ...section(raw, 'store') }
    const values = list(url) ?? []
    if (store.type === 'memcached') store.servers = values
    else if (store.type === 'redis' && values.length > 1) store.nodes = values
    else store.url = url.trim()
    out.store = store
  }
  // Sentinel's passwords have no URL to travel in: these keep them out of the file
  const passwords = Object.entries({
    password: env.RATELIMITING_STORE_PASSWORD,
    'sentinel-password': env.RATELIMITING_STORE_SENTINEL_PASSWORD,
  }).filter(([, value]) => value !== undefined && value !== '')
  if (storeType === 'redis' && passwords.length > 0) out.store = { ...section(out, 'store'), ...Object.fromEntries(passwords) }
  const tokens = list(env.RATELIMITING_AUTH_TOKENS)
  const adminTokens = list(env.RATELIMITING_ADMIN_TOKENS)
  if (tokens !== undefined || adminTokens !== undefined) {
    const auth = { ...section(raw, 'auth') }
    if (tokens !== undefined) auth.tokens = tokens
    if (adminTokens !== undefined) auth['admin-tokens'] = adminTokens
    out.auth = auth
  }
  const shadow = env.RATELIMITING_SHADOW_MODE
  if (shadow !== undefined && shadow.trim() !== '') out['shadow-mode'] = envFlag(shadow) ?? `RATELIMITING_SHADOW_MODE=${shadow}`
  return out
}
