import { configDocument, type InForce, type Json } from '../config-document.js'
import type { DomainConfigSet, DomainRule } from '../gateway/domains.js'
import { send } from '../http-responses.js'
import type { RouteHandler } from '../router.js'
import { packageVersion } from '../version.js'

/** The last reload the service tried, as `GET /v1/config` shows it. */
export interface ReloadAttempt {
  /** When it ended, ISO 8601. */
  readonly at: string
  /** What asked for it: a signal (SIGHUP), the watch of the config file or of a domain file, or a call of `reload()`. */
  readonly source: 'signal' | 'watch' | 'api'
  /** The trigger as the log names it: `SIGHUP`, `file change`, `domain file change`, `api`. */
  readonly trigger: string
  /** Whether the new config was applied; when not, the one in force before stays. */
  readonly ok: boolean
  /** Why it was refused: every problem, one per line. Absent when applied. */
  readonly error?: string
}

/** What the route reads from the running service. */
export interface ConfigRouteContext {
  /** The last reload attempt; undefined before the first. */
  lastReload?(): ReloadAttempt | undefined
  /** What the service applies over its config (ports it listens on, `--log-level`). */
  inForce?(): InForce
}

/** A rule in the domain file's own words (snake_case), with where it comes from. */
function ruleDocument(rule: DomainRule): Json {
  const rateLimit: Record<string, Json> = rule.unlimited
    ? { unlimited: true }
    : {
        unit: rule.unit ?? null,
        requests_per_unit: rule.requestsPerUnit,
        algorithm: rule.algorithm,
        ...(rule.syncRate !== undefined ? { sync_rate: rule.syncRate } : {}),
        ...(rule.escrow !== undefined ? { escrow: rule.escrow } : {}),
      }
  if (rule.name !== undefined) rateLimit.name = rule.name
  if (rule.replaces.length > 0) rateLimit.replaces = rule.replaces.map((name) => ({ name }))
  return {
    file: rule.file,
    path: rule.path,
    stats_key: rule.statsKey,
    entries: rule.entries.map((e): Json => (e.value === '' ? { key: e.key } : { key: e.key, value: e.value })),
    rate_limit: rateLimit,
    shadow_mode: rule.shadowMode,
    quota_mode: rule.quotaMode,
  }
}

/** The loaded domains, each with its rules in file order; a domain without a limited descriptor has none. */
function domainsDocument(set: DomainConfigSet): Json {
  const byDomain = new Map<string, Json[]>()
  for (const domain of set.domains()) byDomain.set(domain, [])
  for (const rule of set.rules()) byDomain.get(rule.domain)?.push(ruleDocument(rule))
  return [...byDomain].map(([domain, rules]) => ({ domain, rules }))
}

/**
 * `GET /v1/config` (an admin token when auth is on): the config in force as JSON in the config
 * file's shape, after the environment overrides, secrets redacted; the Envoy domains and rules
 * loaded with it; the last reload attempt; the version. Built per request: it is read rarely,
 * and a reload changes all of it.
 */
export function configRoute(ctx: ConfigRouteContext): RouteHandler {
  const version = packageVersion()
  return function effectiveConfig({ res, runtime }) {
    const config = runtime.config
    const body = {
      version,
      source: config.source,
      config: configDocument(config, ctx.inForce?.() ?? {}),
      domainFiles: [...runtime.envoy.domains.files],
      domains: domainsDocument(runtime.envoy.domains),
      lastReload: ctx.lastReload?.() ?? null,
    }
    send(res, 200, `${JSON.stringify(body, null, 2)}\n`, {})
  }
}
