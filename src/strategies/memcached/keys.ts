/**
 * What the memcached strategy stores, and where: key names that fit memcached's rules, expiry
 * times that respect its 30-day rule, the per-window log of node counts, and blocks.
 */
import { createHash } from 'node:crypto'

/** memcached reads an exptime above this (30 days, in seconds) as an absolute epoch time. */
export const MAX_RELATIVE_TTL_SEC = 2_592_000
/** The largest exptime memcached holds: a signed 32-bit epoch second (January 2038). */
export const MAX_EXPTIME_SEC = 2 ** 31 - 1
/** protocol.txt: "a TTL of 1 will sometimes immediately expire". */
export const MIN_TTL_SEC = 2
/** memcached's longest key, in bytes. */
export const MAX_KEY_BYTES = 250

// UTF-16 code units, not UTF-8: injective for every JS string, lone surrogates included (UTF-8
// would write each as U+FFFD, and keys that differ only there would share an item).
function hash(text: string, chars: number): string {
  return createHash('sha256').update(Buffer.from(text, 'utf16le')).digest('base64url').slice(0, chars)
}

/** A key as the index of a window lists it: base64url of its UTF-16 code units (exact for any string). */
export function indexEntry(key: string): string {
  return `k${Buffer.from(key, 'utf16le').toString('base64url')} `
}

/** Reverses {@link indexEntry} for one listed key (without the `k` and the space). */
export function indexedKey(encoded: string): string {
  return Buffer.from(encoded, 'base64url').toString('utf16le')
}

/**
 * The exptime to send for an item that must live until `expiresAtMs` (engine time), at engine
 * time `nowMs`: a relative number of seconds (at least 2) up to 30 days, and beyond that the
 * absolute epoch second on the server's clock (`realNowMs`), since memcached would read a larger
 * relative value as an absolute time in 1970 and expire the item at once; 0 (no expiry) past
 * 2038, the last second it holds.
 */
export function exptime(expiresAtMs: number, nowMs: number, realNowMs: number = Date.now()): number {
  const ttlSec = Math.max(MIN_TTL_SEC, Math.ceil((expiresAtMs - nowMs) / 1000))
  if (ttlSec <= MAX_RELATIVE_TTL_SEC) return ttlSec
  // memcached reads exptime as a 32-bit second: a window that ends after 2038 never expires
  // (0) and leaves memory by memcached's LRU instead
  const absolute = Math.floor(realNowMs / 1000) + ttlSec
  return absolute <= MAX_EXPTIME_SEC ? absolute : 0
}

/** Builds key names under one prefix. Every name is printable ASCII without spaces, at most 250 bytes. */
export class KeySpace {
  readonly prefix: string
  // A hit names its current and previous window, and a sync names every key twice: the hash of
  // (namespace, key) is kept for a while rather than computed for each name.
  private readonly hashes = new Map<string, string>()

  constructor(prefix: string) {
    this.prefix = prefix
  }

  /**
   * The log of one key-window: `<prefix>w:<hash(namespace, key)>:<size>:<start>`. The hash
   * (22 base64url characters of SHA-256, 132 bits) makes any key, of any length and any
   * characters, fit; size and start stay readable for debugging.
   */
  window(namespace: string, key: string, windowSizeMs: number, windowStartMs: number): string {
    return `${this.prefix}w:${this.keyHash(namespace, key)}:${windowSizeMs}:${windowStartMs}`
  }

  /**
   * The block of one key: `<prefix>b:<hash(namespace, key)>`, the same hash as the key's window
   * logs. The `b:` keeps it apart from every log and index name (`w:`, `i:`).
   */
  block(namespace: string, key: string): string {
    return `${this.prefix}b:${this.keyHash(namespace, key)}`
  }

  private keyHash(namespace: string, key: string): string {
    const id = `${namespace}\u0000${key}`
    let h = this.hashes.get(id)
    if (h === undefined) {
      if (this.hashes.size >= 10_000) this.hashes.clear()
      h = hash(id, 22)
      this.hashes.set(id, h)
    }
    return h
  }

  /** One shard of the index of a namespace's window: the keys it holds, for `getCounters`. */
  index(namespace: string, windowSizeMs: number, windowStartMs: number, shard: number): string {
    return `${this.prefix}i:${hash(namespace, 22)}:${windowSizeMs}:${windowStartMs}:${shard}`
  }
}

/** The short tag a node's entries carry: 11 base64url characters of SHA-256 of its id. */
export function nodeTag(nodeId: string): string {
  let tag = tags.get(nodeId)
  if (tag === undefined) {
    if (tags.size >= 1024) tags.clear()
    tag = hash(nodeId, 11)
    tags.set(nodeId, tag)
  }
  return tag
}
const tags = new Map<string, string>()

/** A node's newest entry in a window log. */
export interface NodeEntry {
  seq: number
  count: number
}

/** A window log read back: the newest entry of every node, and the reset offset. */
export interface ParsedLog {
  readonly nodes: Map<string, NodeEntry>
  readonly offset: number
  /** Entries in the log (more than `nodes.size` + 1 means it can be compacted). */
  readonly entries: number
}

/**
 * Parses a window log: `<tag>,<seq>,<count>;` per push (a node's newest seq wins, so duplicates
 * and reordered appends change nothing; on equal seqs the larger count, so order never matters),
 * and `R,<offset>;` for a reset.
 */
export function parseLog(text: string): ParsedLog {
  const nodes = new Map<string, NodeEntry>()
  let offset = 0
  let entries = 0
  let from = 0
  while (from < text.length) {
    let end = text.indexOf(';', from)
    if (end < 0) end = text.length
    const entry = text.slice(from, end)
    from = end + 1
    const a = entry.indexOf(',')
    if (a < 0) continue
    entries++
    const tag = entry.slice(0, a)
    if (tag === 'R') {
      offset = Number(entry.slice(a + 1))
      continue
    }
    const b = entry.indexOf(',', a + 1)
    if (b < 0) continue
    const seq = Number(entry.slice(a + 1, b))
    const count = Number(entry.slice(b + 1))
    if (!Number.isFinite(seq) || !Number.isFinite(count)) continue
    const known = nodes.get(tag)
    if (known === undefined) nodes.set(tag, { seq, count })
    else if (seq > known.seq || (seq === known.seq && count > known.count)) {
      known.seq = seq
      known.count = count
    }
  }
  return { nodes, offset, entries }
}

/** The total of a parsed log: the nodes' counts plus the reset offset. */
export function logTotal(log: ParsedLog): number {
  let total = log.offset
  for (const e of log.nodes.values()) total += e.count
  return total
}

/** One push entry. */
export function logEntry(tag: string, seq: number, count: number): string {
  return `${tag},${seq},${count};`
}

/** The compacted form of a log: one entry per node and the offset, same meaning. */
export function compactLog(log: ParsedLog, offset: number = log.offset): string {
  let out = offset === 0 ? '' : `R,${offset};`
  for (const [tag, e] of log.nodes) out += logEntry(tag, e.seq, e.count)
  return out
}
