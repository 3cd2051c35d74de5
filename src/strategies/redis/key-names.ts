/**
 * Names of the Redis keys: one HASH per key-window,
 * `<prefix>:{<namespace>:<key>}:<windowSize>:<windowStart>`.
 *
 * The braces are a Redis Cluster hash tag: the windows of one key share a slot (one script call
 * covers them), and different keys spread over the cluster (no hot slot per namespace). So that
 * the tag is exactly `<namespace>:<key>`, braces and `%` are percent-escaped in both parts, and so
 * is `:` in the namespace (which keeps namespace `a` with key `b:c` apart from namespace `a:b`
 * with key `c`). Keys without those characters, nearly all of them, are used as they are.
 */

const NAMESPACE_SPECIALS = /[%:{}]/
const NAMESPACE_SPECIALS_ALL = /[%:{}]/g
const KEY_SPECIALS = /[%{}]/
const KEY_SPECIALS_ALL = /[%{}]/g
const ESCAPED = /%(25|3A|7B|7D)/g
// Redis glob (SCAN MATCH) special characters, escaped with a backslash
const GLOB_SPECIALS = /[*?[\]\\]/g

function escapeChar(c: string): string {
  return `%${c.charCodeAt(0).toString(16).toUpperCase()}`
}

function unescapeChar(_match: string, hex: string): string {
  return String.fromCharCode(Number.parseInt(hex, 16))
}

/** Escapes a namespace for use inside the hash tag. */
export function encodeNamespace(namespace: string): string {
  return NAMESPACE_SPECIALS.test(namespace) ? namespace.replace(NAMESPACE_SPECIALS_ALL, escapeChar) : namespace
}

/** Escapes a rate-limited key for use inside the hash tag. */
export function encodeKey(key: string): string {
  return KEY_SPECIALS.test(key) ? key.replace(KEY_SPECIALS_ALL, escapeChar) : key
}

/** Reverses {@link encodeKey}. */
export function decodeKey(encoded: string): string {
  return encoded.includes('%') ? encoded.replace(ESCAPED, unescapeChar) : encoded
}

/** The start of every key name of a namespace: `<prefix>:{<namespace>:`. */
export function namespaceHead(prefix: string, namespace: string): string {
  return `${prefix}:{${encodeNamespace(namespace)}:`
}

/** The name of one key-window. */
export function windowName(head: string, encodedKey: string, windowSize: number, windowStart: number): string {
  return `${head}${encodedKey}}:${windowSize}:${windowStart}`
}

/** A SCAN MATCH pattern for every key name of a namespace. */
export function namespacePattern(head: string): string {
  return `${head.replace(GLOB_SPECIALS, '\\$&')}*`
}

/** A key-window parsed back from its name. */
export interface ParsedName {
  readonly key: string
  readonly windowSize: number
  readonly windowStart: number
}

const TAIL = /^\}:(\d+):(-?\d+)$/

/** Parses a name that starts with `head`; undefined when it is not one of ours. */
export function parseWindowName(name: string, head: string): ParsedName | undefined {
  if (!name.startsWith(head)) return undefined
  const close = name.indexOf('}', head.length)
  if (close < 0) return undefined
  const tail = TAIL.exec(name.slice(close))
  if (tail === null) return undefined
  return { key: decodeKey(name.slice(head.length, close)), windowSize: Number(tail[1]), windowStart: Number(tail[2]) }
}
