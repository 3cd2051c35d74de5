/**
 * `ratelimiting/server`: the rate-limit service (docs/SERVICE.md): YAML config, the three
 * algorithms over memory, Redis, PostgreSQL or memcached, an HTTP API with metrics and auth.
 */
export type { Grant } from './auth.js'
export type { CliIo } from './cli-main.js'
export { EXIT, runCli, USAGE } from './cli-main.js'
export type {
  AlgorithmName,
  AuthConfig,
  ConfigEnv,
  ConfigIssue,
  FailPolicy,
  LogLevel,
  PolicyConfig,
  ServerConfig,
  ServiceConfig,
  StoreConfig,
  StoreType,
} from './config.js'
export {
  BUILT_IN_SOURCE,
  ConfigFileError,
  DEFAULT_CONFIG_DOCUMENT,
  defaultConfig,
  isAlgorithmName,
  loadConfigFile,
  parseConfig,
} from './config.js'
export { ALGORITHMS, CONFIG_SCHEMA, STORE_TYPES } from './config-schema.js'
export type { InForce } from './config-document.js'
export { CounterAlgorithm, CounterEngine, type CounterEngineOptions } from './counter-algorithm.js'
export { createRequestHandler, type HandlerContext, MAX_COST } from './http.js'
export { createLogger } from './logger.js'
export { type Outcome, ServiceMetrics } from './metrics.js'
export type { ReloadAttempt } from './routes/config.js'
export { type RunningService, type ServiceOptions, startService } from './service.js'
export { StoreStartError } from './stores.js'
