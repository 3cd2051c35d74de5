import { readFile } from 'node:fs/promises'
import { Ajv, type ErrorObject } from 'ajv'
import { type Document, isMap, isScalar, isSeq, LineCounter, parseDocument } from 'yaml'
import type { HeaderMode } from '../core/headers.js'
import { ALGORITHMS, CONFIG_SCHEMA, type FAIL_POLICIES, type LOG_LEVELS, type STORE_TYPES } from './config-schema.js'

/** A `use-algo` value. */
export type AlgorithmName = (typeof ALGORITHMS)[number]
/** A `store.type` value. */
export type StoreType = (typeof STORE_TYPES)[number]
/** A `rate-limiter.on-store-error` value: 503, admit, or deny when the store fails. */
export type FailPolicy = (typeof FAIL_POLICIES)[number]
/** A `log-level` value. */
export type LogLevel = (typeof LOG_LEVELS)[number]

/** One named policy: an algorithm, a limit and a window. */
export interface PolicyConfig {
  readonly name: string
  readonly algo: AlgorithmName
  /** Requests per window. */
  readonly maxRequests: number
  /** Window length, seconds. */
  readonly windowSize: number
  /** Seconds between syncs of the counter algorithm (> 0 periodic, 0 every hit, < 0 local only). */
  readonly syncRate: number
}

/** The `store` section. */
export interface StoreConfig {
  readonly type: StoreType
  /** redis (`redis://…`) or postgres (`postgres://…`) URL. */
  readonly url?: string
  /** Redis Cluster seed nodes (`host:port` or URLs). */
  readonly nodes?: readonly string[]
  /** memcached servers (`host:port`). */
  readonly servers?: readonly string[]
  /** Longest wait for one store call, ms. */
  readonly timeoutMs: number
}

/** The `server` section. */
export interface ServerConfig {
  readonly host: string
  readonly port: number
  readonly maxBodyBytes: number
  readonly maxUserIdLength: number
  readonly headers: HeaderMode
  readonly requestTimeoutMs: number
  readonly shutdownTimeoutMs: number
}

/** Bearer tokens; with either list non-empty, every /v1 request needs one. */
export interface AuthConfig {
  readonly tokens: readonly string[]
  readonly adminTokens: readonly string[]
}

/** A validated service configuration. */
export interface ServiceConfig {
  /** The file it came from, or "<built-in default>". */
  readonly source: string
  readonly logLevel: LogLevel
  readonly server: ServerConfig
  readonly keyPrefix: string
  readonly onStoreError: FailPolicy
  /** Every policy by name; "default" (the `rate-limiter` section) first. */
  readonly policies: ReadonlyMap<string, PolicyConfig>
  readonly store: StoreConfig
  readonly auth: AuthConfig | undefined
}

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

/** The source name of the built-in default config. */
export const BUILT_IN_SOURCE = '<built-in default>'

/**
 * The built-in default config, used when no `--config` is given: the memory store, the seed's
 * default algorithm, 100 requests per 60 s, on 127.0.0.1:8080. examples/ratelimiting.yaml is
 * the same config, documented.
 */
export const DEFAULT_CONFIG_DOCUMENT = {
  server: { host: '127.0.0.1', port: 8080 },
  'rate-limiter': {
    'use-algo': 'sliding-window-algo',
    'max-requests': 100,
    'window-size': 60,
  },
  store: { type: 'memory' },
} as const

/** Environment variables read by {@link parseConfig}. */
export interface ConfigEnv {
  /** Overrides `store.url` (redis, postgres), `store.nodes` (redis, when comma-separated) or `store.servers` (memcached, comma-separated). */
  readonly RATELIMITING_STORE_URL?: string
  /** Comma-separated bearer tokens, replacing `auth.tokens`. */
  readonly RATELIMITING_AUTH_TOKENS?: string
  /** Comma-separated admin tokens, replacing `auth.admin-tokens`. */
  readonly RATELIMITING_ADMIN_TOKENS?: string
  readonly [name: string]: string | undefined
}

const ajv = new Ajv({ allErrors: true, strict: true })
const validate = ajv.compile(CONFIG_SCHEMA)

type Raw = Record<string, unknown>

function section(raw: Raw, name: string): Raw {
  const value = raw[name]
  return typeof value === 'object' && value !== null ? (value as Raw) : {}
}

function list(value: string | undefined): string[] | undefined {
  if (value === undefined || value.trim() === '') return undefined
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0)
}

/** Applies the environment overrides to a raw (parsed, not yet validated) document. */
function applyEnv(raw: Raw, env: ConfigEnv): Raw {
  const out: Raw = { ...raw }
  const url = env.RATELIMITING_STORE_URL
  const storeType = section(raw, 'store').type
  // the memory store has no URL: the override is for deployments that point a config at a server
  if (url !== undefined && url.trim() !== '' && storeType !== undefined && storeType !== 'memory') {
    const store = { ...section(raw, 'store') }
    const values = list(url) ?? []
    if (store.type === 'memcached') store.servers = values
    else if (store.type === 'redis' && values.length > 1) store.nodes = values
    else store.url = url.trim()
    out.store = store
  }
  const tokens = list(env.RATELIMITING_AUTH_TOKENS)
  const adminTokens = list(env.RATELIMITING_ADMIN_TOKENS)
  if (tokens !== undefined || adminTokens !== undefined) {
    const auth = { ...section(raw, 'auth') }
    if (tokens !== undefined) auth.tokens = tokens
    if (adminTokens !== undefined) auth['admin-tokens'] = adminTokens
    out.auth = auth
  }
  return out
}

function describe(value: unknown): string {
  if (value === undefined) return 'nothing'
  if (typeof value === 'string') return JSON.stringify(value)
  if (Array.isArray(value)) return 'a list'
  if (typeof value === 'object' && value !== null) return 'a mapping'
  return String(value)
}

function valueAt(raw: unknown, path: readonly string[]): unknown {
  let v = raw
  for (const segment of path) {
    if (typeof v !== 'object' || v === null) return undefined
    v = (v as Raw)[segment]
  }
  return v
}

/** Turns an ajv error into a key path and a reason a person can act on. */
function issueOf(error: ErrorObject, raw: unknown): { path: string[]; message: string } {
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
      const allowed = Object.keys((parent as { properties?: Raw } | undefined)?.properties ?? {})
      const hint = allowed.length > 0 ? `; expected one of ${allowed.join(', ')}` : ''
      return {
        path: [...path, String(params.additionalProperty)],
        message: `unknown key${hint}`,
      }
    }
    case 'required':
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
        message: `must be ${params.type === 'integer' ? 'an integer' : `a ${String(params.type)}`}, got ${got}`,
      }
    case 'propertyNames':
    case 'pattern':
      if (error.propertyName !== undefined)
        return {
          path: [...path, error.propertyName],
          message: 'is not a valid policy name: use letters, digits, "_", "." and "-", at most 64, starting with a letter or digit',
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
function locate(doc: Document, lines: LineCounter, path: readonly string[]): { line: number; col: number } | undefined {
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

function policyOf(name: string, raw: Raw, base: Omit<PolicyConfig, 'name'>): PolicyConfig {
  return {
    name,
    algo: (raw['use-algo'] as AlgorithmName | undefined) ?? base.algo,
    maxRequests: (raw['max-requests'] as number | undefined) ?? base.maxRequests,
    windowSize: (raw['window-size'] as number | undefined) ?? base.windowSize,
    syncRate: (raw['sync-rate'] as number | undefined) ?? base.syncRate,
  }
}

/** Builds the normalized config from a schema-valid document, collecting the checks a schema cannot make. */
function normalize(raw: Raw, source: string, issues: Array<{ path: string[]; message: string }>): ServiceConfig {
  const server = section(raw, 'server')
  const limiter = section(raw, 'rate-limiter')
  const store = section(raw, 'store')
  const storeType = (store.type as StoreType | undefined) ?? 'memory'
  const auth = raw.auth === undefined ? undefined : section(raw, 'auth')

  // memory: the counters live in this process, so the counter algorithm needs no sync
  const defaultSyncRate = storeType === 'memory' ? -1 : 0.1
  const base = policyOf('default', limiter, {
    algo: 'sliding-window-algo',
    maxRequests: 100,
    windowSize: 60,
    syncRate: defaultSyncRate,
  })
  const policies = new Map<string, PolicyConfig>([['default', base]])
  for (const [name, value] of Object.entries(section(raw, 'policies'))) {
    if (name === 'default') {
      issues.push({
        path: ['policies', name],
        message: 'the default policy is the rate-limiter section; give this policy another name',
      })
      continue
    }
    policies.set(name, policyOf(name, value as Raw, base))
  }
  for (const p of policies.values()) {
    const at = p.name === 'default' ? ['rate-limiter'] : ['policies', p.name]
    const syncExplicit = (p.name === 'default' ? limiter : section(section(raw, 'policies'), p.name))['sync-rate'] !== undefined
    if (p.syncRate > 0 && p.syncRate < 0.001)
      issues.push({
        path: [...at, 'sync-rate'],
        message: `must be 0 (every hit), < 0 (local only) or at least 0.001 s, got ${p.syncRate}`,
      })
    if (p.algo !== 'sliding-window-counter-algo' && storeType !== 'memory' && storeType !== 'redis') {
      const where = p.name === 'default' || section(section(raw, 'policies'), p.name)['use-algo'] !== undefined ? at : ['rate-limiter']
      issues.push({
        path: [...where, 'use-algo'],
        message: `${p.algo} keeps its counters in redis or memory, but store.type is ${storeType}; use sliding-window-counter-algo with ${storeType}`,
      })
    }
    if (syncExplicit && p.algo !== 'sliding-window-counter-algo' && p.name !== 'default')
      issues.push({
        path: [...at, 'sync-rate'],
        message: `only sliding-window-counter-algo syncs; ${p.algo} decides in the store on every request`,
      })
  }
  if (storeType === 'redis' && store.url === undefined && store.nodes === undefined)
    issues.push({
      path: ['store', 'url'],
      message: 'is required for store type redis (or store.nodes for a Redis Cluster, or RATELIMITING_STORE_URL)',
    })
  if (storeType === 'redis' && store.url !== undefined && store.nodes !== undefined)
    issues.push({
      path: ['store', 'nodes'],
      message: 'give either url (one server) or nodes (a Redis Cluster), not both',
    })
  if (storeType === 'postgres' && store.url === undefined)
    issues.push({
      path: ['store', 'url'],
      message: 'is required for store type postgres (or RATELIMITING_STORE_URL)',
    })
  if (storeType === 'memcached' && store.servers === undefined)
    issues.push({
      path: ['store', 'servers'],
      message: 'is required for store type memcached (or RATELIMITING_STORE_URL)',
    })
  for (const key of ['url', 'nodes', 'servers'] as const) {
    const usedBy = {
      url: ['redis', 'postgres'],
      nodes: ['redis'],
      servers: ['memcached'],
    }[key]
    if (store[key] !== undefined && !usedBy.includes(storeType))
      issues.push({
        path: ['store', key],
        message: `is not used by store type ${storeType}`,
      })
  }
  if (storeType === 'redis' && typeof store.url === 'string' && !/^rediss?:\/\//.test(store.url))
    issues.push({
      path: ['store', 'url'],
      message: `must be a redis:// or rediss:// URL, got ${JSON.stringify(store.url)}`,
    })
  if (storeType === 'postgres' && typeof store.url === 'string' && !/^postgres(ql)?:\/\//.test(store.url))
    issues.push({
      path: ['store', 'url'],
      message: `must be a postgres:// or postgresql:// URL, got ${JSON.stringify(store.url)}`,
    })

  return {
    source,
    logLevel: (raw['log-level'] as LogLevel | undefined) ?? 'info',
    server: {
      host: (server.host as string | undefined) ?? '127.0.0.1',
      port: (server.port as number | undefined) ?? 8080,
      maxBodyBytes: (server['max-body-bytes'] as number | undefined) ?? 8192,
      maxUserIdLength: (server['max-user-id-length'] as number | undefined) ?? 256,
      headers: (server.headers as HeaderMode | undefined) ?? 'draft-8',
      requestTimeoutMs: (server['request-timeout-ms'] as number | undefined) ?? 10_000,
      shutdownTimeoutMs: (server['shutdown-timeout-ms'] as number | undefined) ?? 10_000,
    },
    keyPrefix: (limiter['key-prefix'] as string | undefined) ?? 'rlaas:rate_limit',
    onStoreError: (limiter['on-store-error'] as FailPolicy | undefined) ?? 'error',
    policies,
    store: {
      type: storeType,
      ...(store.url !== undefined ? { url: store.url as string } : {}),
      ...(store.nodes !== undefined ? { nodes: store.nodes as string[] } : {}),
      ...(store.servers !== undefined ? { servers: store.servers as string[] } : {}),
      timeoutMs: (store['timeout-ms'] as number | undefined) ?? 1000,
    },
    auth:
      auth === undefined
        ? undefined
        : {
            tokens: (auth.tokens as string[] | undefined) ?? [],
            adminTokens: (auth['admin-tokens'] as string[] | undefined) ?? [],
          },
  }
}

/**
 * Parses and validates a YAML config. Throws a {@link ConfigFileError} listing every problem
 * with the file, the line, the key path and the reason.
 *
 * @example
 * const config = parseConfig('rate-limiter:\n  use-algo: fixed-window-algo\n', 'ratelimiting.yaml')
 */
export function parseConfig(text: string, source: string, env: ConfigEnv = {}): ServiceConfig {
  const lines = new LineCounter()
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: true })
  if (doc.errors.length > 0) {
    throw new ConfigFileError(
      source,
      doc.errors.map((e) => ({
        path: '',
        message: `invalid YAML: ${(e.message.split('\n')[0] ?? '').replace(/ at line \d+, column \d+:?$/, '')}`,
        line: e.linePos?.[0]?.line,
        col: e.linePos?.[0]?.col,
      })),
    )
  }
  let raw: unknown
  try {
    raw = doc.toJS({ maxAliasCount: 100 }) ?? {}
  } catch (err) {
    throw new ConfigFileError(source, [
      {
        path: '',
        message: `invalid YAML: ${err instanceof Error ? err.message : String(err)}`,
      },
    ])
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    throw new ConfigFileError(source, [
      {
        path: '',
        message: `the document must be a mapping of sections, got ${describe(raw)}`,
      },
    ])
  const withEnv = applyEnv(raw as Raw, env)
  const found: Array<{ path: string[]; message: string }> = []
  if (!validate(withEnv)) {
    for (const error of validate.errors ?? []) found.push(issueOf(error, withEnv))
  }
  const config = normalize(withEnv, source, found)
  if (found.length > 0) {
    const seen = new Set<string>()
    const issues: ConfigIssue[] = []
    for (const f of found) {
      const path = f.path.join('.')
      const id = `${path}\u0000${f.message}`
      if (seen.has(id)) continue
      seen.add(id)
      issues.push({ path, message: f.message, ...locate(doc, lines, f.path) })
    }
    throw new ConfigFileError(source, issues)
  }
  return config
}

/** Reads, parses and validates a config file. Throws a {@link ConfigFileError}. */
export async function loadConfigFile(file: string, env: ConfigEnv = {}): Promise<ServiceConfig> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (err) {
    const reason = (err as NodeJS.ErrnoException).code === 'ENOENT' ? 'file not found' : `cannot read: ${(err as Error).message}`
    throw new ConfigFileError(file, [{ path: '', message: reason }])
  }
  return parseConfig(text, file, env)
}

/** The built-in default config (with the environment overrides applied). */
export function defaultConfig(env: ConfigEnv = {}): ServiceConfig {
  const raw = applyEnv(structuredClone(DEFAULT_CONFIG_DOCUMENT) as unknown as Raw, env)
  const found: Array<{ path: string[]; message: string }> = []
  if (!validate(raw)) for (const error of validate.errors ?? []) found.push(issueOf(error, raw))
  const config = normalize(raw, BUILT_IN_SOURCE, found)
  if (found.length > 0)
    throw new ConfigFileError(
      BUILT_IN_SOURCE,
      found.map((f) => ({ path: f.path.join('.'), message: f.message })),
    )
  return config
}

/** Whether `name` is an algorithm `use-algo` accepts. */
export function isAlgorithmName(name: unknown): name is AlgorithmName {
  return (ALGORITHMS as readonly unknown[]).includes(name)
}
