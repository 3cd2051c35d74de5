import type { ErrorObject } from 'ajv'
import { type Document, isMap, isScalar, isSeq, type LineCounter } from 'yaml'
import { CONFIG_SCHEMA } from './config-schema.js'

// How a config problem is reported: the key path, the reason, and where in the file it is.

type Raw = Record<string, unknown>

/** One problem in a config file. */
export interface ConfigIssue {
  /** Dotted key path, such as `rate-limiter.max-requests`; empty for the whole document. */
  readonly path: string
  readonly message: string
  /** 1-based line and column in the file, when known. */
  readonly line?: number
  readonly col?: number
}

/**
 * Thrown when a config file cannot be read, parsed or validated. The message lists every
 * problem as `<file>:<line>:<col>: <key path>: <reason>`.
 */
export class ConfigFileError extends Error {
  override readonly name = 'ConfigFileError'
  readonly file: string
  readonly issues: readonly ConfigIssue[]
  constructor(file: string, issues: readonly ConfigIssue[]) {
    super(issues.map((i) => formatIssue(file, i)).join('\n'))
    this.file = file
    this.issues = issues
  }
}

function formatIssue(file: string, issue: ConfigIssue): string {
  const where = issue.line === undefined ? file : `${file}:${issue.line}:${issue.col ?? 1}`
  return issue.path === '' ? `${where}: ${issue.message}` : `${where}: ${issue.path}: ${issue.message}`
}

/** A value as a reason quotes it: strings in JSON, containers by kind. */
export function describe(value: unknown): string {
  if (value === undefined) return 'nothing'
  if (typeof value === 'string') return JSON.stringify(value)
  if (Array.isArray(value)) return 'a list'
  if (typeof value === 'object' && value !== null) return 'a mapping'
  return String(value)
}

/** The value at a key path of a parsed document, or undefined. */
export function valueAt(raw: unknown, path: readonly string[]): unknown {
  let v = raw
  for (const segment of path) {
    if (typeof v !== 'object' || v === null) return undefined
    v = (v as Raw)[segment]
  }
  return v
}

/**
 * Turns an ajv error into a key path and a reason a person can act on; undefined for an error
 * that only sums up others (a bad policy name is reported by name, not again for `policies`).
 */
export function issueOf(error: ErrorObject, raw: unknown): { path: string[]; message: string } | undefined {
  const path =
    error.instancePath === ''
      ? []
      : error.instancePath
          .slice(1)
          .split('/')
          .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
  const params = error.params as Record<string, unknown>
  const got = describe(valueAt(raw, path))
  switch (error.keyword) {
    case 'additionalProperties': {
      const parent = valueAt(
        CONFIG_SCHEMA,
        path.flatMap((p) => ['properties', p]),
      )
      // an override's keys: its mapping sits under a user id, which the schema does not name
      const allowed =
        path[path.length - 2] === 'overrides'
          ? ['max-requests']
          : Object.keys((parent as { properties?: Raw } | undefined)?.properties ?? {})
      const hint = allowed.length > 0 ? `; expected one of ${allowed.join(', ')}` : ''
      return {
        path: [...path, String(params.additionalProperty)],
        message: `unknown key${hint}`,
      }
    }
    case 'required':
      if (path.length === 0 && params.missingProperty === 'store')
        return {
          path: ['store'],
          message: 'is required: say where counters live, such as store: { type: memory } (an empty file is not a config)',
        }
      return {
        path: [...path, String(params.missingProperty)],
        message: 'is required',
      }
    case 'enum':
      return {
        path,
        message: `must be one of ${(params.allowedValues as unknown[]).join(', ')}, got ${got}`,
      }
    case 'type':
      return {
        path,
        message: `must be ${params.type === 'integer' ? 'an integer' : params.type === 'object' ? 'a mapping' : `a ${String(params.type)}`}, got ${got}`,
      }
    case 'propertyNames':
      return undefined
    case 'pattern':
      if (error.propertyName !== undefined)
        return {
          path: [...path, error.propertyName],
          message: 'is not a valid policy name: use letters, digits, "_", "." and "-", at most 64, starting with a letter or digit',
        }
      if (path.join('.') === 'store.schema')
        return { path, message: `must be a plain identifier (letters, digits, "_", not starting with a digit, at most 63), got ${got}` }
      // the token itself stays out of the message: it is a secret
      if (path[0] === 'auth')
        return {
          path,
          message:
            'must be visible ASCII characters (spaces only between them): a request cannot present another in its Authorization header',
        }
      if (path[path.length - 1] === 'key-prefix')
        return {
          path,
          message: `must be 1 to 50 characters without braces or spaces, got ${got}`,
        }
      return {
        path,
        message: `must match ${String(params.pattern)}, got ${got}`,
      }
    default:
      return { path, message: `${error.message ?? 'is invalid'}, got ${got}` }
  }
}

/** Finds the line and column of a key path in the YAML document. */
export function locate(doc: Document, lines: LineCounter, path: readonly string[]): { line: number; col: number } | undefined {
  let node: unknown = doc.contents
  let offset: number | undefined = (node as { range?: [number] } | null)?.range?.[0]
  for (const segment of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => isScalar(p.key) && String(p.key.value) === segment)
      if (pair === undefined) break
      offset = (pair.key as { range?: [number] }).range?.[0] ?? offset
      node = pair.value
    } else if (isSeq(node)) {
      const item = node.items[Number(segment)] as { range?: [number] } | undefined
      if (item === undefined) break
      offset = item.range?.[0] ?? offset
      node = item
    } else break
  }
  if (offset === undefined) return undefined
  return lines.linePos(offset)
}
