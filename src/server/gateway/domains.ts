import { readdir, readFile, stat } from 'node:fs/promises'
import path from 'node:path'
import { ConfigFileError } from '../config-issues.js'
import { addChild, createNode, type DescriptorNode, matchTree } from './domains-match.js'
import { type RawDescriptor, type RawFile, type RawRateLimit, readDomainFile } from './domains-read.js'
import { toNfc } from '../key-normalization.js'
import { report } from './domains-yaml.js'

export { applyReplaces } from './domains-match.js'

// The domain config of envoyproxy/ratelimit (its README, "Configuration"; src/config/config_impl.go):
// YAML files, each one `domain` with a tree of `descriptors`, checked as the reference checks
// them and matched as its GetLimit matches.

/** A `rate_limit.unit`: every unit of the reference's RateLimitUnit enum (case-insensitive in YAML). */
export type RateLimitUnit = 'second' | 'minute' | 'hour' | 'day' | 'week' | 'month' | 'year'

/** Window length of each unit, seconds, as the reference's `UnitToDivider`: a month is 30 days, a year 365. */
export const UNIT_SECONDS: Readonly<Record<RateLimitUnit, number>> = Object.freeze({
  second: 1,
  minute: 60,
  hour: 3_600,
  day: 86_400,
  week: 604_800,
  month: 2_592_000,
  year: 31_536_000,
})

/** The algorithms a rule may choose (the service's `use-algo` values). */
export type RuleAlgorithm = 'fixed-window-algo' | 'sliding-window-algo' | 'sliding-window-counter-algo'

/** One `rate_limit` of a domain config, with what its descriptor says about it. */
export interface DomainRule {
  /** Unique within one {@link DomainConfigSet}. */
  readonly id: number
  readonly domain: string
  /** The file it came from. */
  readonly file: string
  /** Key path of its descriptor in the file, such as `descriptors.0.descriptors.1`. */
  readonly path: string
  /** The reference's stats key: `<domain>.<key>_<value>.<key2>`, one composite key per level. */
  readonly statsKey: string
  /**
   * The `key` and `value` of its descriptor and of the descriptors above it, top level first:
   * the entries a request's descriptor matches it with (`value` '' when the file gives none; a
   * value with `*` is a wildcard).
   */
  readonly entries: readonly DomainEntry[]
  /** `rate_limit.name`, the name `replaces` refers to. */
  readonly name: string | undefined
  /** `unlimited: true`: every request is allowed, and never counted. */
  readonly unlimited: boolean
  /** Undefined when unlimited. */
  readonly unit: RateLimitUnit | undefined
  /** 0 when unlimited (and 0 denies every request otherwise). */
  readonly requestsPerUnit: number
  /** `UNIT_SECONDS[unit]`; 0 when unlimited. */
  readonly windowSeconds: number
  /** `shadow_mode`: counted and reported, but the answer is always OK. */
  readonly shadowMode: boolean
  /** `quota_mode`: over the limit only when every quota descriptor of the request is. */
  readonly quotaMode: boolean
  /** Names of the rules this one replaces. */
  readonly replaces: readonly string[]
  /** `detailed_metric`: the metric key holds the request's values. */
  readonly detailedMetric: boolean
  /** `value_to_metric` on this rule's descriptor (ancestors' flags count too; see {@link DomainMatch.metricKey}). */
  readonly valueToMetric: boolean
  /** `share_threshold`: every value its wildcard matches counts in one counter. */
  readonly shareThreshold: boolean
  /** The descriptor's `metadata`, as plain data. */
  readonly metadata: Readonly<Record<string, unknown>> | undefined
  /**
   * Extension (not in the reference): `rate_limit.algorithm`, or the default. The reference
   * counts in fixed windows, which is `fixed-window-algo`.
   */
  readonly algorithm: RuleAlgorithm
  /**
   * Extension: `rate_limit.sync_rate` (seconds between syncs, as the service's `sync-rate`), or
   * the default; set only for `sliding-window-counter-algo`.
   */
  readonly syncRate: number | undefined
  /**
   * Extension: `rate_limit.escrow` (admit only against budgets the store granted, as the
   * service's `escrow`), undefined when the file gives none (then `envoy.escrow` applies).
   */
  readonly escrow: boolean | undefined
}

/** The rule a request's descriptor gets, and where its hits are counted and reported. */
export interface DomainMatch {
  readonly rule: DomainRule
  /**
   * The counter the hit goes to: `domain|key|=value|key2|=value2…`, each part escaped (`%` →
   * `%25`, `|` → `%7C`, a lone surrogate → `%uD800`), so two descriptors share it only when the
   * reference counts them together. An entry under a `share_threshold` wildcard is
   * `key|*pattern` (the descriptor's `key_value` pattern), whatever its value. Well-formed Unicode.
   * A key longer than 256 code units is shortened with a hash of the whole (`boundKey`).
   */
  readonly counterKey: string
  /** The reference's stats key for this hit (`detailed_metric` and `value_to_metric` change it; unsanitized; shortened as `counterKey`). */
  readonly metricKey: string
}

/** One `(key, value)` of a request's descriptor. */
export interface DomainEntry {
  readonly key: string
  readonly value: string
}

/** Whether a rule's counter admits only against granted budgets: its own `escrow`, else the default (`envoy.escrow`). */
export function ruleEscrow(rule: DomainRule, defaults: { readonly escrow: boolean }): boolean {
  return rule.algorithm === 'sliding-window-counter-algo' && (rule.escrow ?? defaults.escrow)
}

/** What a rule gets when its `rate_limit` does not choose. */
export interface DomainDefaults {
  readonly algorithm: RuleAlgorithm
  readonly syncRate: number | undefined
}

/** How files are combined. */
export interface DomainParseOptions {
  /**
   * Merge the descriptors of files that name the same domain (the reference's
   * `MERGE_DOMAIN_CONFIG=true`); otherwise a domain in two files is an error.
   * @default false
   */
  readonly mergeDomains?: boolean
  /**
   * Read domains, keys and values in Unicode's NFC, the form the service compares requests'
   * entries in under `key-normalization: nfc`.
   * @default false
   */
  readonly normalizeKeys?: boolean
}

// A file's domain, keys and values in NFC: two spellings of one value are then one descriptor
// (a duplicate), as they are one key in requests.
function inNfc(file: RawFile): RawFile {
  const descriptors = (list: readonly RawDescriptor[]): RawDescriptor[] =>
    list.map((d) => ({ ...d, key: toNfc(d.key), value: toNfc(d.value), descriptors: descriptors(d.descriptors) }))
  return { ...file, domain: toNfc(file.domain), descriptors: descriptors(file.descriptors) }
}

/** A parsed set of domain files: the rules, and the reference's lookup over them. Made by {@link parseDomainFiles}. */
export class DomainConfigSet {
  readonly files: readonly string[]
  readonly #domains: ReadonlyMap<string, DescriptorNode>
  readonly #rules: readonly DomainRule[]

  /** @internal use {@link parseDomainFiles} or {@link loadDomains} */
  constructor(files: readonly string[], domains: ReadonlyMap<string, DescriptorNode>, rules: readonly DomainRule[]) {
    this.files = files
    this.#domains = domains
    this.#rules = rules
  }

  /** The domains, in the order the files define them. */
  domains(): Iterable<string> {
    return this.#domains.keys()
  }

  /** Whether a file defines `domain` (the reference counts a request for an unknown domain apart). */
  hasDomain(domain: string): boolean {
    return this.#domains.has(domain)
  }

  /** Every rule, in file order. */
  rules(): Iterable<DomainRule> {
    return this.#rules
  }

  /**
   * The reference's GetLimit: the most specific rule for one descriptor's entries, or
   * undefined (no limit: an unknown domain, no matching descriptor, a descriptor without
   * `rate_limit`, or a request deeper or shallower than the rule).
   *
   * @example
   * const m = set.match('messaging', [{ key: 'message_type', value: 'marketing' }, { key: 'to_number', value: '2061111111' }])
   */
  match(domain: string, entries: readonly DomainEntry[]): DomainMatch | undefined {
    const root = this.#domains.get(domain)
    return root === undefined ? undefined : matchTree(domain, root, entries)
  }
}

interface Origin {
  readonly file: string
  readonly path: string
}

/**
 * Parses domain files (already read), in order. Throws a {@link ConfigFileError} for the first
 * file with problems, listing every problem of that file as `<file>:<line>:<col>: <key path>: <reason>`.
 *
 * Extensions (the reference has neither): a `rate_limit` may set `algorithm` (a
 * {@link RuleAlgorithm}) and, with `sliding-window-counter-algo`, `sync_rate` (seconds: 0 syncs
 * every hit, < 0 keeps counts local, otherwise at least 0.001) and `escrow` (true or false).
 * Without them, `defaults` apply (the service's `envoy` section for `escrow`).
 *
 * @example
 * const set = parseDomainFiles([{ file: 'edge.yaml', text: 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: second, requests_per_unit: 10 }\n' }], { algorithm: 'fixed-window-algo', syncRate: undefined })
 */
export function parseDomainFiles(
  files: readonly { file: string; text: string }[],
  defaults: DomainDefaults,
  options: DomainParseOptions = {},
): DomainConfigSet {
  const domains = new Map<string, { root: DescriptorNode; file: string; origins: Map<DescriptorNode, Map<string, Origin>> }>()
  const rules: DomainRule[] = []
  for (const { file, text } of files) {
    const read = readDomainFile(file, text, defaults)
    if (read instanceof ConfigFileError) throw read
    const parsed = options.normalizeKeys === true ? inNfc(read) : read
    const r = parsed.reader
    let entry = domains.get(parsed.domain)
    if (entry !== undefined && options.mergeDomains !== true) {
      report(
        r,
        ['domain'],
        parsed.domainNode,
        `duplicate domain "${parsed.domain}": ${entry.file} defines it too (mergeDomains merges the files of a domain)`,
      )
      throw new ConfigFileError(file, r.issues)
    }
    if (entry === undefined) {
      entry = { root: createNode('', undefined, { valueToMetric: false, shareThreshold: false }), file, origins: new Map() }
      domains.set(parsed.domain, entry)
    }
    const { root, origins } = entry
    const added: DomainRule[] = []
    const build = (parent: DescriptorNode, list: readonly RawDescriptor[], statsPrefix: string, above: readonly DomainEntry[]): void => {
      let seen = origins.get(parent)
      if (seen === undefined) origins.set(parent, (seen = new Map()))
      for (const d of list) {
        const composite = d.value === '' ? d.key : `${d.key}_${d.value}`
        const statsKey = statsPrefix + composite
        const before = seen.get(composite)
        if (before !== undefined) {
          const where = before.file === file ? before.path : `${before.path} in ${before.file}`
          report(r, d.path.split('.'), d.node, `duplicate descriptor ${statsKey} (the same key and value as ${where})`)
          continue
        }
        seen.set(composite, { file, path: d.path })
        const entries = Object.freeze([...above, Object.freeze({ key: d.key, value: d.value })])
        const rule = d.rateLimit === undefined ? undefined : ruleOf(rules.length + added.length, parsed.domain, file, d, statsKey, entries)
        if (rule !== undefined) added.push(rule)
        const node = createNode(composite, rule, { valueToMetric: d.valueToMetric, shareThreshold: d.shareThreshold })
        addChild(parent, node)
        build(node, d.descriptors, `${statsKey}.`, entries)
      }
    }
    build(root, parsed.descriptors, `${parsed.domain}.`, [])
    if (r.issues.length > 0) throw new ConfigFileError(file, r.issues)
    rules.push(...added)
  }
  // the wildcard matchers of large levels are built with the config, not by a request (wildcards.ts)
  const prepare = (node: DescriptorNode): void => {
    node.wildcards.prepare()
    for (const child of node.children.values()) prepare(child)
  }
  for (const { root } of domains.values()) prepare(root)
  return new DomainConfigSet(
    files.map((f) => f.file),
    new Map([...domains].map(([name, e]) => [name, e.root])),
    rules,
  )
}

function ruleOf(id: number, domain: string, file: string, d: RawDescriptor, statsKey: string, entries: readonly DomainEntry[]): DomainRule {
  const rl = d.rateLimit as RawRateLimit
  return Object.freeze({
    id,
    domain,
    file,
    path: d.path,
    statsKey,
    entries,
    name: rl.name,
    unlimited: rl.unlimited,
    unit: rl.unit,
    requestsPerUnit: rl.requestsPerUnit,
    windowSeconds: rl.unit === undefined ? 0 : UNIT_SECONDS[rl.unit],
    shadowMode: d.shadowMode,
    quotaMode: d.quotaMode,
    replaces: Object.freeze([...rl.replaces]),
    detailedMetric: d.detailedMetric,
    valueToMetric: d.valueToMetric,
    shareThreshold: d.shareThreshold,
    metadata: d.metadata,
    algorithm: rl.algorithm,
    syncRate: rl.syncRate,
    escrow: rl.escrow,
  })
}

/**
 * Reads and parses domain files: `target` is one YAML file, or a directory whose `*.yaml` and
 * `*.yml` files are read in name order (not recursively; names starting with `.` skipped).
 * Throws a {@link ConfigFileError} for a missing path, a directory without such files, or the
 * first file with problems.
 *
 * @example
 * const set = await loadDomains('/srv/runtime_data/current/config', { algorithm: 'fixed-window-algo', syncRate: undefined })
 */
export async function loadDomains(target: string, defaults: DomainDefaults, options: DomainParseOptions = {}): Promise<DomainConfigSet> {
  let names: string[]
  let isDirectory: boolean
  try {
    isDirectory = (await stat(target)).isDirectory()
    names = isDirectory
      ? (await readdir(target))
          .filter((n) => !n.startsWith('.') && /\.ya?ml$/.test(n))
          .sort()
          .map((n) => path.join(target, n))
      : [target]
  } catch (err) {
    throw new ConfigFileError(target, [{ path: '', message: unreadable(err) }])
  }
  const files: { file: string; text: string }[] = []
  for (const file of names) {
    try {
      // a directory named like a YAML file is not one
      if (isDirectory && !(await stat(file)).isFile()) continue
      files.push({ file, text: await readFile(file, 'utf8') })
    } catch (err) {
      throw new ConfigFileError(file, [{ path: '', message: unreadable(err) }])
    }
  }
  if (files.length === 0) throw new ConfigFileError(target, [{ path: '', message: 'the directory holds no *.yaml or *.yml file' }])
  return parseDomainFiles(files, defaults, options)
}

function unreadable(err: unknown): string {
  return (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'file not found' : `cannot read: ${(err as Error).message}`
}
