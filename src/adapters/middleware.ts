/**
 * The framework-free part of our own middleware (Express, Fastify, Hono): options checked once,
 * then per request skip, key, cost, the decision and the headers, and the refund of a request
 * that failed or succeeded (refunds.ts) when the options ask for it.
 */
import type { Clock } from '../core/clock.js'
import { ConfigError, StoreError } from '../core/errors.js'
import { type HeaderMode, rateLimitHeaders } from '../core/headers.js'
import type { Decision, Limiter } from '../core/limiter.js'
import { RateLimiting } from '../core/rate-limiting.js'
import type { Strategy } from '../core/strategy.js'
import { chain, optionError, policyName, show, windowSizeOf, withWindowOption } from './common.js'
import { checkEngineOptions, defineOwn, type EngineOptions } from './engine.js'
import { checkIpv6Subnet, ipKey } from './ip-key.js'
import { RefundPolicy, type RefundOptions, type RequestRefund } from './refunds.js'

export type { RefundOptions, RequestRefund } from './refunds.js'

/** One limit of a middleware: at most `limit` hits per sliding `windowMs`. */
export interface LimitOption {
  /** Hits allowed per window. */
  readonly limit: number
  /** Window size in ms, a whole number (1 and up). */
  readonly windowMs: number
  /** Policy name in the draft-8 headers. @default express-rate-limit's, such as "100-in-1min" */
  readonly name?: string
  /**
   * Once this limit denies a client, every request of it is denied (429, `Retry-After` at the
   * block's end) until `blockMs` later, whatever the counts say; fleet-wide on a store
   * (docs/ARCHITECTURE.md, "Blocks"). @default no block
   */
  readonly blockMs?: number
}

/**
 * Options of our middleware, whatever the framework; `Req` is what the callbacks receive, `Ends`
 * what `requestWasSuccessful` receives.
 */
export interface MiddlewareOptions<Req, Ends extends readonly unknown[] = [Req]> extends EngineOptions, RefundOptions<Ends> {
  /** Limits checked together; the most restrictive decides. Or use `limit` and `windowMs`. */
  readonly limits?: readonly LimitOption[]
  /** Shorthand for one limit: hits per `windowMs`. */
  readonly limit?: number
  /** Shorthand for one limit: the window in ms. @default 60_000 */
  readonly windowMs?: number
  /** Shorthand for one limit: how long a client it denies stays blocked, ms (see {@link LimitOption.blockMs}). */
  readonly blockMs?: number
  /**
   * Who is limited: an IP address, a user id, an API key. @default the client IP (Express,
   * Fastify), an IPv6 one grouped by `ipv6Subnet`; required for Hono
   */
  readonly key?: (req: Req) => string | Promise<string>
  /**
   * The default key's IPv6 grouping: a client's addresses within one subnet of this prefix length
   * share one count (a client holding a /64 cannot rotate addresses to escape the limit), and an
   * IPv4-mapped address (`::ffff:1.2.3.4`) counts as its IPv4 address. A whole number from 32
   * to 128, or false for one count per address. Only with the default key (a `key` of your own
   * can call {@link ipKey}). @default 56, as express-rate-limit
   */
  readonly ipv6Subnet?: number | false
  /** How much one request costs, a number or a function of the request. @default 1 */
  readonly cost?: number | ((req: Req) => number | Promise<number>)
  /** Requests for which this returns true are not limited and get no headers. */
  readonly skip?: (req: Req) => boolean | Promise<boolean>
  /** The header family, or false for none. @default "draft-8" */
  readonly headers?: HeaderMode | false
  /**
   * Also send express-rate-limit's legacy `X-RateLimit-Limit/-Remaining/-Reset`; the reset is in
   * epoch s, the window's end, or when denied the moment a request is allowed again. @default false
   */
  readonly legacyHeaders?: boolean
  /** Add the draft-8 `pk` parameter (a hash of the key), as express-rate-limit does. @default false */
  readonly partitionKey?: boolean
  /** Whether a denied request still counts (Kong's and express-rate-limit's behaviour). @default true */
  readonly countDenied?: boolean
}

/** The outcome of one request that was not skipped. */
export interface Outcome {
  readonly key: string
  readonly decision: Decision
  /** Response headers to set, allowed or not. */
  readonly headers: Readonly<Record<string, string>>
  /** 429 when over the limit, 503 when the store failed and `onStoreError` is "deny". */
  readonly status: number
  /**
   * With `skipFailedRequests` or `skipSuccessfulRequests`, when the hit was counted: the
   * middleware settles it when the response ends.
   */
  readonly refund?: RequestRefund
}

const HEADER_MODES: readonly unknown[] = ['draft-6', 'draft-7', 'draft-8', 'draft-9', 'draft-10', 'kong']

/**
 * The framework-free part of our middleware: built once from the options (checked here, with
 * errors that name the option), then `run(req)` per request. Each step stays synchronous
 * unless a callback or the store answers a Promise, so a local limiter never waits a tick.
 */
export class MiddlewareCore<Req, Ends extends readonly unknown[] = [Req]> {
  readonly limiter: Limiter
  /** Undefined when neither skipFailedRequests nor skipSuccessfulRequests is on. */
  readonly refunds: RefundPolicy<Ends> | undefined
  private readonly clock: Clock
  private readonly owned: RateLimiting | undefined
  private readonly release: (() => void) | undefined
  private readonly key: (req: Req) => string | Promise<string>
  private readonly cost: number | ((req: Req) => number | Promise<number>)
  private readonly skip: ((req: Req) => boolean | Promise<boolean>) | undefined
  private readonly headerMode: HeaderMode | false
  private readonly legacyHeaders: boolean
  private readonly partitionKey: boolean

  /**
   * `clientAddress` is the framework's client IP, the default key once grouped (none: `key` is
   * required); `succeeded` is the default `requestWasSuccessful`: the framework's status below 400.
   */
  constructor(
    options: MiddlewareOptions<Req, Ends>,
    who: string,
    clientAddress: ((req: Req) => string) | undefined,
    succeeded: (...args: Ends) => boolean,
  ) {
    if (typeof options !== 'object' || options === null) throw optionError(who, 'options', 'an object', options)
    const user = checkEngineOptions(options, who)
    const limits = resolveLimits(options, who)
    const key = defaultKey(options, who, clientAddress) ?? options.key
    const { cost = 1, skip, headers = 'draft-8', legacyHeaders = false, partitionKey = false, countDenied = true } = options
    if (typeof key !== 'function') throw optionError(who, 'key', 'a function of the request returning a string', key)
    if (typeof cost === 'number' ? !Number.isFinite(cost) || cost < 0 : typeof cost !== 'function')
      throw optionError(who, 'cost', 'a number >= 0 or a function of the request', cost)
    if (skip !== undefined && typeof skip !== 'function') throw optionError(who, 'skip', 'a function of the request', skip)
    if (headers !== false && !HEADER_MODES.includes(headers))
      throw optionError(who, 'headers', 'false or one of draft-6, draft-7, draft-8, draft-9, draft-10, kong', headers)
    if (typeof legacyHeaders !== 'boolean') throw optionError(who, 'legacyHeaders', 'a boolean', legacyHeaders)
    if (typeof partitionKey !== 'boolean') throw optionError(who, 'partitionKey', 'a boolean', partitionKey)
    if (typeof countDenied !== 'boolean') throw optionError(who, 'countDenied', 'a boolean', countDenied)
    const windowSizes = [...new Set(limits.map((l) => l.window))]
    let rl: RateLimiting
    let name: string
    const option = options.limits === undefined ? 'windowMs' : 'limits[].windowMs'
    const windowsMs = limits.map((l) => l.windowMs).join(', ')
    if (user !== undefined) {
      rl = user
      name = options.namespace as string
    } else {
      rl = RateLimiting.newInstance(who)
      name = options.namespace ?? `${who}-${limits.map((l) => l.name).join('+')}`.replace(/\|/g, '_')
      withWindowOption(who, option, windowsMs, () => defineOwn(rl, name, windowSizes, options))
      this.owned = rl
      if (options.namespace === undefined && options.strategy !== undefined) this.release = claimDefaultName(who, options.strategy, name)
    }
    const specs = limits.map(({ limit, window, name, blockMs }) => ({ limit, window, name, ...(blockMs > 0 ? { blockMs } : {}) }))
    this.limiter = withWindowOption(who, option, windowsMs, () => rl.limiter({ namespace: name, limits: specs, countDenied }))
    // the legacy reset is an instant of the limiter's clock (a fake one in tests)
    this.clock = this.limiter.clock
    this.key = key
    this.cost = cost
    this.skip = skip
    this.headerMode = headers
    this.legacyHeaders = legacyHeaders
    this.partitionKey = partitionKey
    const maxCost = Math.min(...limits.map((l) => l.limit))
    this.refunds = RefundPolicy.of(options, who, succeeded, this.limiter, maxCost, user === undefined ? options.onError : undefined)
  }

  /** Decides one request; `undefined` when `skip` said so. */
  run(req: Req): Outcome | undefined | Promise<Outcome | undefined> {
    const skip = this.skip
    if (skip === undefined) return this.withoutSkip(req)
    return chain(skip(req), (skipped) => (skipped === true ? undefined : this.withoutSkip(req)))
  }

  /** Stops the middleware's own engine (after the refunds in flight); a no-op when it uses your `rateLimiting`. */
  async close(): Promise<void> {
    this.release?.()
    await this.refunds?.settled()
    await this.owned?.close()
  }

  /** Resolves once the refunds started so far are done (in synchronous mode, in the store). */
  settled(): Promise<void> {
    return this.refunds === undefined ? Promise.resolve() : this.refunds.settled()
  }

  private withoutSkip(req: Req): Outcome | Promise<Outcome> {
    return chain(this.key(req), (key) => {
      if (typeof key !== 'string' || key.length === 0)
        throw new TypeError(`the rate-limit key must be a non-empty string, got ${show(key)}; pass a key function`)
      const cost = this.cost
      const refunds = this.refunds
      if (refunds === undefined)
        return chain(typeof cost === 'number' ? cost : cost(req), (c) => chain(this.limiter.hit(key, c), (d) => this.outcome(key, d)))
      return chain(typeof cost === 'number' ? cost : cost(req), (c) => {
        // the hit's own time: its refund goes to the window that counted it
        const atMs = this.clock()
        return chain(this.limiter.hit(key, c), (d) => this.outcome(key, d, refunds.ticket(d, key, c, atMs)))
      })
    })
  }

  private outcome(key: string, decision: Decision, refund?: RequestRefund): Outcome {
    const headers =
      this.headerMode === false ? {} : rateLimitHeaders(decision, this.headerMode, this.partitionKey ? { partitionKey: key } : {})
    if (this.legacyHeaders) {
      headers['X-RateLimit-Limit'] = String(Math.floor(decision.limit))
      headers['X-RateLimit-Remaining'] = String(decision.remaining)
      // denied: the moment a request is allowed again, as with Retry-After; allowed (or denied
      // with no such moment, a listed key): the end of the window
      const { allowed, retryAfterMs } = decision
      const untilMs = !allowed && retryAfterMs > 0 && Number.isFinite(retryAfterMs) ? retryAfterMs : decision.resetMs
      headers['X-RateLimit-Reset'] = String(Math.ceil((this.clock() + untilMs) / 1000))
    }
    const status = decision.allowed ? 200 : decision.storeError instanceof StoreError ? 503 : 429
    return refund === undefined ? { key, decision, headers, status } : { key, decision, headers, status, refund }
  }
}

// The default namespaces of our middlewares on each strategy of this process, and how many use each
const defaultNames = new WeakMap<Strategy, Map<string, number>>()

/**
 * Records that a middleware counts under its default namespace `name` (derived from the limits)
 * on `strategy`, and warns when another of this process already does: they share their counts,
 * which without a strategy they would not. Once per collision; returns the release for close().
 */
function claimDefaultName(who: string, strategy: Strategy, name: string): () => void {
  let names = defaultNames.get(strategy)
  if (names === undefined) defaultNames.set(strategy, (names = new Map()))
  const users = (names.get(name) ?? 0) + 1
  names.set(name, users)
  if (users === 2)
    process.emitWarning(
      `${who}: two middlewares count under the default namespace "${name}" on one strategy, so they share their counts ` +
        '(without a strategy they would count apart). Give each its own namespace option, or the same one to share on purpose.',
      { type: 'RateLimitingWarning', code: 'RATELIMITING_SHARED_NAMESPACE' },
    )
  let released = false
  return () => {
    if (released) return
    released = true
    const left = (names.get(name) ?? 1) - 1
    if (left > 0) names.set(name, left)
    else names.delete(name)
  }
}

/** The default key, unless `key` is given: the client address, an IPv6 one grouped by `ipv6Subnet` (checked here). */
function defaultKey<Req>(
  options: Pick<MiddlewareOptions<Req>, 'key' | 'ipv6Subnet'>,
  who: string,
  clientAddress: ((req: Req) => string) | undefined,
): ((req: Req) => string) | undefined {
  const subnet = checkIpv6Subnet(who, options.ipv6Subnet)
  if (clientAddress === undefined || options.key !== undefined) {
    if (options.ipv6Subnet !== undefined)
      throw new ConfigError(
        'INVALID_OPTION',
        `${who}: ipv6Subnet groups the default key (the client IP) and is ignored with key; group the address in your key with ipKey(address, ${show(options.ipv6Subnet)})`,
      )
    return undefined
  }
  return (req) => ipKey(clientAddress(req), subnet)
}

interface ResolvedLimit {
  readonly limit: number
  /** Seconds, the engine's unit. */
  readonly window: number
  readonly windowMs: number
  readonly name: string
  /** 0 when the limit does not block. */
  readonly blockMs: number
}

function resolveLimits(
  options: Pick<MiddlewareOptions<unknown>, 'limits' | 'limit' | 'windowMs' | 'blockMs'>,
  who: string,
): ResolvedLimit[] {
  const { limits, limit, windowMs, blockMs } = options
  let list: readonly LimitOption[]
  if (limits !== undefined) {
    if (limit !== undefined || windowMs !== undefined || blockMs !== undefined)
      throw new ConfigError('INVALID_OPTION', `${who}: give either limits or limit/windowMs/blockMs, not both`)
    if (!Array.isArray(limits) || limits.length === 0) throw optionError(who, 'limits', 'a non-empty array of { limit, windowMs }', limits)
    list = limits
  } else {
    if (limit === undefined) throw new ConfigError('INVALID_OPTION', `${who}: limit (or limits) is required`)
    list = [{ limit, windowMs: windowMs ?? 60_000, ...(blockMs === undefined ? {} : { blockMs }) }]
  }
  return list.map((l, i) => {
    const at = limits === undefined ? '' : `limits[${i}].`
    if (typeof l !== 'object' || l === null) throw optionError(who, `limits[${i}]`, 'an object { limit, windowMs }', l)
    if (typeof l.limit !== 'number' || !Number.isFinite(l.limit) || l.limit <= 0)
      throw optionError(who, `${at}limit`, 'a positive number', l.limit)
    const window = windowSizeOf(who, `${at}windowMs`, l.windowMs)
    const name = l.name ?? policyName(l.limit, l.windowMs)
    if (typeof name !== 'string' || name.length === 0) throw optionError(who, `${at}name`, 'a non-empty string', name)
    if (l.blockMs !== undefined && (typeof l.blockMs !== 'number' || !Number.isFinite(l.blockMs) || l.blockMs <= 0))
      throw optionError(who, `${at}blockMs`, 'a positive number of ms', l.blockMs)
    return { limit: l.limit, window, windowMs: l.windowMs, name, blockMs: l.blockMs ?? 0 }
  })
}
