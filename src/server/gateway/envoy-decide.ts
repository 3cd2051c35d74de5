import type { AlgorithmResult, RateLimitAlgorithm } from '../../algorithms/types.js'
import { rateLimitHeaders } from '../../core/headers.js'
import type { EnvoyConfig } from '../config-gateway.js'
import type { ShadowLog } from '../shadow-log.js'
import { OWN_LIMITS_RULE, topKeysOf } from '../top-keys.js'
import { applyReplaces, type RateLimitUnit, UNIT_SECONDS } from './domains.js'
import { boundKey, escapePart } from './domains-match.js'
import type { EnvoyAlgorithms } from './envoy-rules.js'
import type { GatewayMetrics } from './gateway-metrics.js'

// Envoy's ShouldRateLimit (rls v3) as envoyproxy/ratelimit answers it, on this service's
// algorithms: shared by the gRPC listener and POST /json (docs/GATEWAY.md).

/** A descriptor status or the overall code. */
export type EnvoyCode = 'OK' | 'OVER_LIMIT'

/** One `key`/`value` entry of a descriptor. */
export interface EnvoyEntry {
  readonly key: string
  readonly value: string
}

/** One descriptor of a request. */
export interface EnvoyDescriptor {
  readonly entries: readonly EnvoyEntry[]
  /** The descriptor's own limit, instead of the domain file's. */
  readonly limit?: { readonly requestsPerUnit: number; readonly unit: RateLimitUnit }
  /** Hits this descriptor adds (0 reads without counting); the request's otherwise. */
  readonly hitsAddend?: number
}

/** A ShouldRateLimit request. */
export interface EnvoyRequest {
  readonly domain: string
  readonly descriptors: readonly EnvoyDescriptor[]
  /** Hits every descriptor without its own adds; 0 means 1. */
  readonly hitsAddend: number
}

/** A descriptor's limit as the answer names it. */
export interface EnvoyLimit {
  readonly name: string
  readonly requestsPerUnit: number
  readonly unit: RateLimitUnit
}

/** One descriptor's answer. */
export interface EnvoyStatus {
  readonly code: EnvoyCode
  readonly currentLimit: EnvoyLimit | undefined
  readonly limitRemaining: number
  /** Seconds until the limit's window resets; undefined without a limit. */
  readonly durationUntilResetS: number | undefined
}

/** A ShouldRateLimit answer. */
export interface EnvoyResponse {
  readonly overallCode: EnvoyCode
  readonly statuses: readonly EnvoyStatus[]
  /** `response_headers_to_add`, as `envoy.response-headers` says. */
  readonly headers: ReadonlyArray<{ readonly key: string; readonly value: string }>
  /** A rule in shadow mode, or the global shadow mode, turned an OVER_LIMIT into OK. */
  readonly shadowDenied: boolean
}

/** A request Envoy's protocol does not allow (gRPC INVALID_ARGUMENT, /json 400). */
export class EnvoyRequestError extends Error {
  override readonly name = 'EnvoyRequestError'
}

/** The largest `uint32`: `limit_remaining` of an unlimited descriptor, as the reference answers. */
export const MAX_UINT32 = 4_294_967_295

/** What deciding needs from the running service. */
export interface EnvoyContext {
  readonly algorithms: EnvoyAlgorithms
  readonly envoy: EnvoyConfig
  /** The global shadow mode. */
  readonly shadowMode: boolean
  /**
   * What a request gets when the store fails: `error` rethrows, `allow` answers OK, `deny`
   * OVER_LIMIT; `share` is decided by the escrow rules' engines themselves (no failure reaches here
   * but an unexpected one, which is rethrown).
   */
  readonly onStoreError: 'error' | 'allow' | 'deny' | 'share'
  readonly metrics: GatewayMetrics
  readonly shadowLog: ShadowLog
  readonly clock: () => number
  /** Puts the domain and each entry's key and value in the form the domain files were read in (`key-normalization`). */
  readonly normalizeKey: (key: string) => string
}

/** `req` with its domain and entries put in the form keys are compared in; `req` itself when that changes nothing. */
function normalized(req: EnvoyRequest, normalizeKey: (key: string) => string): EnvoyRequest {
  let changed = normalizeKey(req.domain) !== req.domain
  for (const d of req.descriptors)
    for (const e of d.entries) if (normalizeKey(e.key) !== e.key || normalizeKey(e.value) !== e.value) changed = true
  if (!changed) return req
  return {
    ...req,
    domain: normalizeKey(req.domain),
    descriptors: req.descriptors.map((d) => ({
      ...d,
      entries: d.entries.map((e) => ({ key: normalizeKey(e.key), value: normalizeKey(e.value) })),
    })),
  }
}

interface Planned {
  readonly algorithm: RateLimitAlgorithm | undefined
  readonly limit: EnvoyLimit | undefined
  readonly shadow: boolean
  readonly unlimited: boolean
  readonly hits: number
  readonly key: string
  readonly metricKey: string
  /** Where GET /v1/top counts it: the rule's stats key, the domain's own-limits bucket, or '' (not counted). */
  readonly topRule: string
}

/** Checks the shape of a request: what Envoy's proto validation and the reference refuse. */
function validate(req: EnvoyRequest, envoy: EnvoyConfig): void {
  if (req.domain === '') throw new EnvoyRequestError('rate limit domain must not be empty')
  if (req.descriptors.length === 0) throw new EnvoyRequestError('rate limit descriptor list must not be empty')
  if (req.descriptors.length > envoy.maxDescriptors)
    throw new EnvoyRequestError(
      `at most ${envoy.maxDescriptors} descriptors per request (envoy.max-descriptors), got ${req.descriptors.length}`,
    )
  req.descriptors.forEach((d, i) => {
    if (d.entries.length === 0) throw new EnvoyRequestError(`descriptors[${i}]: entries must not be empty`)
    d.entries.forEach((e, j) => {
      if (e.key === '') throw new EnvoyRequestError(`descriptors[${i}].entries[${j}]: key must not be empty`)
      // bounds the work of matching the domain files' wildcards, and of every key built from the entry
      const long = e.key.length > envoy.maxValueLength ? 'key' : e.value.length > envoy.maxValueLength ? 'value' : undefined
      if (long !== undefined)
        throw new EnvoyRequestError(
          `descriptors[${i}].entries[${j}].${long} must be at most ${envoy.maxValueLength} characters (envoy.max-value-length), got ${e[long].length}`,
        )
    })
  })
}

// The counter a descriptor's own limit counts in: the domain and the entries, each part escaped
// as the rules' counter keys are, so that no two descriptors share one (their algorithms have keys
// of their own, under "override").
function overrideKey(domain: string, entries: readonly EnvoyEntry[]): string {
  let key = escapePart(domain)
  for (const e of entries) key += `|${escapePart(e.key)}|${escapePart(e.value)}`
  return key
}

function metricKeyOf(domain: string, entries: readonly EnvoyEntry[]): string {
  return `${domain}.${entries.map((e) => (e.value === '' ? e.key : `${e.key}_${e.value}`)).join('.')}`
}

async function plan(ctx: EnvoyContext, req: EnvoyRequest): Promise<Planned[]> {
  const { algorithms } = ctx
  const matches = req.descriptors.map((d) => (d.limit === undefined ? algorithms.domains.match(req.domain, d.entries) : undefined))
  const kept = applyReplaces(matches)
  const planned: Planned[] = []
  for (let i = 0; i < req.descriptors.length; i++) {
    const d = req.descriptors[i] as EnvoyDescriptor
    const hits = d.hitsAddend ?? Math.max(1, req.hitsAddend)
    if (d.limit !== undefined && algorithms.domains.hasDomain(req.domain)) {
      // the descriptor's own limit: no name, no shadow mode, the default algorithm (as the reference);
      // 0 per unit (or none given) denies everything, as a domain file's rule of 0 does, with no algorithm
      const algorithm = d.limit.requestsPerUnit > 0 ? await algorithms.ofOverride(d.limit.requestsPerUnit, d.limit.unit) : undefined
      planned.push({
        algorithm,
        limit: { name: '', requestsPerUnit: d.limit.requestsPerUnit, unit: d.limit.unit },
        shadow: false,
        unlimited: false,
        hits,
        key: boundKey(overrideKey(req.domain, d.entries)),
        metricKey: boundKey(metricKeyOf(req.domain, d.entries)),
        topRule: OWN_LIMITS_RULE,
      })
      continue
    }
    const original = matches[i]
    const match = kept[i]
    const rule = match?.rule
    const unlimited = original?.rule.unlimited === true
    planned.push({
      algorithm: rule === undefined || rule.unlimited ? undefined : algorithms.ofRule(rule),
      limit:
        rule === undefined || rule.unlimited || rule.unit === undefined
          ? undefined
          : { name: rule.name ?? '', requestsPerUnit: rule.requestsPerUnit, unit: rule.unit },
      shadow: rule?.shadowMode === true,
      unlimited,
      hits,
      key: match?.counterKey ?? '',
      metricKey: match?.metricKey ?? '',
      topRule: rule?.statsKey ?? '',
    })
  }
  return planned
}

// The window's count after this request's hits. The fixed window counts a denied hit too (as the
// reference does), unless its cost alone is above the limit; the other algorithms count only what
// they admit, so a denial is read as "count + hits" for the near/over-limit arithmetic.
function countAfter(p: Planned, r: AlgorithmResult | undefined): number {
  if (r === undefined) return p.hits
  if (p.hits === 0 || r.allowed) return r.count
  const countsDenials = p.algorithm?.name === 'fixed-window' && p.hits <= r.limit
  return countsDenials ? r.count : r.count + p.hits
}

function resetSeconds(unit: RateLimitUnit, nowMs: number): number {
  const sec = UNIT_SECONDS[unit]
  return sec - (Math.floor(nowMs / 1000) % sec)
}

/**
 * Decides a ShouldRateLimit request: each descriptor's rule (the most specific match of the
 * domain files, after `replaces`; or the descriptor's own `limit`) counts its hits in the rule's
 * algorithm, and the answer has one status per descriptor in order, as envoyproxy/ratelimit
 * answers. Throws {@link EnvoyRequestError} for a bad request and a StoreError when the store
 * fails and `on-store-error` is `error`.
 */
export async function decideEnvoy(ctx: EnvoyContext, sent: EnvoyRequest): Promise<EnvoyResponse> {
  validate(sent, ctx.envoy)
  const req = normalized(sent, ctx.normalizeKey)
  const planned = await plan(ctx, req)
  const nowMs = ctx.clock()
  const results = await Promise.all(
    planned.map((p): AlgorithmResult | Error | Promise<AlgorithmResult | Error> | undefined => {
      if (p.algorithm === undefined || p.limit === undefined || p.limit.requestsPerUnit === 0) return undefined
      try {
        const r = p.hits === 0 ? p.algorithm.peek(p.key) : p.algorithm.check(p.key, p.hits)
        return r instanceof Promise ? r.catch((err: unknown) => err as Error) : r
      } catch (err) {
        return err as Error
      }
    }),
  )
  const statuses: EnvoyStatus[] = []
  let over = false
  let shadowDenied = false
  let minimum: { status: EnvoyStatus; windowS: number } | undefined
  for (let i = 0; i < planned.length; i++) {
    const p = planned[i] as Planned
    const r = results[i]
    if (p.unlimited) {
      statuses.push({ code: 'OK', currentLimit: undefined, limitRemaining: MAX_UINT32, durationUntilResetS: undefined })
      continue
    }
    if (p.limit === undefined) {
      statuses.push({ code: 'OK', currentLimit: undefined, limitRemaining: 0, durationUntilResetS: undefined })
      continue
    }
    const limit = p.limit
    const reset = resetSeconds(limit.unit, nowMs)
    let code: EnvoyCode
    let remaining: number
    if (r instanceof Error) {
      if (ctx.onStoreError === 'error' || ctx.onStoreError === 'share') throw r
      code = ctx.onStoreError === 'allow' ? 'OK' : 'OVER_LIMIT'
      remaining = code === 'OK' ? limit.requestsPerUnit : 0
      ctx.metrics.storeFailure(req.domain, p.metricKey)
    } else {
      // the count before and after these hits, as the reference's near/over-limit arithmetic wants them
      const after = countAfter(p, r)
      const isOver = r === undefined ? true : p.hits === 0 ? r.count > limit.requestsPerUnit : !r.allowed
      code = isOver ? 'OVER_LIMIT' : 'OK'
      remaining = isOver ? 0 : Math.max(0, Math.floor(limit.requestsPerUnit - after))
      ctx.metrics.ruleHits(req.domain, p.metricKey, limit.requestsPerUnit, ctx.envoy.nearLimitRatio, p.hits, after, isOver, p.shadow)
      if (p.hits > 0 && p.topRule !== '') topKeysOf(ctx.metrics)?.rule(req.domain, p.topRule).record(p.key, isOver, nowMs)
    }
    if (code === 'OVER_LIMIT' && p.shadow) {
      code = 'OK'
      shadowDenied = true
      ctx.shadowLog.denied(`rule ${req.domain} ${p.metricKey}`, { domain: req.domain, rule: p.metricKey })
    }
    const status: EnvoyStatus = { code, currentLimit: limit, limitRemaining: remaining, durationUntilResetS: reset }
    statuses.push(status)
    if (code === 'OVER_LIMIT') {
      over = true
      minimum = { status, windowS: UNIT_SECONDS[limit.unit] }
    } else if (!over && (minimum === undefined || remaining < minimum.status.limitRemaining))
      minimum = { status, windowS: UNIT_SECONDS[limit.unit] }
  }
  let overallCode: EnvoyCode = over ? 'OVER_LIMIT' : 'OK'
  if (over && ctx.shadowMode) {
    overallCode = 'OK'
    shadowDenied = true
    ctx.metrics.globalShadow(req.domain)
    ctx.shadowLog.denied(`domain ${req.domain}`, { domain: req.domain, global: true })
  }
  return { overallCode, statuses, headers: headersOf(ctx.envoy, minimum, overallCode === 'OVER_LIMIT'), shadowDenied }
}

const NO_HEADERS: ReadonlyArray<{ key: string; value: string }> = []

function headersOf(envoy: EnvoyConfig, minimum: { status: EnvoyStatus; windowS: number } | undefined, denied: boolean) {
  if (envoy.responseHeaders === 'off' || minimum === undefined) return NO_HEADERS
  const s = minimum.status
  const limit = s.currentLimit as EnvoyLimit
  const reset = s.durationUntilResetS ?? 0
  if (envoy.responseHeaders === 'x-ratelimit')
    return [
      { key: 'X-RateLimit-Limit', value: String(limit.requestsPerUnit) },
      { key: 'X-RateLimit-Remaining', value: String(s.limitRemaining) },
      { key: 'X-RateLimit-Reset', value: String(reset) },
    ]
  const headers = rateLimitHeaders(
    {
      allowed: !denied,
      name: limit.name === '' ? 'envoy' : limit.name,
      limit: limit.requestsPerUnit,
      window: minimum.windowS,
      remaining: s.limitRemaining,
      rate: limit.requestsPerUnit - s.limitRemaining,
      resetMs: reset * 1000,
      retryAfterMs: denied ? reset * 1000 : 0,
    },
    envoy.responseHeaders,
  )
  return Object.entries(headers).map(([key, value]) => ({ key, value }))
}
