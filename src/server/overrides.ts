import { Gauge, type Registry } from 'prom-client'
import type { OverrideBackend, OverrideSnapshot } from './overrides-store.js'
import type { Policy, Runtime } from './runtime.js'

// Per-user limits in the service: the config's `overrides` of each policy, and the runtime
// overrides that PUT /v1/overrides/{policy}/{userId} keeps in the store, so every instance
// applies them (a runtime override wins over the config's). A decision for a user with an
// override runs the policy's algorithm with that limit: the same counters, another limit.

/** Distinct limits a policy holds an algorithm for at once; past it the cache starts over. */
export const MAX_LIMIT_VARIANTS = 4096

/** Runtime overrides one policy may have (a PUT past it gets 409). */
export const MAX_RUNTIME_OVERRIDES = 100_000

/** Where an override comes from, as GET /v1/overrides/{policy} marks it. */
export type OverrideSource = 'config' | 'runtime'

/** One override in force. */
export interface OverrideEntry {
  readonly userId: string
  readonly maxRequests: number
  readonly source: OverrideSource
  /** The config's value, when a runtime override hides one. */
  readonly configMaxRequests?: number
}

/**
 * The runtime overrides of one store, shared by the runtimes of every config that uses that
 * store (a reload that keeps the store keeps them and their poll): the last version read, and
 * a poll that reads the version every `overrides-refresh` seconds and loads the whole set only
 * when it moved. When the store fails, decisions keep the last overrides read.
 */
export class RuntimeOverrides {
  /** Moves whenever the overrides in force change: a policy re-reads its map when it did. */
  generation = 0
  private byPolicy = new Map<string, Map<string, number>>()
  private known = -1
  // local writes so far: a load that started before one must not undo it
  private writes = 0
  private refreshing: Promise<void> | undefined
  private timer: NodeJS.Timeout | undefined
  private everyMs = 0
  private closed = false

  /** `backend` undefined: the store cannot hold runtime overrides (memcached). */
  constructor(
    readonly backend: OverrideBackend | undefined,
    private readonly onError: (err: Error) => void,
  ) {}

  /** Reads them once (a failure is reported, not thrown: the service starts with none) and polls every `seconds`. */
  async start(seconds: number): Promise<void> {
    await this.refresh().catch((err: unknown) => this.onError(err as Error))
    this.poll(seconds)
  }

  /** Polls every `seconds` (a reload may change `overrides-refresh`). */
  poll(seconds: number): void {
    const ms = Math.round(seconds * 1000)
    if (this.backend === undefined || this.closed || ms === this.everyMs) return
    if (this.timer !== undefined) clearInterval(this.timer)
    this.everyMs = ms
    this.timer = setInterval(() => void this.refresh().catch((err: unknown) => this.onError(err as Error)), ms)
    this.timer.unref()
  }

  /** The runtime overrides of `policy` (user id → max-requests), or undefined when it has none. */
  of(policy: string): ReadonlyMap<string, number> | undefined {
    return this.byPolicy.get(policy)
  }

  /** Reads the version, and every override when it moved; one read at a time. Rejects with a StoreError. */
  refresh(): Promise<void> {
    if (this.backend === undefined || this.closed) return Promise.resolve()
    this.refreshing ??= this.reread(this.backend).finally(() => (this.refreshing = undefined))
    return this.refreshing
  }

  /** Sets an override in the store, then here at once (other instances see it at their next poll). */
  async set(policy: string, userId: string, maxRequests: number): Promise<void> {
    const version = await (this.backend as OverrideBackend).set({ policy, userId, maxRequests })
    this.writes++
    let map = this.byPolicy.get(policy)
    if (map === undefined) this.byPolicy.set(policy, (map = new Map()))
    map.set(userId, maxRequests)
    this.changed(version)
  }

  /** Removes an override from the store, then here; false when the store had none. */
  async remove(policy: string, userId: string): Promise<boolean> {
    const version = await (this.backend as OverrideBackend).remove(policy, userId)
    if (version === undefined) return false
    this.writes++
    this.byPolicy.get(policy)?.delete(userId)
    this.changed(version)
    return true
  }

  /** Stops polling and closes the backend's connections (not the store's). */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer !== undefined) clearInterval(this.timer)
    await this.backend?.close()
  }

  private async reread(backend: OverrideBackend): Promise<void> {
    const writes = this.writes
    const version = await backend.version()
    if (version === this.known) return
    const snapshot = await backend.load()
    // a write of ours landed meanwhile: this snapshot may predate it; the next poll reads again
    if (this.closed || writes !== this.writes) return
    this.apply(snapshot)
  }

  private apply(snapshot: OverrideSnapshot): void {
    const byPolicy = new Map<string, Map<string, number>>()
    for (const { policy, userId, maxRequests } of snapshot.entries) {
      let map = byPolicy.get(policy)
      if (map === undefined) byPolicy.set(policy, (map = new Map()))
      map.set(userId, maxRequests)
    }
    this.byPolicy = byPolicy
    this.known = snapshot.version
    this.generation++
  }

  // Our write made `version`: when it follows the one we know, nothing else was missed.
  private changed(version: number): void {
    if (version === this.known + 1) this.known = version
    this.generation++
  }
}

/**
 * The overrides of one policy of a runtime: the config's and the runtime ones, and one policy
 * object per distinct limit in use (the policy's algorithm `withLimit`, sharing its counters),
 * so a decision never makes an object.
 */
export class PolicyOverrides {
  private base: Policy | undefined
  private seen = -1
  private runtime: ReadonlyMap<string, number> | undefined
  private none = true
  private readonly variants = new Map<number, Policy>()

  constructor(
    readonly policy: string,
    readonly config: ReadonlyMap<string, number>,
    readonly shared: RuntimeOverrides,
  ) {}

  /** Sets the policy the overrides apply to (made after this object, which it holds). */
  bind(base: Policy): void {
    this.base = base
  }

  /** The policy with the limit that applies to `userId`: the policy itself when it has no override. */
  resolve(userId: string): Policy {
    if (this.seen !== this.shared.generation) this.reread()
    const base = this.base as Policy
    if (this.none) return base
    const limit = this.runtime?.get(userId) ?? this.config.get(userId)
    if (limit === undefined || limit === base.limit) return base
    let variant = this.variants.get(limit)
    if (variant === undefined) {
      if (this.variants.size >= MAX_LIMIT_VARIANTS) this.variants.clear()
      variant = { ...base, limit, algorithm: base.algorithm.withLimit(limit) }
      this.variants.set(limit, variant)
    }
    return variant
  }

  /** Every override in force, sorted by user id. */
  list(): OverrideEntry[] {
    const runtime = this.shared.of(this.policy) ?? new Map<string, number>()
    const out: OverrideEntry[] = []
    for (const [userId, maxRequests] of this.config) if (!runtime.has(userId)) out.push({ userId, maxRequests, source: 'config' })
    for (const [userId, maxRequests] of runtime) {
      const configured = this.config.get(userId)
      out.push({ userId, maxRequests, source: 'runtime', ...(configured !== undefined ? { configMaxRequests: configured } : {}) })
    }
    return out.sort((a, b) => (a.userId < b.userId ? -1 : a.userId > b.userId ? 1 : 0))
  }

  /** How many overrides are in force, by source (a runtime one that hides the config's counts once, as runtime). */
  counts(): Record<OverrideSource, number> {
    const runtime = this.shared.of(this.policy)
    let hidden = 0
    if (runtime !== undefined) for (const userId of runtime.keys()) if (this.config.has(userId)) hidden++
    return { config: this.config.size - hidden, runtime: runtime?.size ?? 0 }
  }

  private reread(): void {
    this.seen = this.shared.generation
    this.runtime = this.shared.of(this.policy)
    this.none = this.config.size === 0 && (this.runtime === undefined || this.runtime.size === 0)
  }
}

/** The policy with the limit that applies to `userId` (its override's, or its own). */
export function withOverride(policy: Policy, userId: string): Policy {
  return policy.overrides.resolve(userId)
}

/** Registers `ratelimiting_overrides{policy,source}`: the overrides in force in the running config. */
export function registerOverridesGauge(registry: Registry, current: () => Runtime | undefined): void {
  new Gauge({
    name: 'ratelimiting_overrides',
    help: 'Per-user limit overrides in force, by policy and source (config: the YAML overrides; runtime: set by PUT /v1/overrides).',
    labelNames: ['policy', 'source'],
    registers: [registry],
    collect() {
      this.reset()
      const runtime = current()
      if (runtime === undefined) return
      for (const p of runtime.policies.values()) {
        const counts = p.overrides.counts()
        this.set({ policy: p.name, source: 'config' }, counts.config)
        this.set({ policy: p.name, source: 'runtime' }, counts.runtime)
      }
    },
  })
}
