import { createHash } from 'node:crypto'
import type { Decision, LimitState } from './limiter.js'

/**
 * Header families:
 * - `draft-8` (also `draft-9`, `draft-10`: the syntax did not change): `RateLimit` and
 *   `RateLimit-Policy` as Structured Field lists, one item per limit.
 * - `draft-7`: `RateLimit: limit=, remaining=, reset=` and `RateLimit-Policy: <q>;w=<s>`.
 * - `draft-6`: `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`, `RateLimit-Policy`.
 * - `kong`: Kong's `X-RateLimit-Limit-<Window>` / `X-RateLimit-Remaining-<Window>` per limit,
 *   plus the draft-6 trio for the most restrictive limit.
 */
export type HeaderMode = 'draft-6' | 'draft-7' | 'draft-8' | 'draft-9' | 'draft-10' | 'kong'

/** Options of {@link rateLimitHeaders}. */
export interface HeaderOptions {
  /**
   * Adds the draft-8+ `pk` parameter: the first 12 hex digits of SHA-256(partitionKey), base64
   * encoded, as express-rate-limit sends it. Leave unset to send no partition key.
   */
  readonly partitionKey?: string
}

const KONG_WINDOW_NAMES: Readonly<Record<number, string>> = {
  1: 'Second',
  60: 'Minute',
  3600: 'Hour',
  86400: 'Day',
  2592000: 'Month',
  31536000: 'Year',
}

/** Whole seconds for a header, rounded up (RFC 9110 §10.2.3: Retry-After is whole seconds). */
function seconds(ms: number): number {
  return Math.max(0, Math.ceil(ms / 1000))
}

/** An SF String: quotes and backslashes escaped, other characters outside printable ASCII dropped. */
function sfString(value: string): string {
  return `"${value.replace(/[^\x20-\x7e]/g, '').replace(/[\\"]/g, '\\$&')}"`
}

function resetSeconds(state: LimitState, allowed: boolean): number {
  // when denied, t of a limit that holds the hit back is the wait (a sliding window adds quota
  // back before the window ends), so it matches Retry-After, which draft-8 §5 says should not
  // point earlier than t; a limit with room for the hit (no wait) keeps its window's reset
  if (!allowed && state.retryAfterMs > 0 && Number.isFinite(state.retryAfterMs)) return Math.max(1, seconds(state.retryAfterMs))
  return seconds(state.resetMs)
}

/**
 * The rate-limit response headers for a decision, in one of the {@link HeaderMode} families,
 * plus `Retry-After` (seconds) when the hit was denied.
 *
 * @example
 * const d = limiter.hit(ip)
 * for (const [name, value] of Object.entries(rateLimitHeaders(d, 'draft-8'))) res.setHeader(name, value)
 */
export function rateLimitHeaders(
  decision: Omit<Decision, 'reason'>,
  mode: HeaderMode = 'draft-8',
  options: HeaderOptions = {},
): Record<string, string> {
  const states = decision.policies ?? [decision]
  const headers: Record<string, string> = {}
  const limit = (s: LimitState) => Math.floor(s.limit)
  // the drafts' w is an Integer of seconds: a 1.5 s window is w=2, as express-rate-limit writes it
  const w = (s: LimitState) => Math.max(1, Math.ceil(s.window))
  switch (mode) {
    case 'draft-8':
    case 'draft-9':
    case 'draft-10': {
      const pk = options.partitionKey === undefined ? '' : `;pk=:${partitionKeyParam(options.partitionKey)}:`
      headers['RateLimit-Policy'] = states.map((s) => `${sfString(s.name)};q=${limit(s)};w=${w(s)}${pk}`).join(', ')
      headers.RateLimit = states.map((s) => `${sfString(s.name)};r=${s.remaining};t=${resetSeconds(s, decision.allowed)}`).join(', ')
      break
    }
    case 'draft-7':
      headers['RateLimit-Policy'] = states.map((s) => `${limit(s)};w=${w(s)}`).join(', ')
      headers.RateLimit = `limit=${limit(decision)}, remaining=${decision.remaining}, reset=${resetSeconds(decision, decision.allowed)}`
      break
    case 'draft-6':
      headers['RateLimit-Policy'] = states.map((s) => `${limit(s)};w=${w(s)}`).join(', ')
      Object.assign(headers, draft6Trio(decision))
      break
    case 'kong': {
      for (const s of states) {
        const suffix = KONG_WINDOW_NAMES[s.window] ?? String(s.window)
        headers[`X-RateLimit-Limit-${suffix}`] = String(limit(s))
        headers[`X-RateLimit-Remaining-${suffix}`] = String(s.remaining)
      }
      // Kong reports the limit with the fewest hits left, the larger window on a tie
      let chosen = states[0] as LimitState
      for (const s of states) {
        if (s.remaining < chosen.remaining || (s.remaining === chosen.remaining && s.window > chosen.window)) chosen = s
      }
      Object.assign(headers, draft6Trio(decision.allowed ? chosen : decision))
      break
    }
    default:
      throw new RangeError(`header mode must be draft-6, draft-7, draft-8, draft-9, draft-10 or kong, got ${String(mode)}`)
  }
  if (!decision.allowed && Number.isFinite(decision.retryAfterMs))
    headers['Retry-After'] = String(Math.max(1, seconds(decision.retryAfterMs)))
  return headers
}

function draft6Trio(state: LimitState & { allowed?: boolean }): Record<string, string> {
  return {
    'RateLimit-Limit': String(Math.floor(state.limit)),
    'RateLimit-Remaining': String(state.remaining),
    'RateLimit-Reset': String(resetSeconds(state, state.allowed ?? true)),
  }
}

/** The draft-8 `pk` value as express-rate-limit computes it. */
export function partitionKeyParam(key: string): string {
  return Buffer.from(createHash('sha256').update(key).digest('hex').slice(0, 12)).toString('base64')
}
