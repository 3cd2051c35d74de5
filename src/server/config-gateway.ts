import { dirname, isAbsolute, resolve } from 'node:path'
import type { HeaderMode } from '../core/headers.js'
import { type Raw, section } from './config-env.js'
import type { AlgorithmName, FailPolicy } from './config.js'
import { type TlsConfig, tlsOf } from './config-tls.js'

// The gateway sections of the config: the gRPC listener, Envoy's rate limit protocol and its
// domain files, forward-auth, and the global shadow mode (docs/GATEWAY.md).

/** The `grpc` section: where the gRPC listener (Envoy's rls v3 and grpc.health.v1) listens. */
export interface GrpcConfig {
  readonly host: string
  /** 0 picks a free port. */
  readonly port: number
  /** HTTP/2 streams one connection may have open at once. */
  readonly maxConcurrentStreams: number
  /** Open connections at most; one more is sent GOAWAY and closed. A reload applies to new connections. */
  readonly maxConnections: number
  /**
   * A connection with no call in progress for this long is closed (GOAWAY, then closed 1 s later
   * at the latest), whether it never sent the HTTP/2 preface or sent no call since its last one.
   */
  readonly idleTimeoutMs: number
  /**
   * Streams a client may reset (RST_STREAM) on one connection before they were answered; past it,
   * while they are more than half of the connection's streams, the connection gets GOAWAY
   * ENHANCE_YOUR_CALM and is closed (HTTP/2 rapid reset).
   */
  readonly maxStreamResets: number
  /** gRPC over TLS (`grpc.tls`); the files are read again on each reload. */
  readonly tls?: TlsConfig
}

/** What `response_headers_to_add` carries: nothing, the reference's `x-ratelimit-*`, or a draft RateLimit family. */
export type EnvoyHeaderMode = 'off' | 'x-ratelimit' | HeaderMode

/** The `envoy` section: Envoy's rate limit protocol over gRPC and `POST /json`. */
export interface EnvoyConfig {
  /** The domain YAML file or directory (envoyproxy/ratelimit's format), resolved against the config file's directory. */
  readonly domains: string | undefined
  /** The algorithm of a rule that names none: the reference's fixed window (the counter on postgres and memcached) unless set. */
  readonly algo: AlgorithmName
  /** Seconds between syncs of the counter algorithm's rules (> 0 periodic, 0 every hit, < 0 local only). */
  readonly syncRate: number
  /** Counter rules that name no `escrow` (and descriptors' own limits on the counter) admit only against granted budgets. */
  readonly escrow: boolean
  /** What a rule's hits get when the store fails: `envoy.on-store-error`, else `rate-limiter.on-store-error`. */
  readonly onStoreError: FailPolicy
  readonly responseHeaders: EnvoyHeaderMode
  /** A hit counted at or above this share of the limit is "near limit" in the metrics (the reference's NEAR_LIMIT_RATIO). */
  readonly nearLimitRatio: number
  /** Descriptors one request may carry; more is an invalid request. */
  readonly maxDescriptors: number
  /**
   * The longest key or value of a descriptor entry, UTF-16 code units; longer is an invalid
   * request. The default, 65,536, is above Envoy's own header limit (60 KiB by default).
   */
  readonly maxValueLength: number
}

/** Which entry of a comma-separated key header is the key: `last` is the one the proxy in front of the service added. */
export type ForwardAuthKeyEntry = 'last' | 'first' | 'whole'

/** The `forward-auth` section: `GET /v1/forward-auth/<policy>` for nginx `auth_request`, Traefik and Caddy. */
export interface ForwardAuthConfig {
  /** The request header the key is read from, lower-case. */
  readonly keyHeader: string
  /** Which entry of a comma-separated header value (X-Forwarded-For) is the key. @default 'last' */
  readonly keyEntry: ForwardAuthKeyEntry
  /** The status of a denial (nginx's auth_request treats 401 and 403 as denials). */
  readonly deniedStatus: number
}

/** The gateway part of a validated config. */
export interface GatewayConfig {
  readonly grpc: GrpcConfig | undefined
  readonly envoy: EnvoyConfig
  readonly forwardAuth: ForwardAuthConfig
  /** Every policy and rule decides and counts, but every answer allows. */
  readonly shadowMode: boolean
}

/** Whether an environment variable says yes (`true`, `1`, `yes`, `on`). */
export function envFlag(value: string | undefined): boolean | undefined {
  if (value === undefined || value.trim() === '') return undefined
  const v = value.trim().toLowerCase()
  if (['true', '1', 'yes', 'on'].includes(v)) return true
  if (['false', '0', 'no', 'off'].includes(v)) return false
  return undefined
}

/**
 * Builds the gateway sections of a schema-valid document. `source` is the config file (domain
 * paths are relative to its directory); `defaultSyncRate` is the store's default.
 */
export function gatewayOf(
  raw: Raw,
  source: string,
  storeType: string,
  defaultSyncRate: number,
  issues: Array<{ path: string[]; message: string }>,
): GatewayConfig {
  const grpc = raw.grpc === undefined ? undefined : section(raw, 'grpc')
  const envoy = section(raw, 'envoy')
  const forwardAuth = section(raw, 'forward-auth')
  const domains = envoy.domains as string | undefined
  const base = source.startsWith('<') ? process.cwd() : dirname(resolve(source))
  const syncRate = (envoy['sync-rate'] as number | undefined) ?? defaultSyncRate
  if (syncRate > 0 && syncRate < 0.001)
    issues.push({ path: ['envoy', 'sync-rate'], message: `must be 0 (every hit), < 0 (local only) or at least 0.001 s, got ${syncRate}` })
  // the seed algorithms keep their counters in redis or memory; elsewhere rules default to the counter
  const seedStore = storeType === 'memory' || storeType === 'redis'
  const algo = (envoy['use-algo'] as AlgorithmName | undefined) ?? (seedStore ? 'fixed-window-algo' : 'sliding-window-counter-algo')
  if (!seedStore && algo !== 'sliding-window-counter-algo')
    issues.push({ path: ['envoy', 'use-algo'], message: `${algo} keeps its counters in redis or memory, but store.type is ${storeType}` })
  if (grpc !== undefined && raw.envoy !== undefined && domains === undefined)
    issues.push({ path: ['envoy', 'domains'], message: 'is required to answer Envoy: the domain file or directory of rules' })
  const grpcTls = tlsOf(raw, 'grpc', source, issues)
  return {
    grpc:
      grpc === undefined
        ? undefined
        : {
            host: (grpc.host as string | undefined) ?? '127.0.0.1',
            port: (grpc.port as number | undefined) ?? 8081,
            maxConcurrentStreams: (grpc['max-concurrent-streams'] as number | undefined) ?? 1000,
            maxConnections: (grpc['max-connections'] as number | undefined) ?? 10_000,
            idleTimeoutMs: (grpc['idle-timeout-ms'] as number | undefined) ?? 30_000,
            maxStreamResets: (grpc['max-stream-resets'] as number | undefined) ?? 100,
            ...(grpcTls !== undefined ? { tls: grpcTls } : {}),
          },
    envoy: {
      domains: domains === undefined ? undefined : isAbsolute(domains) ? domains : resolve(base, domains),
      algo,
      syncRate,
      escrow: (envoy.escrow as boolean | undefined) ?? false,
      onStoreError:
        (envoy['on-store-error'] as FailPolicy | undefined) ??
        (section(raw, 'rate-limiter')['on-store-error'] as FailPolicy | undefined) ??
        'error',
      responseHeaders: (envoy['response-headers'] as EnvoyHeaderMode | undefined) ?? 'off',
      nearLimitRatio: (envoy['near-limit-ratio'] as number | undefined) ?? 0.8,
      maxDescriptors: (envoy['max-descriptors'] as number | undefined) ?? 64,
      maxValueLength: (envoy['max-value-length'] as number | undefined) ?? 65_536,
    },
    forwardAuth: {
      keyHeader: ((forwardAuth['key-header'] as string | undefined) ?? 'x-real-ip').toLowerCase(),
      keyEntry: (forwardAuth['key-entry'] as ForwardAuthKeyEntry | undefined) ?? 'last',
      deniedStatus: (forwardAuth['denied-status'] as number | undefined) ?? 403,
    },
    shadowMode: (raw['shadow-mode'] as boolean | undefined) ?? false,
  }
}
