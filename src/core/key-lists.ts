import { BlockList, isIP } from 'node:net'
import { ConfigError } from './errors.js'
import type { Decision, LimitState } from './limiter-types.js'

/** Why a decision came out as it did. */
export type DecisionReason = 'limit' | 'blocked' | 'denylist' | 'allowlist' | 'store-error'

/** What a deny or allow list decided for a key: `undefined` when neither lists it. */
export type ListVerdict = 'denylist' | 'allowlist' | undefined

// One list: exact keys in a Set, addresses and CIDR ranges in node:net's BlockList (which
// matches an IPv4-mapped IPv6 address, ::ffff:1.2.3.4, against IPv4 rules and back).
class KeyList {
  private readonly exact = new Set<string>()
  private readonly ranges = new BlockList()
  private hasRanges = false

  constructor(entries: unknown, option: string) {
    if (!Array.isArray(entries))
      throw new ConfigError('INVALID_OPTION', `${option} must be an array of keys and CIDR ranges, got ${typeof entries}`)
    entries.forEach((entry: unknown, i: number) => {
      const problem = keyListEntryProblem(entry)
      if (problem !== undefined) throw new ConfigError('INVALID_OPTION', `${option}[${i}] ${JSON.stringify(entry)}: ${problem}`)
      const e = entry as string
      const slash = e.indexOf('/')
      const family = isIP(slash < 0 ? e : e.slice(0, slash))
      this.exact.add(e)
      if (family === 0) return
      this.hasRanges = true
      const type = family === 4 ? 'ipv4' : 'ipv6'
      if (slash < 0) this.ranges.addAddress(e, type)
      else this.ranges.addSubnet(e.slice(0, slash), Number(e.slice(slash + 1)), type)
    })
  }

  has(key: string): boolean {
    if (this.exact.has(key)) return true
    if (!this.hasRanges) return false
    const family = isIP(key)
    return family !== 0 && this.ranges.check(key, family === 4 ? 'ipv4' : 'ipv6')
  }
}

/**
 * Why `entry` cannot be a deny or allow list entry, or `undefined` when it can: a non-empty
 * string, and when it has the form `<address>/<prefix>`, a valid IPv4 or IPv6 address and a
 * whole prefix length within the family's bits. A string with a `/` whose left side is not an
 * IP address is an exact key.
 */
export function keyListEntryProblem(entry: unknown): string | undefined {
  if (typeof entry !== 'string' || entry.length === 0) return 'must be a non-empty string (a key, an IP address or a CIDR range)'
  const slash = entry.indexOf('/')
  if (slash < 0) return undefined
  const family = isIP(entry.slice(0, slash))
  if (family === 0) {
    // looks like an attempt at a range (digits and dots or colons): say so rather than take it as a key
    if (/^[0-9.:a-fA-F]+\/\d*$/.test(entry) && /[.:]/.test(entry.slice(0, slash)))
      return `"${entry.slice(0, slash)}" is not a valid IPv4 or IPv6 address`
    return undefined
  }
  const bits = family === 4 ? 32 : 128
  const prefix = entry.slice(slash + 1)
  if (!/^\d{1,3}$/.test(prefix) || Number(prefix) > bits)
    return `the prefix length must be a whole number from 0 to ${bits}, got "${prefix}"`
  return undefined
}

/**
 * A limiter's deny and allow lists, compiled once. Deny wins when both list a key. A key matches
 * an entry when it is the same string, or when both are IP addresses and the key's address is
 * the entry's or inside its range, whatever the written form (`2001:DB8::1`, `::ffff:10.0.0.1`).
 */
export class KeyLists {
  private readonly deny: KeyList | undefined
  private readonly allow: KeyList | undefined

  private constructor(deny: KeyList | undefined, allow: KeyList | undefined) {
    this.deny = deny
    this.allow = allow
  }

  /**
   * The compiled lists, or `undefined` when both are absent or empty (so the caller can skip
   * the check entirely). Throws a ConfigError naming the option, the index and the entry.
   */
  static compile(denyList: unknown, allowList: unknown, options = { deny: 'denyList', allow: 'allowList' }): KeyLists | undefined {
    const deny = denyList === undefined ? undefined : new KeyList(denyList, options.deny)
    const allow = allowList === undefined ? undefined : new KeyList(allowList, options.allow)
    const used = (l: KeyList | undefined, raw: unknown) => (l !== undefined && (raw as unknown[]).length > 0 ? l : undefined)
    const d = used(deny, denyList)
    const a = used(allow, allowList)
    return d === undefined && a === undefined ? undefined : new KeyLists(d, a)
  }

  /** `'denylist'` or `'allowlist'` when a list decides `key`, else `undefined`. */
  match(key: string): ListVerdict {
    if (this.deny?.has(key) === true) return 'denylist'
    if (this.allow?.has(key) === true) return 'allowlist'
    return undefined
  }
}

/** What {@link listedDecision} reads of a limiter's limits. */
interface ListedLimit {
  readonly name: string
  readonly limit: number
  readonly window: number
  readonly table: { msToWindowEnd(nowMs: number): number }
}

/**
 * The decision of a listed key, made without reading or counting anything (and so without a
 * store call in synchronous mode, where it comes as a resolved Promise): `rate` 0; denied with
 * `remaining` 0 and `retryAfterMs` Infinity (no wait admits it while it is listed), or allowed
 * with `remaining` the whole limit. With several limits, the deciding one is picked as usual.
 */
export function listedDecision(
  verdict: NonNullable<ListVerdict>,
  limits: readonly ListedLimit[],
  nowMs: number,
  synchronous: boolean,
): Decision | Promise<Decision> {
  const allowed = verdict === 'allowlist'
  const states: LimitState[] = limits.map((l) => ({
    name: l.name,
    limit: l.limit,
    window: l.window,
    remaining: allowed ? Math.floor(l.limit) : 0,
    rate: 0,
    resetMs: l.table.msToWindowEnd(nowMs),
    retryAfterMs: allowed ? 0 : Number.POSITIVE_INFINITY,
  }))
  let d = states[0] as LimitState
  for (const s of states) if (s.remaining < d.remaining || (s.remaining === d.remaining && s.window > d.window)) d = s
  const decision: Decision = { allowed, ...d, ...(states.length > 1 ? { policies: states } : {}), reason: verdict }
  return synchronous ? Promise.resolve(decision) : decision
}
