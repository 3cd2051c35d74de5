import { readFile } from 'node:fs/promises'
import { Ajv } from 'ajv'
import { LineCounter, parseDocument } from 'yaml'
import type { HeaderMode } from '../core/headers.js'
import { ConfigFileError, type ConfigIssue, describe, issueOf, locate } from './config-issues.js'
import { ALGORITHMS, CONFIG_SCHEMA } from './config-schema.js'
import { applyEnv, type ConfigEnv, type Raw, section } from './config-env.js'
import { gatewayOf } from './config-gateway.js'
import { listIssues, policyListsOf } from './config-lists.js'
import { type KeyNormalization, keyNormalizer } from './key-normalization.js'
import { overrideIssues, overridesOf } from './config-overrides.js'
import { urlProblems } from './config-urls.js'
import { sentinelIssues } from './config-sentinels.js'
import { storeTlsOf, tlsOf } from './config-tls.js'
import { envoyEscrowIssues, escrowIssues } from './config-escrow.js'

export { type ConfigEnv } from './config-env.js'
export { ConfigFileError, type ConfigIssue } from './config-issues.js'

import type { AlgorithmName, FailPolicy, LogLevel, PolicyConfig, ServiceConfig, StoreType } from './config-types.js'

export type {
  AlgorithmName,
  AuthConfig,
  FailPolicy,
  LogLevel,
  PolicyConfig,
  ServerConfig,
  ServiceConfig,
  StoreConfig,
  StoreTlsConfig,
  StoreType,
} from './config-types.js'

// The store keys that only some store types use.
const STORE_KEYS_USED_BY: Record<string, readonly StoreType[]> = {
  url: ['redis', 'postgres'],
  nodes: ['redis'],
  sentinels: ['redis'],
  'master-name': ['redis'],
  password: ['redis'],
  'sentinel-password': ['redis'],
  servers: ['memcached'],
  schema: ['postgres'],
  'batch-across-slots': ['redis'],
  'remember-denials': ['redis'],
  tls: ['redis', 'postgres'],
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

const ajv = new Ajv({ allErrors: true, strict: true })
const validate = ajv.compile(CONFIG_SCHEMA)

function schemaIssues(raw: Raw): Array<{ path: string[]; message: string }> {
  const found: Array<{ path: string[]; message: string }> = []
  for (const error of validate.errors ?? []) {
    const issue = issueOf(error, raw)
    if (issue !== undefined) found.push(issue)
  }
  return found
}

function policyOf(name: string, raw: Raw, base: Omit<PolicyConfig, 'name' | 'overrides'>): PolicyConfig {
  return {
    name,
    algo: (raw['use-algo'] as AlgorithmName | undefined) ?? base.algo,
    maxRequests: (raw['max-requests'] as number | undefined) ?? base.maxRequests,
    windowSize: (raw['window-size'] as number | undefined) ?? base.windowSize,
    syncRate: (raw['sync-rate'] as number | undefined) ?? base.syncRate,
    // inherited as written: config-escrow.ts checks it against the algorithm, the sync rate and the store
    escrow: (raw.escrow as boolean | undefined) ?? base.escrow,
    onStoreError: (raw['on-store-error'] as FailPolicy | undefined) ?? base.onStoreError,
    shadowMode: (raw['shadow-mode'] as boolean | undefined) ?? base.shadowMode,
    ...policyListsOf(raw, base),
    overrides: overridesOf(raw),
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
    escrow: false,
    onStoreError: 'error',
    shadowMode: false,
    denyList: [],
    allowList: [],
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
  escrowIssues(raw, policies, storeType, issues)
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
  if (storeType === 'redis' && store.url === undefined && store.nodes === undefined && store.sentinels === undefined)
    issues.push({
      path: ['store', 'url'],
      message:
        'is required for store type redis (or store.nodes for a Redis Cluster, store.sentinels for Redis Sentinel, or RATELIMITING_STORE_URL)',
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
  for (const [key, usedBy] of Object.entries(STORE_KEYS_USED_BY))
    if (store[key] !== undefined && !usedBy.includes(storeType))
      issues.push({ path: ['store', key], message: `is not used by store type ${storeType}` })
  if (store['batch-across-slots'] === true && store.nodes !== undefined)
    issues.push({ path: ['store', 'batch-across-slots'], message: 'is for one Redis server (url); a cluster needs one call per slot' })
  issues.push(...urlProblems(storeType, store))
  if (storeType === 'redis') issues.push(...sentinelIssues(store))
  listIssues(raw, issues)
  const normalization = (raw['key-normalization'] as KeyNormalization | undefined) ?? 'nfc'
  overrideIssues(raw, (server['max-user-id-length'] as number | undefined) ?? 256, keyNormalizer(normalization), issues)
  const gateway = gatewayOf(raw, source, storeType, defaultSyncRate, issues)
  envoyEscrowIssues(raw, gateway.envoy, storeType, issues)
  const serverTls = tlsOf(raw, 'server', source, issues)
  const storeTls = storeTlsOf(store, storeType, source, issues)
  const requestTimeoutMs = (server['request-timeout-ms'] as number | undefined) ?? 10_000
  const headersTimeoutMs = (server['headers-timeout-ms'] as number | undefined) ?? Math.min(5_000, requestTimeoutMs)
  if (headersTimeoutMs > requestTimeoutMs)
    issues.push({
      path: ['server', 'headers-timeout-ms'],
      message: `must be at most server.request-timeout-ms (${requestTimeoutMs}), got ${headersTimeoutMs}`,
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
      headersTimeoutMs,
      requestTimeoutMs,
      keepAliveTimeoutMs: (server['keep-alive-timeout-ms'] as number | undefined) ?? 5_000,
      maxRequestsPerSocket: (server['max-requests-per-socket'] as number | undefined) ?? 0,
      maxConnections: (server['max-connections'] as number | undefined) ?? 10_000,
      shutdownTimeoutMs: (server['shutdown-timeout-ms'] as number | undefined) ?? 10_000,
      ...(serverTls !== undefined ? { tls: serverTls } : {}),
    },
    keyPrefix: (limiter['key-prefix'] as string | undefined) ?? 'rlaas:rate_limit',
    hashTag: (limiter['hash-tag'] as boolean | undefined) ?? false,
    onStoreError: base.onStoreError,
    overridesRefresh: (limiter['overrides-refresh'] as number | undefined) ?? 1,
    policies,
    store: {
      type: storeType,
      ...(store.url !== undefined ? { url: store.url as string } : {}),
      ...(store.nodes !== undefined ? { nodes: store.nodes as string[] } : {}),
      ...(store.sentinels !== undefined ? { sentinels: store.sentinels as string[], masterName: store['master-name'] as string } : {}),
      ...(store.password !== undefined ? { password: store.password as string } : {}),
      ...(store['sentinel-password'] !== undefined ? { sentinelPassword: store['sentinel-password'] as string } : {}),
      ...(store.servers !== undefined ? { servers: store.servers as string[] } : {}),
      ...(store.schema !== undefined ? { schema: store.schema as string } : {}),
      timeoutMs: (store['timeout-ms'] as number | undefined) ?? 1000,
      // RedisStrategy's default: across slots on one server (url, sentinels), per slot on a cluster
      ...(storeType === 'redis'
        ? { batchAcrossSlots: (store['batch-across-slots'] as boolean | undefined) ?? store.nodes === undefined }
        : {}),
      ...(store['remember-denials'] === false ? { rememberDenials: false } : {}),
      ...(storeTls !== undefined ? { tls: storeTls } : {}),
    },
    auth:
      auth === undefined
        ? undefined
        : {
            tokens: (auth.tokens as string[] | undefined) ?? [],
            adminTokens: (auth['admin-tokens'] as string[] | undefined) ?? [],
          },
    gateway,
    keyNormalization: normalization,
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
  if (!validate(withEnv)) found.push(...schemaIssues(withEnv))
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
  if (!validate(raw)) found.push(...schemaIssues(raw))
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
