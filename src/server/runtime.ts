import { MemoryFixedWindow } from '../algorithms/fixed-window-memory.js'
import { RedisFixedWindow } from '../algorithms/fixed-window-redis.js'
import { MemorySlidingLog } from '../algorithms/sliding-log-memory.js'
import { RedisSlidingLog } from '../algorithms/sliding-log-redis.js'
import type { RateLimitAlgorithm } from '../algorithms/types.js'
import type { Clock } from '../core/clock.js'
import type { HeaderMode } from '../core/headers.js'
import { KeyLists } from '../core/key-lists.js'
import { keyNormalizer } from './key-normalization.js'
import { TokenAuth } from './auth.js'
import type { AlgorithmName, FailPolicy, PolicyConfig, ServiceConfig } from './config.js'
import { CounterAlgorithm, CounterEngine } from './counter-algorithm.js'
import type { DomainConfigSet } from './gateway/domains.js'
import { EnvoyAlgorithms } from './gateway/envoy-rules.js'
import { PolicyOverrides, RuntimeOverrides } from './overrides.js'
import { openOverrideBackend } from './overrides-store.js'
import { openStore, type StoreHandle, storeSignature } from './stores.js'

/** A policy ready to decide: its config and its algorithm. */
export interface Policy {
  readonly name: string
  readonly algo: AlgorithmName
  readonly limit: number
  /** Window, seconds. */
  readonly windowSize: number
  readonly algorithm: RateLimitAlgorithm
  /** The counter algorithm's engine, for the sync metrics. */
  readonly engine: CounterEngine | undefined
  /** The counter admits only against budgets the store granted (`escrow`). */
  readonly escrow: boolean
  /** What a request gets when the store fails (the policy's `on-store-error`). */
  readonly onStoreError: FailPolicy
  /** Decided and counted as usual, but answered as allowed (the policy's or the global `shadow-mode`). */
  readonly shadowMode: boolean
  /** The policy's deny and allow lists, checked before the algorithm; undefined when it has none. */
  readonly lists: KeyLists | undefined
  /** Per-user limits (the config's and the runtime ones): `overrides.resolve(userId)` is the policy to decide with. */
  readonly overrides: PolicyOverrides
}

/** Hooks a runtime reports through, and what it runs on. */
export interface RuntimeHooks {
  /** A store failure outside a request (connection errors, background syncs). */
  readonly onStoreError: (operation: string, error: Error) => void
  /** The algorithms' clock, epoch ms (tests move it). @default Date.now */
  readonly clock?: Clock
}

/**
 * Everything one config needs to answer requests: its store connections and its policies.
 * A reload builds a new runtime from the old one, keeping the store connections and the
 * counters of every policy whose algorithm, window and store did not change, so a reload that
 * only edits a limit (or auth, or another policy) forgets no one's usage.
 */
export class Runtime {
  readonly config: ServiceConfig
  readonly store: StoreHandle
  readonly policies: ReadonlyMap<string, Policy>
  readonly defaultPolicy: Policy
  readonly headerMode: HeaderMode
  readonly auth: TokenAuth
  /** Counter state by signature (policy name, algorithm, window, sync rate, store): what a reload can carry over. */
  readonly states: ReadonlyMap<string, RateLimitAlgorithm>
  /** The algorithms of the Envoy domain files' rules (an empty rule set without `envoy.domains`). */
  readonly envoy: EnvoyAlgorithms
  /** Puts a key (a user id, a descriptor's entry) in the form keys are compared in (`key-normalization`). */
  readonly normalizeKey: (key: string) => string
  /** The runtime overrides of the store (kept by a reload that keeps the store). */
  readonly overrides: RuntimeOverrides
  private inflight = 0
  private retired: (() => void) | undefined

  private constructor(
    config: ServiceConfig,
    store: StoreHandle,
    policies: Map<string, Policy>,
    states: Map<string, RateLimitAlgorithm>,
    envoy: EnvoyAlgorithms,
    overrides: RuntimeOverrides,
  ) {
    this.config = config
    this.overrides = overrides
    this.envoy = envoy
    this.store = store
    this.policies = policies
    this.defaultPolicy = policies.get('default') as Policy
    this.headerMode = config.server.headers
    this.auth = new TokenAuth(config.auth)
    this.normalizeKey = keyNormalizer(config.keyNormalization)
    this.states = states
  }

  /**
   * Builds the runtime of `config` and its Envoy `domains` (loaded by the caller, so a bad
   * domain file is a config error), reusing what `previous` holds for unchanged parts.
   */
  static async create(
    config: ServiceConfig,
    hooks: RuntimeHooks,
    previous: Runtime | undefined,
    domains: DomainConfigSet,
  ): Promise<Runtime> {
    const counterRules = [...domains.rules()].some(
      (r) => r.algorithm === 'sliding-window-counter-algo' && (r.syncRate ?? config.gateway.envoy.syncRate) >= 0,
    )
    const needsStrategy =
      counterRules || [...config.policies.values()].some((p) => p.algo === 'sliding-window-counter-algo' && p.syncRate >= 0)
    const storeOptions = {
      needsStrategy,
      keyPrefix: config.keyPrefix,
      onError: (err: Error) => hooks.onStoreError('connection', err),
    }
    let store: StoreHandle
    const sameStore = previous !== undefined && previous.store.signature === storeSignature(config.store, config.keyPrefix)
    if (sameStore) {
      store = previous.store
      if (needsStrategy) await store.strategy()
    } else {
      store = await openStore(config.store, storeOptions)
    }
    const policies = new Map<string, Policy>()
    const states = new Map<string, RateLimitAlgorithm>()
    const made: CounterEngine[] = []
    let overrides: RuntimeOverrides | undefined = sameStore ? previous?.overrides : undefined
    try {
      if (overrides === undefined) {
        const onError = (err: Error) => hooks.onStoreError('overrides', err)
        overrides = new RuntimeOverrides(await openOverrideBackend(config, store, onError), onError)
        await overrides.start(config.overridesRefresh)
      }
      for (const p of config.policies.values()) {
        const signature = stateSignature(p, store, config.hashTag)
        const kept = sameStore ? previous?.states.get(signature) : undefined
        let algorithm: RateLimitAlgorithm
        if (kept !== undefined) {
          algorithm = kept.limit === p.maxRequests ? kept : kept.withLimit(p.maxRequests)
        } else {
          algorithm = await makeAlgorithm(p, config, store, hooks)
          if (algorithm instanceof CounterAlgorithm) made.push(algorithm.engine)
        }
        states.set(signature, algorithm)
        // the config's ids and list entries in the form requests are compared in (key-normalization)
        const key = keyNormalizer(config.keyNormalization)
        const perUser = new PolicyOverrides(p.name, new Map([...p.overrides].map(([id, max]) => [key(id), max])), overrides)
        const policy: Policy = {
          name: p.name,
          algo: p.algo,
          limit: p.maxRequests,
          windowSize: p.windowSize,
          algorithm,
          engine: algorithm instanceof CounterAlgorithm ? algorithm.engine : undefined,
          escrow: p.escrow,
          onStoreError: p.onStoreError,
          shadowMode: p.shadowMode || config.gateway.shadowMode,
          lists: KeyLists.compile(p.denyList.map(key), p.allowList.map(key), {
            deny: `${p.name}.deny-list`,
            allow: `${p.name}.allow-list`,
          }),
          overrides: perUser,
        }
        perUser.bind(policy)
        policies.set(p.name, policy)
      }
    } catch (err) {
      await Promise.allSettled(made.map((e) => e.close()))
      if (!sameStore) await Promise.allSettled([overrides?.close(), store.close()])
      throw err
    }
    let envoy: EnvoyAlgorithms
    try {
      envoy = await EnvoyAlgorithms.create(domains, config, store, hooks, sameStore ? previous?.envoy : undefined)
    } catch (err) {
      await Promise.allSettled(made.map((e) => e.close()))
      if (!sameStore) await Promise.allSettled([overrides.close(), store.close()])
      throw err
    }
    // a kept store keeps its poll; `overrides-refresh` may have changed
    overrides.poll(config.overridesRefresh)
    return new Runtime(config, store, policies, states, envoy, overrides)
  }

  /** Marks a request as using this runtime. */
  enter(): void {
    this.inflight++
  }

  /** Marks a request as done with this runtime. */
  leave(): void {
    if (--this.inflight === 0 && this.retired !== undefined) this.retired()
  }

  /**
   * Closes what `next` did not take over, once the requests still using this runtime are done:
   * engines are flushed (their unsynced counts reach the store), connections closed.
   */
  async retire(next: Runtime | undefined): Promise<void> {
    if (this.inflight > 0) await new Promise<void>((resolve) => (this.retired = resolve))
    const keptEngines = new Set<CounterEngine>()
    if (next !== undefined) for (const p of next.policies.values()) if (p.engine !== undefined) keptEngines.add(p.engine)
    const closing: Promise<unknown>[] = []
    for (const p of this.policies.values()) if (p.engine !== undefined && !keptEngines.has(p.engine)) closing.push(p.engine.close())
    closing.push(this.envoy.close(next?.envoy))
    if (next?.store !== this.store) closing.push(this.overrides.close())
    const results = await Promise.allSettled(closing)
    if (next?.store !== this.store) await this.store.close()
    const failed = results.find((r) => r.status === 'rejected')
    if (failed !== undefined) throw (failed as PromiseRejectedResult).reason
  }
}

function stateSignature(p: PolicyConfig, store: StoreHandle, hashTag: boolean): string {
  const sync = p.algo === 'sliding-window-counter-algo' ? p.syncRate : 0
  // namespace options of the counter's engine: a change makes a new engine, as a new sync rate does
  const escrow = p.escrow ? (p.onStoreError === 'share' ? 'escrow-share' : 'escrow') : ''
  // the hash tag changes the seed algorithms' Redis keys, so their counts do not carry over
  const tag = store.redis !== undefined && p.algo !== 'sliding-window-counter-algo' && hashTag
  return JSON.stringify([p.name, p.algo, p.windowSize, sync, store.signature, tag, escrow])
}

async function makeAlgorithm(p: PolicyConfig, config: ServiceConfig, store: StoreHandle, hooks: RuntimeHooks): Promise<RateLimitAlgorithm> {
  const windowMs = p.windowSize * 1000
  const redis = store.redis
  const timeoutMs = config.store.timeoutMs
  const clock = hooks.clock ?? Date.now
  // The default policy writes the seed's exact keys; a named policy has keys of its own, so no
  // user id of one policy can name another's key (docs/SERVICE.md, "Redis keys").
  const keys = {
    prefix: config.keyPrefix,
    ...(p.name === 'default' ? {} : { scope: p.name }),
    hashTag: config.hashTag,
  }
  const rememberDenials = config.store.rememberDenials !== false
  switch (p.algo) {
    case 'fixed-window-algo':
      return redis === undefined
        ? new MemoryFixedWindow({ limit: p.maxRequests, windowMs, clock })
        : new RedisFixedWindow({ client: redis, limit: p.maxRequests, windowMs, clock, timeoutMs, rememberDenials, ...keys })
    case 'sliding-window-algo':
      return redis === undefined
        ? new MemorySlidingLog({ limit: p.maxRequests, windowMs, clock })
        : new RedisSlidingLog({ client: redis, limit: p.maxRequests, windowMs, clock, timeoutMs, rememberDenials, ...keys })
    case 'sliding-window-counter-algo': {
      const engine = new CounterEngine({
        namespace: p.name,
        windowSize: p.windowSize,
        syncRate: p.syncRate,
        strategy: p.syncRate < 0 ? undefined : await store.strategy(),
        storeTimeoutMs: timeoutMs,
        ...(hooks.clock !== undefined ? { clock: hooks.clock } : {}),
        escrow: p.escrow,
        // a failed store (synchronous mode, or escrow without a grant) is reported on the decision,
        // and the policy's on-store-error answers; share is decided by the engine itself
        onStoreError: p.escrow && p.onStoreError === 'share' ? 'share' : 'deny',
        onError: (err) => hooks.onStoreError('sync', err),
      })
      return new CounterAlgorithm(engine, p.maxRequests)
    }
  }
}
