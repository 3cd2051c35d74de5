import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Logger } from 'pino'
import { StoreError } from '../../core/errors.js'
import { readJsonBody } from '../http-input.js'
import { isAnswerable, SHADOW_HEADER, send, sendError } from '../http-responses.js'
import type { ServiceMetrics } from '../metrics.js'
import type { Runtime } from '../runtime.js'
import { type EnvoyRequest, EnvoyRequestError, type EnvoyResponse } from './envoy-decide.js'
import { fromWire, type WireRequest } from './grpc-server.js'

// POST /json: envoyproxy/ratelimit's HTTP form of ShouldRateLimit. The body is a
// RateLimitRequest in the proto3 JSON mapping (lowerCamelCase or the proto's own field names),
// the answer a RateLimitResponse in the same mapping (fields at their default value left out).

type Json = Record<string, unknown>

const REQUEST_FIELDS = new Set(['domain', 'descriptors', 'hitsAddend', 'hits_addend'])
const DESCRIPTOR_FIELDS = new Set(['entries', 'limit', 'hitsAddend', 'hits_addend'])
const ENTRY_FIELDS = new Set(['key', 'value'])
const LIMIT_FIELDS = new Set(['requestsPerUnit', 'requests_per_unit', 'unit'])
// the RateLimitUnit enum of envoy/type/v3/ratelimit_unit.proto, by number
const UNIT_NAMES = ['UNKNOWN', 'SECOND', 'MINUTE', 'HOUR', 'DAY', 'MONTH', 'YEAR', 'WEEK']

function object(value: unknown, at: string, fields: Set<string>): Json {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new EnvoyRequestError(`${at} must be an object`)
  for (const key of Object.keys(value)) if (!fields.has(key)) throw new EnvoyRequestError(`${at}: unknown field ${JSON.stringify(key)}`)
  return value as Json
}

function field(o: Json, camel: string, snake: string): unknown {
  return o[camel] ?? o[snake]
}

function string(value: unknown, at: string): string | undefined {
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'string') throw new EnvoyRequestError(`${at} must be a string`)
  return value
}

// proto3 JSON: an integer is a number or a decimal string
function integer(value: unknown, at: string): number | undefined {
  if (value === undefined || value === null) return undefined
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 0) throw new EnvoyRequestError(`${at} must be a non-negative integer`)
  return n
}

function list(value: unknown, at: string): unknown[] {
  if (value === undefined || value === null) return []
  if (!Array.isArray(value)) throw new EnvoyRequestError(`${at} must be an array`)
  return value
}

/** Reads a RateLimitRequest in the proto3 JSON mapping; throws {@link EnvoyRequestError} naming the field. */
export function requestFromJson(body: unknown): EnvoyRequest {
  const o = object(body, 'the body', REQUEST_FIELDS)
  const wire: WireRequest = {
    domain: string(o.domain, 'domain') ?? '',
    hits_addend: integer(field(o, 'hitsAddend', 'hits_addend'), 'hitsAddend') ?? 0,
    descriptors: list(o.descriptors, 'descriptors').map((d, i) => {
      const at = `descriptors[${i}]`
      const desc = object(d, at, DESCRIPTOR_FIELDS)
      const limit = desc.limit === undefined || desc.limit === null ? undefined : object(desc.limit, `${at}.limit`, LIMIT_FIELDS)
      const hits = integer(field(desc, 'hitsAddend', 'hits_addend'), `${at}.hitsAddend`)
      const unit = limit?.unit
      return {
        entries: list(desc.entries, `${at}.entries`).map((e, j) => {
          const entry = object(e, `${at}.entries[${j}]`, ENTRY_FIELDS)
          return { key: string(entry.key, `${at}.entries[${j}].key`) ?? '', value: string(entry.value, `${at}.entries[${j}].value`) ?? '' }
        }),
        ...(limit !== undefined
          ? {
              limit: {
                requests_per_unit: integer(field(limit, 'requestsPerUnit', 'requests_per_unit'), `${at}.limit.requestsPerUnit`) ?? 0,
                unit: typeof unit === 'number' ? (UNIT_NAMES[unit] ?? String(unit)) : (string(unit, `${at}.limit.unit`) ?? 'UNKNOWN'),
              },
            }
          : {}),
        ...(hits !== undefined ? { hits_addend: { value: hits } } : {}),
      }
    }),
  }
  return fromWire(wire)
}

/** A RateLimitResponse in the proto3 JSON mapping, as envoyproxy/ratelimit's /json writes it. */
export function responseToJson(r: EnvoyResponse): Json {
  const out: Json = { overallCode: r.overallCode }
  out.statuses = r.statuses.map((s) => {
    const status: Json = { code: s.code }
    if (s.currentLimit !== undefined) {
      const limit: Json = {}
      if (s.currentLimit.name !== '') limit.name = s.currentLimit.name
      if (s.currentLimit.requestsPerUnit !== 0) limit.requestsPerUnit = s.currentLimit.requestsPerUnit
      limit.unit = s.currentLimit.unit.toUpperCase()
      status.currentLimit = limit
    }
    if (s.limitRemaining !== 0) status.limitRemaining = s.limitRemaining
    if (s.durationUntilResetS !== undefined) status.durationUntilReset = `${s.durationUntilResetS}s`
    return status
  })
  if (r.headers.length > 0) out.responseHeadersToAdd = r.headers.map((h) => ({ key: h.key, value: h.value }))
  return out
}

/** What answering `POST /json` needs from the service. */
export interface JsonContext {
  readonly decideEnvoy: (request: EnvoyRequest) => Promise<EnvoyResponse>
  readonly metrics: ServiceMetrics
  readonly logger: Logger
}

/**
 * Answers `POST /json` (the caller checked the route, the method and the token): Envoy's
 * ShouldRateLimit in the proto3 JSON mapping, 200 when not over the limit, 429 when over.
 */
export function answerEnvoyJson(req: IncomingMessage, res: ServerResponse, runtime: Runtime, ctx: JsonContext): void {
  const { metrics, logger } = ctx
  const example =
    'the body must be JSON such as {"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"10.0.0.1"}]}]}'
  readJsonBody(req, res, runtime.config.server.maxBodyBytes, example, (input) => {
    let request: EnvoyRequest
    try {
      request = requestFromJson(input)
    } catch (err) {
      sendError(res, 400, 'invalid_request', (err as Error).message)
      return
    }
    if (!isAnswerable(req)) return
    ctx.decideEnvoy(request).then(
      (r) => {
        const headers: Record<string, string> = {}
        if (r.shadowDenied) headers[SHADOW_HEADER] = 'denied'
        send(res, r.overallCode === 'OVER_LIMIT' ? 429 : 200, JSON.stringify(responseToJson(r)), headers)
      },
      (err: unknown) => {
        if (err instanceof EnvoyRequestError) sendError(res, 400, 'invalid_request', err.message)
        else if (err instanceof StoreError) {
          metrics.storeError(runtime.store.type, 'decide')
          sendError(res, 503, 'store_unavailable', `the ${runtime.store.type} store did not answer: ${err.message}`, {
            'retry-after': '1',
          })
        } else {
          logger.error({ err }, 'POST /json failed')
          sendError(res, 500, 'internal_error', 'the decision failed; see the service log')
        }
      },
    )
  })
}
