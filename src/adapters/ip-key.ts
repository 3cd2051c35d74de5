/**
 * The key our middleware gives a client by default: its IP address, an IPv6 one grouped by its
 * subnet. A client commonly holds a whole IPv6 /64 (often a /56 or a /48) and can send each
 * request from another address of it; counted per address it would never be limited.
 * node:net says whether a string is an address; it has no way to read an address's bits, so the
 * parsing (of an address node:net accepted) and the canonical form are done here.
 */
import { isIPv6 } from 'node:net'
import { optionError } from './common.js'

/** The prefix length an IPv6 address is grouped by when `ipv6Subnet` is not set, as express-rate-limit's. */
export const DEFAULT_IPV6_SUBNET = 56

/**
 * The rate-limit key of a client address. IPv4 stays as it is. An IPv4-mapped IPv6 address
 * (`::ffff:1.2.3.4`, in any written form; also the deprecated `::1.2.3.4`) is its IPv4 address
 * (`1.2.3.4`), so a dual-stack socket and an IPv4 one count a client once. Another IPv6 address is, with `ipv6Subnet` a
 * prefix length, its network in canonical form (RFC 5952), zone id dropped:
 * `2001:DB8:1:2::5` and `2001:db8:1:2ff::1%eth0` are both `2001:db8:1:200::/56`; with `false`,
 * the address as given. Anything that is not an IP address is returned as it is.
 *
 * @example
 * createHonoMiddleware({ limit: 100, key: (c) => ipKey(getConnInfo(c).remote.address ?? 'unknown') })
 */
export function ipKey(address: string, ipv6Subnet: number | false = DEFAULT_IPV6_SUBNET): string {
  if (typeof address !== 'string' || !isIPv6(address)) return address
  const zone = address.indexOf('%')
  const text = zone < 0 ? address : address.slice(0, zone)
  const groups = ipv6Groups(text)
  // ::ffff:0:0/96 in any form, and the deprecated IPv4-compatible ::1.2.3.4 when written so (::1 is not one)
  if (groups.slice(0, 5).every((g) => g === 0) && (groups[5] === 0xffff || (groups[5] === 0 && text.includes('.')))) {
    const [hi, lo] = groups.slice(6) as [number, number]
    return `${hi >> 8}.${hi & 0xff}.${lo >> 8}.${lo & 0xff}`
  }
  if (ipv6Subnet === false) return address
  for (let i = 0; i < 8; i++) {
    const bits = Math.min(16, Math.max(0, ipv6Subnet - 16 * i))
    groups[i] = (groups[i] as number) & ((0xffff << (16 - bits)) & 0xffff)
  }
  return `${canonical(groups)}/${ipv6Subnet}`
}

/** Checks an `ipv6Subnet` option: a whole prefix length from 32 to 128, or false. */
export function checkIpv6Subnet(who: string, value: unknown): number | false {
  if (value === undefined) return DEFAULT_IPV6_SUBNET
  if (value === false || (typeof value === 'number' && Number.isInteger(value) && value >= 32 && value <= 128)) return value
  throw optionError(who, 'ipv6Subnet', 'a prefix length from 32 to 128 (bits of an IPv6 address), or false', value)
}

/** The eight 16-bit groups of an address node:net accepts as IPv6, zone id removed (with `::`, an IPv4 tail). */
function ipv6Groups(address: string): number[] {
  let text = address
  const lastColon = text.lastIndexOf(':')
  if (text.includes('.', lastColon)) {
    const [a, b, c, d] = text
      .slice(lastColon + 1)
      .split('.')
      .map(Number) as [number, number, number, number]
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const gap = text.indexOf('::')
  const part = (s: string) => (s === '' ? [] : s.split(':'))
  let written: string[]
  if (gap < 0) written = part(text)
  else {
    const head = part(text.slice(0, gap))
    const tail = part(text.slice(gap + 2))
    written = [...head, ...new Array<string>(8 - head.length - tail.length).fill('0'), ...tail]
  }
  return written.map((g) => parseInt(g, 16))
}

/** RFC 5952: lower-case hex without leading zeros, the longest run of two or more zero groups (the first on a tie) as `::`. */
function canonical(groups: readonly number[]): string {
  let start = -1
  let length = 1
  for (let i = 0; i < 8;) {
    let j = i
    while (j < 8 && groups[j] === 0) j++
    if (j - i > length) {
      start = i
      length = j - i
    }
    i = j === i ? i + 1 : j
  }
  const hex = groups.map((g) => g.toString(16))
  if (start < 0) return hex.join(':')
  return `${hex.slice(0, start).join(':')}::${hex.slice(start + length).join(':')}`
}
