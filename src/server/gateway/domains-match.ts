import { createHash } from 'node:crypto'
import type { DomainEntry, DomainMatch, DomainRule } from './domains.js'
import { WildcardSet } from './wildcards.js'

// The lookup half of the envoyproxy/ratelimit domain config: the descriptor tree that
// domains.ts builds and GetLimit over it (the reference's src/config/config_impl.go).

/**
 * One descriptor of the tree (or a domain's root). Built by domains.ts, then only read.
 * @internal
 */
export interface DescriptorNode {
  /** The children by composite key: `key_value`, or `key` for a descriptor without a value. */
  readonly children: Map<string, DescriptorNode>
  /**
   * The composite keys of the children that hold a `*` (each also a key in `children`), in
   * config order: the first match wins (wildcards.ts matches them in one pass over the value).
   */
  readonly wildcards: WildcardSet
  readonly rule: DomainRule | undefined
  readonly valueToMetric: boolean
  readonly shareThreshold: boolean
  /** This node's composite key, `key` or `key_value`. */
  readonly compositeKey: string
}

/** A new empty node; `addChild` links it in. @internal */
export function createNode(
  compositeKey: string,
  rule: DomainRule | undefined,
  flags: { valueToMetric: boolean; shareThreshold: boolean },
): DescriptorNode {
  return { children: new Map(), wildcards: new WildcardSet(), rule, compositeKey, ...flags }
}

/** Links `child` under `parent`; the caller has checked that its composite key is new there. @internal */
export function addChild(parent: DescriptorNode, child: DescriptorNode): void {
  parent.children.set(child.compositeKey, child)
  // a key-only descriptor with a `*` in its key is a pattern too: the reference matches
  // patterns against the request's whole `key_value`
  if (child.compositeKey.includes('*')) parent.wildcards.add(child.compositeKey)
}

const NEEDS_ESCAPE = /[%|\uD800-\uDFFF]/

/**
 * Escapes a counter-key part so that `|` never occurs in it and the result is well-formed
 * Unicode: `%` → `%25`, `|` → `%7C`, a lone surrogate → `%uD800`. Injective, since every `%`
 * of the result starts an escape.
 */
export function escapePart(s: string): string {
  if (!NEEDS_ESCAPE.test(s)) return s
  let out = ''
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i)
    if (c === 0x25) out += '%25'
    else if (c === 0x7c) out += '%7C'
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      out += s.slice(i, i + 2)
      i++
    } else if (c >= 0xd800 && c <= 0xdfff) out += `%u${c.toString(16).toUpperCase()}`
    else out += s[i]
  }
  return out
}

/** The longest counter key or `rule` label kept as it is, in UTF-16 code units (docs/GATEWAY.md, "Keys"). */
export const MAX_KEY_LENGTH = 256

/**
 * `key` itself when at most {@link MAX_KEY_LENGTH} long; otherwise its start, `%#` and the
 * SHA-256 of the whole key (base64url), {@link MAX_KEY_LENGTH} at most in all: a descriptor value
 * of any length then holds a key of bounded size, and two long keys stay apart. Injective on
 * counter keys, since `%#` is in no escaped key (every `%` of {@link escapePart}'s starts an escape).
 */
export function boundKey(key: string): string {
  if (key.length <= MAX_KEY_LENGTH) return key
  const hash = createHash('sha256').update(key).digest('base64url')
  let cut = MAX_KEY_LENGTH - 2 - hash.length
  // never split a surrogate pair
  if ((key.charCodeAt(cut - 1) & 0xfc00) === 0xd800) cut--
  return `${key.slice(0, cut)}%#${hash}`
}

/**
 * How the entry at one level found its node: `key_value` is a child's composite key (`value`),
 * a child's `*` pattern matched `key_value` (`wildcard`), or only `key` is (`key`, the
 * per-value default).
 */
type Via = 'value' | 'wildcard' | 'key'

/**
 * The reference's GetLimit for one descriptor: walks the tree one entry per level, preferring
 * `key_value`, then the level's `*` patterns in config order, then `key`. A rule applies only at
 * the level of the request's last entry: a request with more entries than the config's depth,
 * or one that ends above a rule, gets no limit.
 * @internal
 */
export function matchTree(domain: string, root: DescriptorNode, entries: readonly DomainEntry[]): DomainMatch | undefined {
  if (entries.length === 0) return undefined
  let level = root
  const nodes: DescriptorNode[] = []
  const via: Via[] = []
  for (const entry of entries) {
    const composite = `${entry.key}_${entry.value}`
    let next = level.children.get(composite)
    let how: Via = 'value'
    if (next === undefined && level.wildcards.size > 0) {
      const i = level.wildcards.firstMatch(composite)
      if (i >= 0) {
        next = level.children.get(level.wildcards.pattern(i))
        how = 'wildcard'
      }
    }
    if (next === undefined) {
      next = level.children.get(entry.key)
      how = 'key'
    }
    if (next === undefined) return undefined
    nodes.push(next)
    via.push(how)
    level = next
  }
  const rule = level.rule
  if (rule === undefined) return undefined
  return {
    rule,
    counterKey: boundKey(counterKeyOf(domain, entries, nodes, via)),
    metricKey: boundKey(metricKeyOf(domain, rule, entries, nodes, via)),
  }
}

/**
 * `domain|key|=value|key|=value…`, each part escaped; an entry counted under a shared
 * threshold is `key|*pattern` instead, `pattern` being the matched descriptor's composite key.
 */
function counterKeyOf(domain: string, entries: readonly DomainEntry[], nodes: readonly DescriptorNode[], via: readonly Via[]): string {
  let key = escapePart(domain)
  for (let i = 0; i < entries.length; i++) {
    const entry = entries[i] as DomainEntry
    const node = nodes[i] as DescriptorNode
    // A value spelled exactly as the pattern (`files/*`) reaches the shared descriptor by its
    // composite key; the reference's cache key then holds the same text as for the values the
    // pattern matched, so it counts them together, and so do we. A key-only fallback does not.
    const shared = node.shareThreshold && via[i] !== 'key'
    key += `|${escapePart(entry.key)}|${shared ? `*${escapePart(node.compositeKey)}` : `=${escapePart(entry.value)}`}`
  }
  return key
}

/**
 * The reference's stats key for this hit: with `detailed_metric` on the rule's descriptor,
 * every `key_value` of the request (a shared wildcard's entry as `key_pattern`); otherwise per
 * level `key_value` for a configured value, `key_pattern` for a wildcard (`key_value` with
 * `value_to_metric`), and `key` for a key-only match (`key_value` with `value_to_metric`).
 */
function metricKeyOf(
  domain: string,
  rule: DomainRule,
  entries: readonly DomainEntry[],
  nodes: readonly DescriptorNode[],
  via: readonly Via[],
): string {
  // the reference tracks a shared pattern only when the entry matched through the pattern
  const patternOf = (i: number, entry: DomainEntry): string | undefined => {
    const node = nodes[i] as DescriptorNode
    return via[i] === 'wildcard' && node.shareThreshold ? trimPrefix(node.compositeKey, `${entry.key}_`) : undefined
  }
  let key = domain
  if (rule.detailedMetric) {
    const anyShared = entries.some((e, i) => patternOf(i, e) !== undefined)
    entries.forEach((entry, i) => {
      const pattern = patternOf(i, entry)
      if (pattern !== undefined) key += `.${entry.key}_${pattern}`
      else if (!anyShared) key += `.${entry.key}_${entry.value}`
      else key += entry.value === '' ? `.${entry.key}` : `.${entry.key}_${entry.value}`
    })
    return key
  }
  entries.forEach((entry, i) => {
    const node = nodes[i] as DescriptorNode
    let value = ''
    if (via[i] === 'wildcard') {
      value = patternOf(i, entry) ?? (node.valueToMetric ? entry.value : trimPrefix(node.compositeKey, `${entry.key}_`))
    } else if (via[i] === 'value') value = entry.value
    else if (node.valueToMetric) value = entry.value
    key += value === '' ? `.${entry.key}` : `.${entry.key}_${value}`
  })
  return key
}

function trimPrefix(s: string, prefix: string): string {
  return s.startsWith(prefix) ? s.slice(prefix.length) : s
}

/**
 * Drops the matches that another match of the same request replaces, as the reference's
 * service does across one request's descriptors: every `replaces` name of every match
 * (unlimited ones included) is collected, then each limited match whose rule has one of those
 * names becomes undefined. An unlimited match is never dropped (the reference answers it OK
 * before replacing), and two rules that replace each other both drop.
 *
 * @example
 * const limits = applyReplaces(descriptors.map((entries) => set.match('example7', entries)))
 */
export function applyReplaces(matches: readonly (DomainMatch | undefined)[]): (DomainMatch | undefined)[] {
  const replaced = new Set<string>()
  for (const m of matches) if (m !== undefined) for (const name of m.rule.replaces) replaced.add(name)
  if (replaced.size === 0) return [...matches]
  return matches.map((m) =>
    m === undefined || m.rule.unlimited || m.rule.name === undefined || !replaced.has(m.rule.name) ? m : undefined,
  )
}
