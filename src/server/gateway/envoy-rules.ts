import { MemoryFixedWindow } from '../../algorithms/fixed-window-memory.js'
import { RedisFixedWindow } from '../../algorithms/fixed-window-redis.js'
import { MemorySlidingLog } from '../../algorithms/sliding-log-memory.js'
import { RedisSlidingLog } from '../../algorithms/sliding-log-redis.js'
import type { RateLimitAlgorithm } from '../../algorithms/types.js'
import type { AlgorithmName, ServiceConfig } from '../config.js'
import { CounterAlgorithm, CounterEngine } from '../counter-algorithm.js'
import type { RuntimeHooks } from '../runtime.js'
import type { StoreHandle } from '../stores.js'
import { type DomainConfigSet, type DomainRule, type RateLimitUnit, ruleEscrow, UNIT_SECONDS } from './domains.js'

// The algorithms behind the rules of Envoy's domain files: one per rule, built when a config is
// applied, and kept across reloads for rules whose algorithm, window and store did not change.

/** What identifies a counter's algorithm: a rule's (or a request's limit override's) limit, window and algorithm. */
export interface LimitSpec {
  readonly algo: AlgorithmName
  readonly requestsPerUnit: number
  readonly unit: RateLimitUnit
  readonly syncRate: number
  /** The counter admits only against granted budgets; `share`: and decides so when no grant can be had. */
  readonly escrow: false | 'escrow' | 'share'
}

/**
 * Distinct descriptor limits (a descriptor's own `limit`) one runtime keeps an algorithm object
 * for; past it the least recently used is dropped. Dropping loses no count: every limit of one
 * algorithm, unit and sync rate is a `withLimit` variant of one base algorithm, which holds the
 * counters, and a dropped limit used again gets a new variant of the same base.
 */
export const MAX_OVERRIDE_LIMITS = 1024

export class EnvoyAlgorithms {
  readonly domains: DomainConfigSet
  /** Algorithms by rule id. */
  private readonly byRule = new Map<number, RateLimitAlgorithm>()
  /**
   * Base algorithms of descriptors' own limits, one per algorithm, unit and sync rate
   * ({@link overrideFamily}): they hold the counters, and are carried over like the rules'. At
   * most 3 algorithms × 7 units, since the sync rate is the config's.
   */
  private readonly overrideBases = new Map<string, { readonly spec: LimitSpec; readonly algorithm: RateLimitAlgorithm }>()
  /** Each limit's variant of its base, by {@link overrideId}, least recently used first. */
  private readonly overrides = new Map<string, RateLimitAlgorithm>()
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
        const signature = JSON.stringify(['rule', rule.domain, rule.statsKey, spec.algo, spec.unit, spec.syncRate, spec.escrow])
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
   * The algorithm of a descriptor's own limit: a variant of its family's base algorithm (the
   * domain files' default algorithm), made on first use. Never refuses: past
   * {@link MAX_OVERRIDE_LIMITS} distinct limits the least recently used variant is dropped, and
   * its counts stay in the base.
   */
  async ofOverride(requestsPerUnit: number, unit: RateLimitUnit): Promise<RateLimitAlgorithm> {
    const spec = this.overrideSpec(requestsPerUnit, unit)
    const id = overrideId(spec)
    const known = this.overrides.get(id)
    if (known !== undefined) {
      // a Map iterates in insertion order: moved to the end, it is the most recently used
      this.overrides.delete(id)
      this.overrides.set(id, known)
      return known
    }
    const family = overrideFamily(spec)
    let base = this.overrideBases.get(family)?.algorithm
    if (base === undefined) {
      const made = await this.make(spec, 'override', undefined)
      // two requests may have made it at once: keep the first
      base = this.overrideBases.get(family)?.algorithm
      if (base === undefined) {
        base = made
        this.overrideBases.set(family, { spec, algorithm: made })
      }
    }
    const raced = this.overrides.get(id)
    if (raced !== undefined) return raced
    const algorithm = base.limit === requestsPerUnit ? base : base.withLimit(requestsPerUnit)
    if (this.overrides.size >= MAX_OVERRIDE_LIMITS) this.overrides.delete(this.overrides.keys().next().value as string)
    this.overrides.set(id, algorithm)
    return algorithm
  }

  /** Distinct descriptor limits with an algorithm object now (at most {@link MAX_OVERRIDE_LIMITS}). */
  overrideLimits(): number {
    return this.overrides.size
  }

  /**
   * Takes over `previous`'s base algorithms of descriptors' own limits whose algorithm and sync
   * rate the config still gives them, with their counts (on the memory store, the counts
   * themselves); their variants are made again on first use.
   */
  private keepOverrides(previous: EnvoyAlgorithms): void {
    for (const [family, kept] of previous.overrideBases) {
      if (overrideFamily(this.overrideSpec(kept.spec.requestsPerUnit, kept.spec.unit)) !== family) continue
      this.overrideBases.set(family, kept)
      if (kept.algorithm instanceof CounterAlgorithm) this.engines.set(engineGroup(kept.spec), kept.algorithm.engine)
    }
  }

  private overrideSpec(requestsPerUnit: number, unit: RateLimitUnit): LimitSpec {
    const envoy = this.config.gateway.envoy
    const counter = envoy.algo === 'sliding-window-counter-algo'
    return {
      algo: envoy.algo,
      requestsPerUnit,
      unit,
      syncRate: counter ? envoy.syncRate : 0,
      escrow: counter && envoy.escrow ? escrowMode(this.config) : false,
    }
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
            escrow: spec.escrow !== false,
            // a failure is reported on the decision and on-store-error answers; share is the engine's
            onStoreError: spec.escrow === 'share' ? 'share' : 'deny',
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
    escrow: ruleEscrow(rule, envoy) ? escrowMode(config) : false,
  }
}

// An escrow counter's mode: whether it decides a store failure itself (on-store-error share).
function escrowMode(config: ServiceConfig): 'escrow' | 'share' {
  return config.gateway.envoy.onStoreError === 'share' ? 'share' : 'escrow'
}

// What identifies the counters of descriptors' own limits: every limit of one family counts in
// one base algorithm, as the reference's cache key holds no limit; the same family on a reload keeps it.
function overrideFamily(spec: LimitSpec): string {
  return `${spec.algo}/${spec.unit}/${spec.syncRate}${spec.escrow === false ? '' : `/${spec.escrow}`}`
}

// What identifies one limit's variant of its family's base.
function overrideId(spec: LimitSpec): string {
  return `${overrideFamily(spec)}/${spec.requestsPerUnit}`
}

// One engine per window, sync rate and escrow mode (namespace options); its namespace starts with
// "~", which no policy name does.
function engineGroup(spec: LimitSpec): string {
  return `~envoy-${UNIT_SECONDS[spec.unit]}s-${spec.syncRate}${spec.escrow === false ? '' : `-${spec.escrow}`}`
}
