/**
 * The service's configuration as the code uses it, once parsed, checked and normalised
 * (config.ts): the types only, re-exported by config.ts.
 */
import type { HeaderMode } from '../core/headers.js'
import type { ALGORITHMS, FAIL_POLICIES, LOG_LEVELS, STORE_TYPES } from './config-schema.js'
import type { GatewayConfig } from './config-gateway.js'
import type { KeyNormalization } from './key-normalization.js'
import type { TlsConfig } from './config-tls.js'

/** A `use-algo` value. */
export type AlgorithmName = (typeof ALGORITHMS)[number]
/** A `store.type` value. */
export type StoreType = (typeof STORE_TYPES)[number]

/** An `on-store-error` value: 503, admit, or deny when the store fails; `share` (escrow only): `limit / n` per process. */
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
  /**
   * The counter algorithm admits only against budgets the store granted (`escrow`; docs/ARCHITECTURE.md,
   * "Escrow"). True only on a counter policy with a periodic sync on a store that serves it.
   */
  readonly escrow: boolean
  /** What a request gets when the store fails (`on-store-error`, inherited from `rate-limiter`). */
  readonly onStoreError: FailPolicy
  /** Decided and counted as usual, but every answer allows (the denial shows in a metric and a field). */
  readonly shadowMode: boolean
  /** Keys, IP addresses and CIDR ranges always denied, uncounted (`deny-list`; inherited from `rate-limiter`). */
  readonly denyList: readonly string[]
  /** Keys, IP addresses and CIDR ranges never limited nor counted (`allow-list`; inherited from `rate-limiter`). */
  readonly allowList: readonly string[]
  /** User id → its own max-requests in this policy (`overrides`; not inherited from `rate-limiter`). */
  readonly overrides: ReadonlyMap<string, number>
}

/** The `store` section. */
export interface StoreConfig {
  readonly type: StoreType
  /** redis (`redis://…`) or postgres (`postgres://…`) URL. */
  readonly url?: string
  /** Redis Cluster seed nodes (`host:port` or URLs). */
  readonly nodes?: readonly string[]
  /** Redis Sentinel: the Sentinels (`host:port`), asked for the master of `masterName`. */
  readonly sentinels?: readonly string[]
  /** Redis Sentinel: the name the Sentinels monitor the master under. */
  readonly masterName?: string
  /** Redis Sentinel: the data nodes' password. */
  readonly password?: string
  /** Redis Sentinel: the Sentinels' own password. */
  readonly sentinelPassword?: string
  /** memcached servers (`host:port`). */
  readonly servers?: readonly string[]
  /** postgres: the schema of the counters table. @default "public" */
  readonly schema?: string
  /** Longest wait for one store call, ms. */
  readonly timeoutMs: number
  /** redis with one server: a sync's script calls span hash slots (RedisStrategy's batchAcrossSlots). */
  readonly batchAcrossSlots?: boolean
  /** redis: false to ask Redis on every request of a denied user (the algorithms' rememberDenials). */
  readonly rememberDenials?: boolean
  /** redis (rediss://) and postgres over TLS: PEM files (resolved against the config file's directory), read when the store opens. */
  readonly tls?: StoreTlsConfig
}

/** The `store.tls` section. */
export interface StoreTlsConfig {
  /** The CA the server's certificate is checked against (instead of Node's bundled CAs). */
  readonly ca?: string
  /** A client certificate and its key, for a server that asks for one. */
  readonly cert?: string
  readonly key?: string
}

/** The `server` section. */
export interface ServerConfig {
  readonly host: string
  readonly port: number
  readonly maxBodyBytes: number
  readonly maxUserIdLength: number
  readonly headers: HeaderMode
  /** A request's headers must arrive within this time (Node's `headersTimeout`). */
  readonly headersTimeoutMs: number
  /** A request's headers and body must arrive within this time (Node's `requestTimeout`). */
  readonly requestTimeoutMs: number
  /** An idle keep-alive connection is closed after this time (Node's `keepAliveTimeout`). */
  readonly keepAliveTimeoutMs: number
  /** Requests one connection may carry before it is closed; 0 for no limit (Node's `maxRequestsPerSocket`). */
  readonly maxRequestsPerSocket: number
  /** Open connections at most; more are answered 503 and closed. */
  readonly maxConnections: number
  readonly shutdownTimeoutMs: number
  /** HTTPS instead of HTTP on the same port (`server.tls`); the files are read again on each reload. */
  readonly tls?: TlsConfig
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
  /** Wrap user ids in braces in Redis keys (a Redis Cluster hash tag): an opt-in, off by default. */
  readonly hashTag: boolean
  /** `rate-limiter.on-store-error`: the default policy's, inherited by the named ones (each policy has its own). */
  readonly onStoreError: FailPolicy
  /** Seconds between two reads of the runtime overrides' version in the store (`rate-limiter.overrides-refresh`). */
  readonly overridesRefresh: number
  /** Every policy by name; "default" (the `rate-limiter` section) first. */
  readonly policies: ReadonlyMap<string, PolicyConfig>
  readonly store: StoreConfig
  readonly auth: AuthConfig | undefined
  /** gRPC, Envoy's protocol and domain files, forward-auth, the global shadow mode. */
  readonly gateway: GatewayConfig
  /** How keys are compared (`key-normalization`): Unicode's NFC, or the code points as sent. @default 'nfc' */
  readonly keyNormalization: KeyNormalization
}
