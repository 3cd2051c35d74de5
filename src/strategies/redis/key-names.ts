/**
 * Names of the Redis keys: one HASH per key-window,
 * `<prefix>:{<namespace>:<key>}:<windowSizeMs>:<windowStartMs>`, and one STRING per blocked key,
 * `<prefix>:{<namespace>:<key>}:b` (its block end; same hash tag, so one call covers both).
 *
 * The braces are a Redis Cluster hash tag: the windows of one key share a slot (one script call
 * covers them), and different keys spread over the cluster (no hot slot per namespace). So that
 * the tag is exactly `<namespace>:<key>`, braces and `%` are percent-escaped in both parts, and so
 * is `:` in the namespace (which keeps namespace `a` with key `b:c` apart from namespace `a:b`
 * with key `c`). Lone UTF-16 surrogates, which Redis's UTF-8 would turn into U+FFFD, become
 * `%uXXXX`. Keys without those characters, nearly all of them, are used as they are.
 */
import { hasLoneSurrogate } from '../../core/strategy.js'

const NAMESPACE_SPECIALS = /[%:{}]/
const NAMESPACE_SPECIALS_ALL = /[%:{}]/g
const KEY_SPECIALS = /[%{}]/
const KEY_SPECIALS_ALL = /[%{}]/g
const ESCAPED = /%(?:(25|3A|7B|7D)|u([0-9A-F]{4}))/g
const LONE_SURROGATES = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g
// Redis glob (SCAN MATCH) special characters, escaped with a backslash
const GLOB_SPECIALS = /[*?[\]\\]/g

function escapeChar(c: string): string {
  return `%${c.charCodeAt(0).toString(16).toUpperCase()}`
}

function escapeSurrogate(c: string): string {
  return `%u${c.charCodeAt(0).toString(16).toUpperCase()}`
}

function unescapeChar(_match: string, hex: string | undefined, unit: string | undefined): string {
  return String.fromCharCode(Number.parseInt((hex ?? unit) as string, 16))
}

// After the characters of `specials`: lone surrogates, rare enough to be looked for only when
// the cheap test says there is a surrogate at all.
function escape(text: string, specials: RegExp, specialsAll: RegExp): string {
  const escaped = specials.test(text) ? text.replace(specialsAll, escapeChar) : text
  return hasLoneSurrogate(escaped) ? escaped.replace(LONE_SURROGATES, escapeSurrogate) : escaped
}

/** Escapes a namespace for use inside the hash tag. */
export function encodeNamespace(namespace: string): string {
  return escape(namespace, NAMESPACE_SPECIALS, NAMESPACE_SPECIALS_ALL)
}

/** Escapes a rate-limited key for use inside the hash tag. */
export function encodeKey(key: string): string {
  return escape(key, KEY_SPECIALS, KEY_SPECIALS_ALL)
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
export function windowName(head: string, encodedKey: string, windowSizeMs: number, windowStartMs: number): string {
  return `${head}${encodedKey}}:${windowSizeMs}:${windowStartMs}`
}

/**
 * The name of a key's block. Same hash tag as the key's windows (one script call, one Cluster slot
 * for both); its tail `}:b` is no window's (`}:<size>:<start>`), so {@link parseWindowName} skips it.
 */
export function blockName(head: string, encodedKey: string): string {
  return `${head}${encodedKey}}:b`
}

/** A SCAN MATCH pattern for every key name of a namespace. */
export function namespacePattern(head: string): string {
  return `${head.replace(GLOB_SPECIALS, '\\$&')}*`
}

/** A key-window parsed back from its name. */
export interface ParsedName {
  readonly key: string
  readonly windowSizeMs: number
  readonly windowStartMs: number
}

const TAIL = /^\}:(\d+):(-?\d+)$/

/** Parses a name that starts with `head`; undefined when it is not one of ours. */
export function parseWindowName(name: string, head: string): ParsedName | undefined {
  if (!name.startsWith(head)) return undefined
  const close = name.indexOf('}', head.length)
  if (close < 0) return undefined
  const tail = TAIL.exec(name.slice(close))
  if (tail === null) return undefined
  return { key: decodeKey(name.slice(head.length, close)), windowSizeMs: Number(tail[1]), windowStartMs: Number(tail[2]) }
}
