import { KEY_NORMALIZATIONS } from './key-normalization.js'

/** The algorithms `use-algo` names, as in the seed (plus the engine's counter). */
export const ALGORITHMS = ['fixed-window-algo', 'sliding-window-algo', 'sliding-window-counter-algo'] as const
/** The store types. */
export const STORE_TYPES = ['memory', 'redis', 'postgres', 'memcached'] as const
/** What a request gets when the store fails; `share` is for escrow policies and rules only (config.ts checks). */
export const FAIL_POLICIES = ['error', 'allow', 'deny', 'share'] as const
/** Header families of `rateLimitHeaders`. */
export const HEADER_MODES = ['draft-6', 'draft-7', 'draft-8', 'draft-9', 'draft-10', 'kong'] as const
/** pino levels. */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const
/** Whether a TLS listener asks clients for a certificate (checked against its `ca`). */
export const CLIENT_AUTH_MODES = ['none', 'request', 'require'] as const
/** A listener's `tls`: PEM files, relative to the config file's directory (config-tls.ts reads them). */
const TLS = {
  type: 'object',
  additionalProperties: false,
  required: ['cert', 'key'],
  properties: {
    cert: { type: 'string', minLength: 1 },
    key: { type: 'string', minLength: 1 },
    ca: { type: 'string', minLength: 1 },
    'client-auth': { enum: CLIENT_AUTH_MODES },
  },
} as const
/**
 * A bearer token as a request can present it: auth.ts compares the `Authorization` header's
 * value trimmed, and Node reads header bytes as latin1, so only visible ASCII, spaces inside.
 */
const TOKEN = { type: 'string', minLength: 8, pattern: '^[!-~](?:[ -~]*[!-~])?$' } as const
/** Policy names: they appear in URLs, metrics labels and store namespaces. */
export const POLICY_NAME_PATTERN = '^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$'
/** The largest `max-requests` (and per-user override) a policy may have. */
export const MAX_REQUESTS_LIMIT = 1_000_000_000

const policyProperties = {
  'use-algo': { enum: ALGORITHMS },
  'max-requests': { type: 'integer', minimum: 1, maximum: MAX_REQUESTS_LIMIT },
  'window-size': { type: 'integer', minimum: 1, maximum: 31_536_000 },
  'sync-rate': { type: 'number', maximum: 86_400 },
  // sliding-window-counter-algo with a periodic sync: admit only against budgets the store granted (config.ts checks)
  escrow: { type: 'boolean' },
  // what this policy's requests get when the store fails; the rate-limiter section's is every policy's default
  'on-store-error': { enum: FAIL_POLICIES },
  'shadow-mode': { type: 'boolean' },
  // exact keys, IP addresses and CIDR ranges (config-lists.ts checks each); [] clears an inherited list
  'deny-list': { type: 'array', items: { type: 'string', minLength: 1 } },
  'allow-list': { type: 'array', items: { type: 'string', minLength: 1 } },
  // user id -> its own limit in this policy (config-overrides.ts checks the ids); not inherited
  overrides: {
    type: 'object',
    additionalProperties: {
      type: 'object',
      additionalProperties: false,
      required: ['max-requests'],
      properties: { 'max-requests': { type: 'integer', minimum: 1, maximum: MAX_REQUESTS_LIMIT } },
    },
  },
} as const

const stringList = {
  type: 'array',
  minItems: 1,
  items: { type: 'string', minLength: 1 },
} as const

/** The JSON schema of the YAML config (kebab-case keys, as in the seed). */
export const CONFIG_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  // a file must say where counters live: an empty or truncated file is not a config
  required: ['store'],
  properties: {
    'log-level': { enum: LOG_LEVELS },
    // how keys are compared: Unicode's NFC (the default) or the code points as sent
    'key-normalization': { enum: KEY_NORMALIZATIONS },
    server: {
      type: 'object',
      additionalProperties: false,
      properties: {
        host: { type: 'string', minLength: 1 },
        port: { type: 'integer', minimum: 0, maximum: 65_535 },
        'max-body-bytes': { type: 'integer', minimum: 64, maximum: 1_048_576 },
        'max-user-id-length': { type: 'integer', minimum: 1, maximum: 4096 },
        headers: { enum: HEADER_MODES },
        'headers-timeout-ms': { type: 'integer', minimum: 100, maximum: 600_000 },
        'request-timeout-ms': {
          type: 'integer',
          minimum: 100,
          maximum: 600_000,
        },
        'keep-alive-timeout-ms': { type: 'integer', minimum: 100, maximum: 600_000 },
        'max-requests-per-socket': { type: 'integer', minimum: 0, maximum: 1_000_000_000 },
        'max-connections': { type: 'integer', minimum: 1, maximum: 1_000_000 },
        'shutdown-timeout-ms': {
          type: 'integer',
          minimum: 0,
          maximum: 600_000,
        },
        tls: TLS,
      },
    },
    'rate-limiter': {
      type: 'object',
      additionalProperties: false,
      properties: {
        ...policyProperties,
        // no braces: the first {…} of a key is its Redis Cluster hash tag, which would put every
        // key in one slot
        'key-prefix': { type: 'string', pattern: '^[^{}\\s]{1,50}$' },
        'hash-tag': { type: 'boolean' },
        // seconds between two reads of the runtime overrides' version in the store
        'overrides-refresh': { type: 'number', minimum: 0.01, maximum: 3600 },
      },
    },
    policies: {
      type: 'object',
      propertyNames: { pattern: POLICY_NAME_PATTERN },
      additionalProperties: {
        type: 'object',
        additionalProperties: false,
        properties: policyProperties,
      },
    },
    store: {
      type: 'object',
      additionalProperties: false,
      required: ['type'],
      properties: {
        type: { enum: STORE_TYPES },
        url: { type: 'string', minLength: 1 },
        nodes: stringList,
        // Redis Sentinel: the Sentinels (host:port) and the name of the master they monitor
        sentinels: stringList,
        'master-name': { type: 'string', pattern: '^[A-Za-z0-9._-]+$' },
        // any type here: config-sentinels.ts checks them with messages that leave the value out
        password: {},
        'sentinel-password': {},
        servers: stringList,
        // postgres: where the counters table lives (a plain identifier, as PostgresStrategy takes it)
        schema: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]{0,62}$' },
        'timeout-ms': { type: 'integer', minimum: 1, maximum: 60_000 },
        'batch-across-slots': { type: 'boolean' },
        // redis algorithms: answer a user locally while a denial still holds (rememberDenials)
        'remember-denials': { type: 'boolean' },
        // redis over TLS (rediss://): the CA to trust and a client certificate, PEM files
        tls: {
          type: 'object',
          additionalProperties: false,
          properties: {
            ca: { type: 'string', minLength: 1 },
            cert: { type: 'string', minLength: 1 },
            key: { type: 'string', minLength: 1 },
          },
        },
      },
    },
    // decided and counted as usual, but every answer allows (RATELIMITING_SHADOW_MODE=true too)
    'shadow-mode': { type: 'boolean' },
    grpc: {
      type: 'object',
      additionalProperties: false,
      properties: {
        host: { type: 'string', minLength: 1 },
        port: { type: 'integer', minimum: 0, maximum: 65_535 },
        'max-concurrent-streams': { type: 'integer', minimum: 1, maximum: 1_000_000 },
        // open connections at most, as server.max-connections for HTTP (read at each connection: a reload applies)
        'max-connections': { type: 'integer', minimum: 1, maximum: 1_000_000 },
        // a connection without a call in progress this long is closed, one that never sent the HTTP/2 preface too
        'idle-timeout-ms': { type: 'integer', minimum: 100, maximum: 86_400_000 },
        // streams a client may reset on one connection before they were answered (rapid reset, CVE-2023-44487)
        'max-stream-resets': { type: 'integer', minimum: 1, maximum: 1_000_000_000 },
        tls: TLS,
      },
    },
    envoy: {
      type: 'object',
      additionalProperties: false,
      properties: {
        domains: { type: 'string', minLength: 1 },
        'use-algo': { enum: ALGORITHMS },
        'sync-rate': { type: 'number', maximum: 86_400 },
        // the default of the counter rules (a rule's rate_limit.escrow wins) and of descriptors' own limits
        escrow: { type: 'boolean' },
        'on-store-error': { enum: FAIL_POLICIES },
        'response-headers': { enum: ['off', 'x-ratelimit', ...HEADER_MODES] },
        'near-limit-ratio': { type: 'number', exclusiveMinimum: 0, maximum: 1 },
        'max-descriptors': { type: 'integer', minimum: 1, maximum: 1024 },
        // UTF-16 code units of a descriptor entry's key or value; up to gRPC's default message limit (4 MiB)
        'max-value-length': { type: 'integer', minimum: 1, maximum: 4_194_304 },
      },
    },
    'forward-auth': {
      type: 'object',
      additionalProperties: false,
      properties: {
        'key-header': { type: 'string', pattern: "^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$" },
        'denied-status': { type: 'integer', minimum: 400, maximum: 599 },
        'key-entry': { enum: ['last', 'first', 'whole'] },
      },
    },
    auth: {
      type: 'object',
      additionalProperties: false,
      properties: {
        tokens: { type: 'array', items: TOKEN },
        'admin-tokens': { type: 'array', items: TOKEN },
      },
    },
  },
} as const
