import { watch as watchPath } from 'node:fs'
import type { Logger } from 'pino'
import type { Clock } from '../../core/clock.js'
import { ConfigFileError, type ConfigIssue, type ServiceConfig } from '../config.js'
import { noEscrowStore, storeServesEscrow } from '../config-escrow.js'
import type { ServiceMetrics } from '../metrics.js'
import type { Runtime } from '../runtime.js'
import type { ShadowLog } from '../shadow-log.js'
import { type DomainConfigSet, type DomainRule, loadDomains, parseDomainFiles, ruleEscrow } from './domains.js'
import { decideEnvoy, type EnvoyRequest, type EnvoyResponse } from './envoy-decide.js'

// How the service runs Envoy's protocol: loading the domain files of a config, deciding with
// the runtime in use, and watching the domain files for changes.

/**
 * The domain files of `config` (`envoy.domains`), parsed with its defaults; an empty set when
 * the config names none. Throws a ConfigFileError naming the file and the key path.
 */
export async function loadServiceDomains(config: ServiceConfig): Promise<DomainConfigSet> {
  const envoy = config.gateway.envoy
  const defaults = { algorithm: envoy.algo, syncRate: undefined }
  if (envoy.domains === undefined) return parseDomainFiles([], defaults)
  const domains = await loadDomains(envoy.domains, defaults, { normalizeKeys: config.keyNormalization === 'nfc' })
  const storeType = config.store.type
  if (storeType !== 'memory' && storeType !== 'redis') {
    for (const rule of domains.rules())
      if (!rule.unlimited && rule.algorithm !== 'sliding-window-counter-algo')
        throw new ConfigFileError(rule.file, [
          { path: rule.path, message: `algorithm ${rule.algorithm} keeps its counters in redis or memory, but store.type is ${storeType}` },
        ])
  }
  escrowRuleIssues(domains, config)
  return domains
}

// The rules' escrow against what the files cannot know: the sync rate in force, the store, and
// on-store-error share (which only an escrow rule can honour). Throws for the first file with problems.
function escrowRuleIssues(domains: DomainConfigSet, config: ServiceConfig): void {
  const envoy = config.gateway.envoy
  const storeType = config.store.type
  const byFile = new Map<string, ConfigIssue[]>()
  const add = (rule: DomainRule, key: string, message: string) => {
    const list = byFile.get(rule.file) ?? []
    list.push({ path: `${rule.path}.rate_limit${key === '' ? '' : `.${key}`}`, message })
    byFile.set(rule.file, list)
  }
  for (const rule of domains.rules()) {
    if (rule.unlimited) continue
    const escrow = ruleEscrow(rule, envoy)
    const own = rule.escrow !== undefined
    const from = own ? '' : ' (envoy.escrow)'
    const syncRate = rule.syncRate ?? envoy.syncRate
    if (escrow && !storeServesEscrow(storeType))
      add(rule, own ? 'escrow' : '', `escrow${from} is not available: ${noEscrowStore(storeType)}`)
    if (escrow && syncRate <= 0)
      add(
        rule,
        own ? 'escrow' : 'sync_rate',
        `escrow${from} needs a periodic sync (sync_rate > 0), got ${syncRate}${rule.syncRate === undefined ? ' (envoy.sync-rate)' : ''}`,
      )
    if (envoy.onStoreError === 'share' && !escrow)
      add(
        rule,
        own ? 'escrow' : '',
        'on-store-error share (envoy.on-store-error, else rate-limiter.on-store-error) is for escrow rules only: give this rule algorithm sliding-window-counter-algo and escrow: true, or set envoy.on-store-error to error, allow or deny',
      )
  }
  for (const [file, issues] of byFile) throw new ConfigFileError(file, issues)
}

/** Decides ShouldRateLimit requests with whichever runtime is in use when each arrives. */
export function createEnvoyDecider(
  current: () => Runtime,
  metrics: ServiceMetrics,
  shadowLog: ShadowLog,
  clock: Clock,
): (request: EnvoyRequest) => Promise<EnvoyResponse> {
  return async function decideShouldRateLimit(request: EnvoyRequest): Promise<EnvoyResponse> {
    const runtime = current()
    runtime.enter()
    try {
      return await decideEnvoy(
        {
          algorithms: runtime.envoy,
          envoy: runtime.config.gateway.envoy,
          shadowMode: runtime.config.gateway.shadowMode,
          onStoreError: runtime.config.gateway.envoy.onStoreError,
          metrics: metrics.gateway,
          shadowLog,
          clock,
          normalizeKey: runtime.normalizeKey,
        },
        request,
      )
    } finally {
      runtime.leave()
    }
  }
}

/**
 * Calls `onChange` once the domain file or directory has been quiet for `quietMs` after a
 * change. Returns a function that stops watching.
 */
export function watchDomains(target: string, quietMs: number, onChange: () => void, logger: Logger): () => void {
  let timer: NodeJS.Timeout | undefined
  let watcher: ReturnType<typeof watchPath>
  try {
    watcher = watchPath(target, () => {
      if (timer !== undefined) clearTimeout(timer)
      timer = setTimeout(onChange, quietMs)
      timer.unref()
    })
  } catch (err) {
    logger.warn({ err, domains: target }, 'cannot watch the domain files; reload with SIGHUP')
    return () => undefined
  }
  watcher.on('error', (err) => logger.warn({ err, domains: target }, 'watching the domain files failed; reload with SIGHUP'))
  watcher.unref()
  return () => {
    if (timer !== undefined) clearTimeout(timer)
    watcher.close()
  }
}
