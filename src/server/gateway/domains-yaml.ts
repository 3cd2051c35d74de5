import { type Document, isAlias, isMap, isScalar, isSeq, type LineCounter, type Scalar } from 'yaml'
import { type ConfigIssue, describe } from '../config-issues.js'

// Reading YAML nodes as the reference's yaml.v2 does (strings from any scalar's text, `<<` merge
// keys, no floats), with every problem reported at its key path, line and column; bounded aliases.

/** A key path in a file. */
export type Path = readonly (string | number)[]

// an alias bomb (an anchor referring to anchors, many times over) must not stall the load
export const MAX_ALIASES = 1_000

/** @internal */
export interface FileReader {
  readonly file: string
  readonly doc: Document
  readonly lines: LineCounter
  readonly issues: ConfigIssue[]
  aliases: number
}

/** @internal */
export function report(r: FileReader, at: Path, node: unknown, message: string): void {
  const offset = (node as { range?: [number] } | null | undefined)?.range?.[0]
  r.issues.push({ path: at.join('.'), message, ...(offset === undefined ? {} : r.lines.linePos(offset)) })
}

/** The node an alias stands for (counted against MAX_ALIASES), or the node itself. */
export function deref(r: FileReader, node: unknown): unknown {
  if (!isAlias(node)) return node
  r.aliases++
  if (r.aliases > MAX_ALIASES) throw new TooManyAliases()
  return node.resolve(r.doc)
}

export class TooManyAliases extends Error {}

export interface Field {
  readonly key: string
  readonly keyNode: unknown
  readonly value: unknown
}

/**
 * The fields of a mapping, with `<<` merge keys expanded (YAML 1.1, as the reference's
 * yaml.v2 reads), or undefined after reporting a node that is not a mapping.
 */
export function fieldsOf(r: FileReader, node: unknown, at: Path, what: string): Field[] | undefined {
  const map = deref(r, node)
  if (!isMap(map)) {
    report(r, at, map ?? node, `must be a mapping (${what}), got ${describeNode(r, map)}`)
    return undefined
  }
  const own: Field[] = []
  const merged: Field[] = []
  for (const pair of map.items) {
    const key = deref(r, pair.key)
    const keyValue = isScalar(key) ? key.value : undefined
    if (typeof keyValue === 'symbol') {
      const source = deref(r, pair.value)
      for (const item of isSeq(source) ? source.items : [source])
        merged.push(...(fieldsOf(r, item, [...at, '<<'], 'a merged mapping') ?? []))
    } else if (typeof keyValue === 'string') own.push({ key: keyValue, keyNode: key, value: pair.value })
    else report(r, [...at, String(keyValue ?? describeNode(r, key))], key, `keys must be strings, got ${describeNode(r, key)}`)
  }
  const seen = new Set(own.map((f) => f.key))
  // the mapping's own keys win over merged ones, and earlier merged mappings over later ones
  for (const f of merged) {
    if (seen.has(f.key)) continue
    seen.add(f.key)
    own.push(f)
  }
  return own
}

export function describeNode(r: FileReader, node: unknown): string {
  if (node === undefined || node === null) return 'nothing'
  if (isMap(node)) return 'a mapping'
  if (isSeq(node)) return 'a list'
  if (isScalar(node)) {
    if (typeof node.value === 'number' || typeof node.value === 'boolean') return node.source ?? String(node.value)
    if (node.value === null) return 'null'
    return describe(typeof node.value === 'string' ? node.value : (node.source ?? String(node.value)))
  }
  return describe((node as { toJS?: (d: Document) => unknown }).toJS?.(r.doc))
}

// yaml.v2 reads 1.5, 1e3 and .inf as floats, which the reference rejects anywhere
const FLOAT = /^[-+]?(?:\.[0-9_]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$/
export const INT = /^[-+]?(?:0b[01_]+|0x[0-9a-fA-F_]+|0[0-7_]+|[0-9][0-9_]*)$/

/**
 * A string field as the reference's yaml.v2 reads it: any scalar's text (`value: 200` is
 * "200", `value: yes` is "yes"), "" for null or missing; a float or a collection is an error.
 */
export function stringField(r: FileReader, f: Field | undefined, at: Path): string | undefined {
  if (f === undefined) return ''
  const node = deref(r, f.value) as Scalar | undefined
  if (node === null || node === undefined || (isScalar(node) && node.value === null)) return ''
  if (isScalar(node)) {
    if (typeof node.value === 'string') return node.value
    const source = node.source ?? String(node.value)
    if (typeof node.value === 'number' && FLOAT.test(source) && !INT.test(source)) {
      report(r, at, node, `must be a string, got the number ${source}; quote it ("${source}")`)
      return undefined
    }
    return source
  }
  report(r, at, node, `must be a string, got ${describeNode(r, node)}`)
  return undefined
}

export function boolField(r: FileReader, f: Field | undefined, at: Path): boolean {
  if (f === undefined) return false
  const node = deref(r, f.value)
  if (node === null || node === undefined || (isScalar(node) && node.value === null)) return false
  if (isScalar(node) && typeof node.value === 'boolean') return node.value
  report(r, at, node, `must be true or false, got ${describeNode(r, node)}`)
  return false
}

export function listField(r: FileReader, f: Field | undefined, at: Path): unknown[] {
  if (f === undefined) return []
  const node = deref(r, f.value)
  if (node === null || node === undefined || (isScalar(node) && node.value === null)) return []
  if (isSeq(node)) return node.items
  report(r, at, node, `must be a list, got ${describeNode(r, node)}`)
  return []
}
