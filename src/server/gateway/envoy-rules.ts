import { MemoryFixedWindow } from '../../algorithms/fixed-window-memory.js'
import { RedisFixedWindow } from '../../algorithms/fixed-window-redis.js'
import { MemorySlidingLog } from '../../algorithms/sliding-log-memory.js'
import { RedisSlidingLog } from '../../algorithms/sliding-log-redis.js'
import type { RateLimitAlgorithm } from '../../algorithms/types.js'
import type { AlgorithmName, ServiceConfig } from '../config.js'
import { CounterAlgorithm, CounterEngine } from '../counter-algorithm.js'
import type { RuntimeHooks } from '../runtime.js'
import type { StoreHandle } from '../stores.js'
import { type DomainConfigSet, type DomainRule, type RateLimitUnit, UNIT_SECONDS } from './domains.js'

// The algorithms behind the rules of Envoy's domain files: one per rule, built when a config is
// applied, and kept across reloads for rules whose algorithm, window and store did not change.

/** What identifies a counter's algorithm: a rule's (or a request's limit override's) limit, window and algorithm. */
export interface LimitSpec {
  readonly algo: AlgorithmName
  readonly requestsPerUnit: number
  readonly unit: RateLimitUnit
  readonly syncRate: number
}

/** Distinct limit overrides (a descriptor's `limit`) one runtime keeps algorithms for. */
export const MAX_OVERRIDE_LIMITS = 1024

/**
 * The algorithms of one runtime's Envoy rules. Their Redis keys live under
 * `<prefix>~envoy@rule:…` (rules) and `<prefix>~envoy@override:…` (a descriptor's own `limit`),
 * and the counter algorithm's under the namespaces `~envoy-<window>s-<syncRate>`: no key of a
 * policy can have that shape, since neither a policy name nor the default policy's user ids
 * follow the prefix with `~` (docs/GATEWAY.md, "Keys").
 */
export class EnvoyAlgorithms {
  readonly domains: DomainConfigSet
  /** Algorithms by rule id. */
  private readonly byRule = new Map<number, RateLimitAlgorithm>()
  /** Algorithms of descriptors' own limits, by {@link overrideId}; carried over like the rules'. */
  private readonly overrides = new Map<string, { readonly spec: LimitSpec; readonly algorithm: RateLimitAlgorithm }>()
  /** Carried over by the next runtime: algorithms by state signature, engines by group. */
  readonly states = new Map<string, RateLimitAlgorithm>()
  readonly engines = new Map<string, CounterEngine>()

  private constructor(
    domains: DomainConfigSet,
    private readonly config: ServiceConfig,
    private readonly store: StoreHandle,
    private readonly hooks: RuntimeHooks,
  ) {
    this.domains = domains
  }

  /** Builds the algorithms of every limited rule, reusing `previous`'s where nothing changed. */
  static async create(
    domains: DomainConfigSet,
    config: ServiceConfig,
    store: StoreHandle,
    hooks: RuntimeHooks,
    previous: EnvoyAlgorithms | undefined,
  ): Promise<EnvoyAlgorithms> {
    const out = new EnvoyAlgorithms(domains, config, store, hooks)
    const keep = previous !== undefined && previous.store === store
    try {
      for (const rule of domains.rules()) {
        if (rule.unlimited || rule.unit === undefined || rule.requestsPerUnit === 0) continue
        const spec = specOf(rule, config)
        const signature = JSON.stringify(['rule', rule.domain, rule.statsKey, spec.algo, spec.unit, spec.syncRate])
        const kept = keep ? previous.states.get(signature) : undefined
        let algorithm: RateLimitAlgorithm
        if (kept !== undefined) {
          algorithm = kept.limit === spec.requestsPerUnit ? kept : kept.withLimit(spec.requestsPerUnit)
          if (kept instanceof CounterAlgorithm) out.engines.set(engineGroup(spec), kept.engine)
        } else algorithm = await out.make(spec, 'rule', keep ? previous : undefined)
        out.states.set(signature, algorithm)
        out.byRule.set(rule.id, algorithm)
      }
      if (keep) out.keepOverrides(previous)
    } catch (err) {
      await out.close(previous)
      throw err
    }
    return out
  }

  /** The algorithm of `rule` (undefined for an unlimited rule or one of 0 per unit). */
  ofRule(rule: DomainRule): RateLimitAlgorithm | undefined {
    return this.byRule.get(rule.id)
  }

  /**
   * The algorithm of a descriptor's limit override, made on first use: the domain file's default
   * algorithm. Undefined when {@link MAX_OVERRIDE_LIMITS} distinct overrides are already held.
   */
  async ofOverride(requestsPerUnit: number, unit: RateLimitUnit): Promise<RateLimitAlgorithm | undefined> {
    const spec = this.overrideSpec(requestsPerUnit, unit)
    const id = overrideId(spec)
    const known = this.overrides.get(id)
    if (known !== undefined) return known.algorithm
    if (this.overrides.size >= MAX_OVERRIDE_LIMITS) return undefined
    const algorithm = await this.make(spec, 'override', undefined)
    // two requests may have made it at once: keep the first
    const raced = this.overrides.get(id)
    if (raced !== undefined) return raced.algorithm
    this.overrides.set(id, { spec, algorithm })
    return algorithm
  }

  /**
   * Takes over `previous`'s algorithms of descriptors' own limits whose algorithm and sync rate
   * the config still gives them, with their counts (on the memory store, the counts themselves).
   */
  private keepOverrides(previous: EnvoyAlgorithms): void {
    for (const [id, kept] of previous.overrides) {
      if (overrideId(this.overrideSpec(kept.spec.requestsPerUnit, kept.spec.unit)) !== id) continue
      this.overrides.set(id, kept)
      if (kept.algorithm instanceof CounterAlgorithm) this.engines.set(engineGroup(kept.spec), kept.algorithm.engine)
    }
  }

  private overrideSpec(requestsPerUnit: number, unit: RateLimitUnit): LimitSpec {
    const envoy = this.config.gateway.envoy
    return { algo: envoy.algo, requestsPerUnit, unit, syncRate: envoy.algo === 'sliding-window-counter-algo' ? envoy.syncRate : 0 }
  }

  /** Flushes and stops the counter engines `next` does not keep. */
  async close(next: EnvoyAlgorithms | undefined): Promise<void> {
    const kept = new Set(next?.engines.values() ?? [])
    const closing = [...this.engines.values()].filter((e) => !kept.has(e)).map((e) => e.close())
    const results = await Promise.allSettled(closing)
    const failed = results.find((r) => r.status === 'rejected')
    if (failed !== undefined) throw (failed as PromiseRejectedResult).reason
  }

  private async make(spec: LimitSpec, scope: 'rule' | 'override', previous: EnvoyAlgorithms | undefined): Promise<RateLimitAlgorithm> {
    const windowMs = UNIT_SECONDS[spec.unit] * 1000
    const limit = spec.requestsPerUnit
    const clock = this.hooks.clock ?? Date.now
    const redis = this.store.redis
    const timeoutMs = this.config.store.timeoutMs
    const keys = { prefix: `${this.config.keyPrefix}~envoy`, scope, hashTag: this.config.hashTag }
    const rememberDenials = this.config.store.rememberDenials !== false
    switch (spec.algo) {
      case 'fixed-window-algo':
        return redis === undefined
          ? new MemoryFixedWindow({ limit, windowMs, clock })
          : new RedisFixedWindow({ client: redis, limit, windowMs, clock, timeoutMs, rememberDenials, ...keys })
      case 'sliding-window-algo':
        return redis === undefined
          ? new MemorySlidingLog({ limit, windowMs, clock })
          : new RedisSlidingLog({ client: redis, limit, windowMs, clock, timeoutMs, rememberDenials, ...keys })
      case 'sliding-window-counter-algo': {
        const group = engineGroup(spec)
        let engine = this.engines.get(group) ?? previous?.engines.get(group)
        if (engine === undefined) {
          engine = new CounterEngine({
            namespace: group,
            windowSize: UNIT_SECONDS[spec.unit],
            syncRate: spec.syncRate,
            strategy: spec.syncRate < 0 ? undefined : await this.store.strategy(),
            storeTimeoutMs: timeoutMs,
            ...(this.hooks.clock !== undefined ? { clock: this.hooks.clock } : {}),
            onStoreError: 'deny',
            onError: (err) => this.hooks.onStoreError('sync', err),
          })
        }
        this.engines.set(group, engine)
        return new CounterAlgorithm(engine, limit)
      }
    }
  }
}

function specOf(rule: DomainRule, config: ServiceConfig): LimitSpec {
  const envoy = config.gateway.envoy
  const algo = rule.algorithm
  return {
    algo,
    requestsPerUnit: rule.requestsPerUnit,
    unit: rule.unit as RateLimitUnit,
    syncRate: algo === 'sliding-window-counter-algo' ? (rule.syncRate ?? envoy.syncRate) : 0,
  }
}

// What identifies a descriptor's own limit's algorithm: the same id on a reload keeps it.
function overrideId(spec: LimitSpec): string {
  return `${spec.algo}/${spec.requestsPerUnit}/${spec.unit}/${spec.syncRate}`
}

// One engine per window and sync rate; its namespace starts with "~", which no policy name does.
function engineGroup(spec: LimitSpec): string {
  return `~envoy-${UNIT_SECONDS[spec.unit]}s-${spec.syncRate}`
}
