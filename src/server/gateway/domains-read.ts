import { isMap, isScalar, LineCounter, parseDocument, type YAMLMap } from 'yaml'
import { ConfigFileError } from '../config-issues.js'
import type { DomainDefaults, RateLimitUnit, RuleAlgorithm } from './domains.js'
import {
  boolField,
  describeNode,
  type Field,
  type FileReader,
  fieldsOf,
  listField,
  MAX_ALIASES,
  type Path,
  report,
  stringField,
  TooManyAliases,
  deref,
  INT,
} from './domains-yaml.js'

// Reading one domain file of envoyproxy/ratelimit: YAML 1.1 as its yaml.v2 reads it, every key
// checked (its validateYamlKeys and loadDescriptors in src/config/config_impl.go), each problem
// reported with its key path, line and column.

const UNITS: readonly RateLimitUnit[] = ['second', 'minute', 'hour', 'day', 'week', 'month', 'year']
const ALGORITHMS: readonly RuleAlgorithm[] = ['fixed-window-algo', 'sliding-window-algo', 'sliding-window-counter-algo']

const ROOT_KEYS = ['domain', 'descriptors']
const DESCRIPTOR_KEYS = [
  'key',
  'value',
  'rate_limit',
  'descriptors',
  'shadow_mode',
  'quota_mode',
  'detailed_metric',
  'value_to_metric',
  'share_threshold',
  'metadata',
]
const RATE_LIMIT_KEYS = ['unit', 'requests_per_unit', 'unlimited', 'name', 'replaces', 'algorithm', 'sync_rate', 'escrow']
const REPLACES_KEYS = ['name']
// where each key the reference accepts belongs: it accepts any of them at any level and ignores
// the misplaced ones, which hides a mistake such as `unit` outside `rate_limit`
const HOME: Record<string, string> = {
  ...Object.fromEntries(DESCRIPTOR_KEYS.map((k) => [k, 'a descriptor'])),
  ...Object.fromEntries(RATE_LIMIT_KEYS.map((k) => [k, 'rate_limit'])),
  domain: 'the top level',
  descriptors: 'the top level or a descriptor',
  name: 'rate_limit or a replaces entry',
}
/** @internal */
export interface RawRateLimit {
  readonly unit: RateLimitUnit | undefined
  readonly requestsPerUnit: number
  readonly unlimited: boolean
  readonly name: string | undefined
  readonly replaces: readonly string[]
  readonly algorithm: RuleAlgorithm
  readonly syncRate: number | undefined
  readonly escrow: boolean | undefined
}

/** @internal */
export interface RawDescriptor {
  readonly key: string
  readonly value: string
  readonly path: string
  readonly node: unknown
  readonly rateLimit: RawRateLimit | undefined
  readonly descriptors: readonly RawDescriptor[]
  readonly shadowMode: boolean
  readonly quotaMode: boolean
  readonly detailedMetric: boolean
  readonly valueToMetric: boolean
  readonly shareThreshold: boolean
  readonly metadata: Record<string, unknown> | undefined
}

/** @internal */
export interface RawFile {
  readonly file: string
  readonly domain: string
  readonly domainNode: unknown
  readonly descriptors: readonly RawDescriptor[]
  readonly reader: FileReader
}

/** Reports each field not in `allowed`; returns the fields by name. */
function checkKeys(r: FileReader, fields: readonly Field[], allowed: readonly string[], at: Path): Map<string, Field> {
  const byName = new Map<string, Field>()
  for (const f of fields) {
    if (allowed.includes(f.key)) byName.set(f.key, f)
    else {
      const home = HOME[f.key]
      const hint = home === undefined ? '' : ` (${f.key} belongs in ${home})`
      report(r, [...at, f.key], f.keyNode, `unknown key${hint}; expected one of ${allowed.join(', ')}`)
    }
  }
  return byName
}

function readRateLimit(r: FileReader, f: Field, at: Path, defaults: DomainDefaults): RawRateLimit | undefined {
  const fields = fieldsOf(r, f.value, at, 'unit and requests_per_unit, or unlimited: true')
  if (fields === undefined) return undefined
  const byName = checkKeys(r, fields, RATE_LIMIT_KEYS, at)
  const before = r.issues.length
  const unlimited = boolField(r, byName.get('unlimited'), [...at, 'unlimited'])
  const unitField = byName.get('unit')
  const unitText = stringField(r, unitField, [...at, 'unit'])
  let unit: RateLimitUnit | undefined
  if (unitText === '') {
    if (!unlimited && unitField === undefined)
      report(r, [...at, 'unit'], f.value, `is required: one of ${UNITS.join(', ')} (or unlimited: true)`)
    else if (!unlimited) report(r, [...at, 'unit'], unitField?.value, `must be one of ${UNITS.join(', ')}, got nothing`)
  } else if (unitText !== undefined) {
    // the reference upper-cases the text and looks it up in its RateLimitUnit enum
    const name = unitText.toUpperCase().toLowerCase()
    if (!(UNITS as string[]).includes(name))
      report(r, [...at, 'unit'], unitField?.value, `must be one of ${UNITS.join(', ')}, got ${JSON.stringify(unitText)}`)
    else if (unlimited)
      report(r, [...at, 'unit'], unitField?.value, 'must not be given with unlimited: true (an unlimited rule has no window)')
    else unit = name as RateLimitUnit
  }

  const rpu = byName.get('requests_per_unit')
  let requestsPerUnit = 0
  if (rpu !== undefined) {
    const node = deref(r, rpu.value)
    const source = isScalar(node) ? (node.source ?? '') : ''
    const n = isScalar(node) ? node.value : undefined
    if (typeof n === 'number' && INT.test(source) && n >= 0 && n <= 0xffff_ffff) requestsPerUnit = n
    else report(r, [...at, 'requests_per_unit'], node, `must be an integer from 0 to 4294967295, got ${describeNode(r, node)}`)
  } else if (!unlimited) report(r, [...at, 'requests_per_unit'], f.value, 'is required (0 denies every request)')

  const name = stringField(r, byName.get('name'), [...at, 'name'])
  const replaces: string[] = []
  listField(r, byName.get('replaces'), [...at, 'replaces']).forEach((item, i) => {
    const itemAt = [...at, 'replaces', i]
    const itemFields = fieldsOf(r, item, itemAt, 'name: <the name of the rule to replace>')
    if (itemFields === undefined) return
    const nameField = checkKeys(r, itemFields, REPLACES_KEYS, itemAt).get('name')
    const replaced = stringField(r, nameField, [...itemAt, 'name'])
    if (replaced === undefined) return
    if (replaced === '') report(r, [...itemAt, 'name'], nameField?.value ?? item, 'must name the rule to replace (empty)')
    else if (replaced === name)
      report(r, [...itemAt, 'name'], nameField?.value, `is this rule's own name ("${name}"): a rule cannot replace itself`)
    else replaces.push(replaced)
  })

  const algorithmField = byName.get('algorithm')
  let algorithm = defaults.algorithm
  if (algorithmField !== undefined) {
    const text = stringField(r, algorithmField, [...at, 'algorithm'])
    if (text !== undefined && (ALGORITHMS as readonly string[]).includes(text)) algorithm = text as RuleAlgorithm
    else if (text !== undefined)
      report(r, [...at, 'algorithm'], algorithmField.value, `must be one of ${ALGORITHMS.join(', ')}, got ${JSON.stringify(text)}`)
  }
  const syncField = byName.get('sync_rate')
  let syncRate = algorithm === 'sliding-window-counter-algo' ? defaults.syncRate : undefined
  if (syncField !== undefined) {
    const node = deref(r, syncField.value)
    const n = isScalar(node) ? node.value : undefined
    if (typeof n !== 'number' || !Number.isFinite(n))
      report(r, [...at, 'sync_rate'], node, `must be a number of seconds, got ${describeNode(r, node)}`)
    else if (algorithm !== 'sliding-window-counter-algo')
      report(r, [...at, 'sync_rate'], syncField.keyNode, `only sliding-window-counter-algo syncs; this rule uses ${algorithm}`)
    else if (n > 0 && n < 0.001)
      report(r, [...at, 'sync_rate'], node, `must be 0 (every hit), < 0 (local only) or at least 0.001 s, got ${n}`)
    else syncRate = n
  }
  const escrowField = byName.get('escrow')
  let escrow: boolean | undefined
  if (escrowField !== undefined) {
    escrow = boolField(r, escrowField, [...at, 'escrow'])
    // the service checks the sync rate and the store when it loads the files (envoy-service.ts)
    if (escrow === true && algorithm !== 'sliding-window-counter-algo' && !unlimited)
      report(r, [...at, 'escrow'], escrowField.keyNode, `only sliding-window-counter-algo has escrow; this rule uses ${algorithm}`)
  }
  if (unlimited)
    for (const key of ['algorithm', 'sync_rate', 'escrow'] as const) {
      const extra = byName.get(key)
      if (extra !== undefined) report(r, [...at, key], extra.keyNode, 'has no effect on an unlimited rule (nothing is counted)')
    }
  if (r.issues.length > before || name === undefined) return undefined
  return {
    unit: unlimited ? undefined : unit,
    requestsPerUnit: unlimited ? 0 : requestsPerUnit,
    unlimited,
    name: name || undefined,
    replaces,
    algorithm,
    syncRate,
    escrow,
  }
}

function readDescriptor(r: FileReader, node: unknown, at: Path, defaults: DomainDefaults): RawDescriptor | undefined {
  const fields = fieldsOf(r, node, at, 'a descriptor with key, and optionally value, rate_limit, descriptors')
  if (fields === undefined) return undefined
  const byName = checkKeys(r, fields, DESCRIPTOR_KEYS, at)
  const before = r.issues.length
  const keyField = byName.get('key')
  const key = stringField(r, keyField, [...at, 'key'])
  if (key === '')
    report(
      r,
      [...at, 'key'],
      keyField?.value ?? deref(r, node),
      keyField === undefined ? 'is required: every descriptor has a key' : 'must not be empty',
    )
  const value = stringField(r, byName.get('value'), [...at, 'value'])
  const rateLimitField = byName.get('rate_limit')
  const rlNode = rateLimitField === undefined ? undefined : deref(r, rateLimitField.value)
  // `rate_limit:` with nothing after it is no rate limit, as in the reference
  const rateLimit =
    rateLimitField === undefined || rlNode === null || (isScalar(rlNode) && rlNode.value === null)
      ? undefined
      : readRateLimit(r, rateLimitField, [...at, 'rate_limit'], defaults)
  const shareThreshold = boolField(r, byName.get('share_threshold'), [...at, 'share_threshold'])
  const composite = value === '' || value === undefined ? key : `${key}_${value}`
  if (shareThreshold && key !== undefined && value !== undefined && !composite?.includes('*'))
    report(
      r,
      [...at, 'share_threshold'],
      byName.get('share_threshold')?.keyNode,
      `needs a wildcard value (one with "*"); ${JSON.stringify(composite)} has none`,
    )
  let metadata: Record<string, unknown> | undefined
  const metadataField = byName.get('metadata')
  if (metadataField !== undefined) {
    const m = deref(r, metadataField.value)
    if (isMap(m)) metadata = metadataOf(r, m, [...at, 'metadata'])
    else if (!(m === null || (isScalar(m) && m.value === null)))
      report(r, [...at, 'metadata'], m, `must be a mapping, got ${describeNode(r, m)}`)
  }
  const descriptors = readDescriptors(r, byName.get('descriptors'), [...at, 'descriptors'], defaults)
  const flags = {
    shadowMode: boolField(r, byName.get('shadow_mode'), [...at, 'shadow_mode']),
    quotaMode: boolField(r, byName.get('quota_mode'), [...at, 'quota_mode']),
    detailedMetric: boolField(r, byName.get('detailed_metric'), [...at, 'detailed_metric']),
    valueToMetric: boolField(r, byName.get('value_to_metric'), [...at, 'value_to_metric']),
  }
  if (r.issues.length > before || key === undefined || value === undefined) return undefined
  return { key, value, path: at.join('.'), node: deref(r, node), rateLimit, descriptors, shareThreshold, metadata, ...flags }
}

function metadataOf(r: FileReader, m: YAMLMap, at: Path): Record<string, unknown> | undefined {
  try {
    return m.toJS(r.doc, { maxAliasCount: 100 }) as Record<string, unknown>
  } catch (err) {
    report(r, at, m, `cannot be read: ${(err as Error).message}`)
    return undefined
  }
}

function readDescriptors(r: FileReader, f: Field | undefined, at: Path, defaults: DomainDefaults): RawDescriptor[] {
  const out: RawDescriptor[] = []
  listField(r, f, at).forEach((item, i) => {
    const d = readDescriptor(r, item, [...at, i], defaults)
    if (d !== undefined) out.push(d)
  })
  return out
}

/**
 * Parses and checks one file; its problems come back as a ConfigFileError, not thrown.
 * @internal
 */
export function readDomainFile(file: string, text: string, defaults: DomainDefaults): RawFile | ConfigFileError {
  const lines = new LineCounter()
  // YAML 1.1, as the reference's yaml.v2: `yes`/`on` are booleans, `010` is octal, `<<` merges
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: true, version: '1.1' })
  if (doc.errors.length > 0)
    return new ConfigFileError(
      file,
      doc.errors.map((e) => ({
        path: '',
        message: `invalid YAML: ${(e.message.split('\n')[0] ?? '').replace(/ at line \d+, column \d+:?$/, '')}`,
        ...(e.linePos?.[0] === undefined ? {} : { line: e.linePos[0].line, col: e.linePos[0].col }),
      })),
    )
  const r: FileReader = { file, doc, lines, issues: [], aliases: 0 }
  try {
    const top = deref(r, doc.contents)
    if (top === null || top === undefined || (isScalar(top) && top.value === null)) {
      // the reference reads an empty file as a config without a domain
      r.issues.push({ path: 'domain', message: 'is required: the file is empty (each file holds one domain and its descriptors)' })
      return new ConfigFileError(file, r.issues)
    }
    const fields = fieldsOf(r, top, [], 'domain and descriptors')
    if (fields === undefined) return new ConfigFileError(file, r.issues)
    const byName = checkKeys(r, fields, ROOT_KEYS, [])
    const domainField = byName.get('domain')
    const domain = stringField(r, domainField, ['domain'])
    if (domain === '')
      report(
        r,
        ['domain'],
        domainField?.value ?? top,
        domainField === undefined ? 'is required: every file names its domain' : 'must not be empty',
      )
    const descriptors = readDescriptors(r, byName.get('descriptors'), ['descriptors'], defaults)
    if (r.issues.length > 0 || domain === undefined) return new ConfigFileError(file, r.issues)
    return { file, domain, domainNode: domainField?.value, descriptors, reader: r }
  } catch (err) {
    if (!(err instanceof TooManyAliases)) throw err
    return new ConfigFileError(file, [...r.issues, { path: '', message: `more than ${MAX_ALIASES} alias uses; expand the anchors` }])
  }
}
