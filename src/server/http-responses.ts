import type { IncomingMessage, ServerResponse } from 'node:http'
import type { AlgorithmResult } from '../algorithms/types.js'
import { rateLimitHeaders } from '../core/headers.js'
import type { DecisionReason, ListVerdict } from '../core/key-lists.js'
import type { Decision } from '../core/limiter.js'
import type { Policy, Runtime } from './runtime.js'

// How the service writes its answers: JSON bodies, errors, and the RateLimit headers of decisions.

/** Response headers by lower-case name. */
export type Headers = Record<string, string>

// Node queues the answers of pipelined requests, so an answer that closes its connection (a 413)
// may wait behind one still being decided, and the socket stays writable meanwhile. The requests
// that arrived behind that answer can get none: each request gets its place on its connection,
// and each connection the place of the first request whose answer closes it.
interface Arrivals {
  next: number
  closesAfter: number
}
const connections = new WeakMap<object, Arrivals>()
const places = new WeakMap<IncomingMessage, number>()

/** Gives `req` its place on its connection; called once per request, as it arrives. */
export function noteArrival(req: IncomingMessage): void {
  let arrivals = connections.get(req.socket)
  if (arrivals === undefined) {
    arrivals = { next: 0, closesAfter: Number.POSITIVE_INFINITY }
    connections.set(req.socket, arrivals)
  }
  places.set(req, arrivals.next++)
}

/**
 * Whether an answer to `req` can still reach its client: not once its connection is closed, nor
 * when an answer to a request that arrived before it on the same connection closes it (perhaps
 * still queued). A request that cannot be answered is never decided, so never counted
 * (docs/SERVICE.md, "What a 503 means for the count").
 */
export function isAnswerable(req: IncomingMessage): boolean {
  if (!req.socket.writable) return false
  const closesAfter = connections.get(req.socket)?.closesAfter
  return closesAfter === undefined || (places.get(req) ?? 0) <= closesAfter
}

function closesConnection(req: IncomingMessage): void {
  const arrivals = connections.get(req.socket)
  const place = places.get(req)
  if (arrivals !== undefined && place !== undefined && place < arrivals.closesAfter) arrivals.closesAfter = place
}

/** Sends a JSON body (a string) with `headers`; `connection: close` among them marks the connection as closing. */
export function send(res: ServerResponse, status: number, body: string, headers: Headers): void {
  if (headers.connection === 'close') closesConnection(res.req)
  headers['content-type'] = 'application/json'
  headers['content-length'] = String(Buffer.byteLength(body))
  res.writeHead(status, headers)
  res.end(body)
}

/** Sends a decision: the cached RateLimit headers (a flat name, value list) plus the JSON body. */
export function sendDecision(res: ServerResponse, status: number, body: string, rateLimit: readonly string[]): void {
  // the body is ASCII JSON (numbers and booleans): its length is its byte length
  res.writeHead(status, [...rateLimit, 'content-type', 'application/json', 'content-length', String(body.length)])
  res.end(body)
}

/** Sends `{ error, message }`. */
export function sendError(res: ServerResponse, status: number, error: string, message: string, headers: Headers = {}): void {
  send(res, status, JSON.stringify({ error, message }), headers)
}

/** The JSON body of a decision, with what decided it (`reason`). */
export function resultBody(r: AlgorithmResult, reason: DecisionReason): string {
  return JSON.stringify({
    allowed: r.allowed,
    count: r.count,
    limit: r.limit,
    remaining: r.remaining,
    resetMs: r.resetMs,
    // JSON has no Infinity: null means the request can never be admitted (cost > limit, deny-listed)
    retryAfterMs: Number.isFinite(r.retryAfterMs) ? r.retryAfterMs : null,
    reason,
  })
}

/**
 * The answer to a key a policy's deny or allow list decides, made without the algorithm (nothing
 * read, nothing counted): count 0; denied with remaining 0 and retryAfterMs Infinity (null in
 * JSON: no wait admits it while listed), or allowed with the whole limit remaining.
 */
export function listedResult(limit: number, verdict: NonNullable<ListVerdict>): AlgorithmResult {
  const allowed = verdict === 'allowlist'
  return { allowed, count: 0, limit, remaining: allowed ? limit : 0, resetMs: 0, retryAfterMs: allowed ? 0 : Number.POSITIVE_INFINITY }
}

/** The name of the header that marks an answer a policy in shadow mode would have denied. */
export const SHADOW_HEADER = 'x-ratelimit-shadow'

/** The JSON body of a shadow denial: allowed, with `shadowDenied: true` and what the denial would have said. */
export function shadowBody(r: AlgorithmResult, reason: DecisionReason): string {
  return JSON.stringify({
    allowed: true,
    shadowDenied: true,
    count: r.count,
    limit: r.limit,
    remaining: r.remaining,
    resetMs: r.resetMs,
    retryAfterMs: Number.isFinite(r.retryAfterMs) ? r.retryAfterMs : null,
    reason,
  })
}

/** The headers of a shadow denial: the RateLimit headers without Retry-After, and {@link SHADOW_HEADER}: denied. */
export function shadowHeaders(list: readonly string[]): string[] {
  const out: string[] = []
  for (let i = 0; i < list.length; i += 2)
    if ((list[i] as string).toLowerCase() !== 'retry-after') out.push(list[i] as string, list[i + 1] as string)
  out.push(SHADOW_HEADER, 'denied')
  return out
}

// Header sets one generation of a policy's cache holds: at most twice this many are kept.
const HEADER_CACHE_GENERATION = 4096

/**
 * The RateLimit headers of decisions, by what they depend on (allowed, remaining, reset and
 * retry seconds): most answers repeat a set seen in the last seconds, so `rateLimitHeaders` runs
 * once per set instead of once per request. Two generations: when the current one is full it
 * becomes the previous one, and sets still in use move back to the current one. One cache per
 * policy of a runtime (a reload starts new ones).
 */
class HeaderCache {
  private current = new Map<string, readonly string[]>()
  private previous = new Map<string, readonly string[]>()
  constructor(
    private readonly policy: Policy,
    private readonly mode: Runtime['headerMode'],
  ) {}

  get(r: AlgorithmResult): readonly string[] {
    const resetSec = Math.ceil(r.resetMs / 1000)
    const retrySec = r.allowed ? 0 : Number.isFinite(r.retryAfterMs) ? Math.ceil(r.retryAfterMs / 1000) : -1
    const id = `${r.allowed ? 1 : 0}|${r.remaining}|${resetSec}|${retrySec}`
    let set = this.current.get(id)
    if (set !== undefined) return set
    set = this.previous.get(id) ?? this.build(r)
    if (this.current.size >= HEADER_CACHE_GENERATION) {
      this.previous = this.current
      this.current = new Map()
    }
    this.current.set(id, set)
    return set
  }

  private build(r: AlgorithmResult): readonly string[] {
    const decision: Decision = {
      allowed: r.allowed,
      name: this.policy.name,
      limit: r.limit,
      window: this.policy.windowSize,
      remaining: r.remaining,
      rate: r.count,
      resetMs: r.resetMs,
      retryAfterMs: r.retryAfterMs,
      reason: 'limit',
    }
    return Object.entries(rateLimitHeaders(decision, this.mode)).flat()
  }
}

const headerCaches = new WeakMap<Policy, HeaderCache>()

/** The RateLimit headers of a decision of `policy`, as a flat name, value list. */
export function rateLimitHeaderList(policy: Policy, r: AlgorithmResult, runtime: Runtime): readonly string[] {
  let cache = headerCaches.get(policy)
  if (cache === undefined) {
    cache = new HeaderCache(policy, runtime.headerMode)
    headerCaches.set(policy, cache)
  }
  return cache.get(r)
}
