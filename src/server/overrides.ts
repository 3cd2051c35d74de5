import { Counter, Gauge, type Registry } from 'prom-client'
import type { OverrideBackend, OverrideWrite } from './overrides-store.js'
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

/** How the refreshes went, since this store's overrides were opened. */
export interface RefreshCounts {
  /** Refreshes that found the version where it was. */
  unchanged: number
  /** Refreshes that read only the overrides changed since (the change log). */
  changes: number
  /** Refreshes that read every override (the first, and when the log could not answer). */
  full: number
  /** Overrides read by the refreshes of changes. */
  changedRead: number
  /** Overrides read by the full refreshes. */
  fullRead: number
}

/** A write of ours made while a read was under way: the read may predate it. */
interface OwnWrite {
  readonly version: number
  readonly policy: string
  readonly userId: string
  /** undefined: removed. */
  readonly maxRequests: number | undefined
}

/**
 * The runtime overrides of one store, shared by the runtimes of every config that uses that
 * store (a reload that keeps the store keeps them and their poll): the version they were read
 * at, and a poll every `overrides-refresh` seconds that asks the store what changed since then
 * and applies only that (the whole set at the first read, and when the store's change log
 * cannot answer). When the store fails, decisions keep the last overrides read.
 */
export class RuntimeOverrides {
  /** Moves whenever the overrides in force change: a policy re-reads its map when it did. */
  generation = 0
  /** What the refreshes read (ratelimiting_overrides_refreshes_total and _read_total). */
  readonly counts: RefreshCounts = { unchanged: 0, changes: 0, full: 0, changedRead: 0, fullRead: 0 }
  private byPolicy = new Map<string, Map<string, number>>()
  // the store's version the overrides here reflect, and the stamp of its write (its log entry)
  private known = -1
  private knownStamp = ''
  // our writes made while a read is under way (undefined between reads)
  private ownWrites: OwnWrite[] | undefined
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

  /** Reads what changed in the store since the last read (everything the first time); one read at a time. Rejects with a StoreError. */
  refresh(): Promise<void> {
    if (this.backend === undefined || this.closed) return Promise.resolve()
    this.refreshing ??= this.reread(this.backend).finally(() => (this.refreshing = undefined))
    return this.refreshing
  }

  /** Sets an override in the store, then here at once (other instances see it at their next poll). */
  async set(policy: string, userId: string, maxRequests: number): Promise<void> {
    this.wrote(await (this.backend as OverrideBackend).set({ policy, userId, maxRequests }), policy, userId, maxRequests)
  }

  /** Removes an override from the store, then here; false when the store had none. */
  async remove(policy: string, userId: string): Promise<boolean> {
    const write = await (this.backend as OverrideBackend).remove(policy, userId)
    if (write === undefined) return false
    this.wrote(write, policy, userId, undefined)
    return true
  }

  /** Stops polling and closes the backend's connections (not the store's). */
  async close(): Promise<void> {
    this.closed = true
    if (this.timer !== undefined) clearInterval(this.timer)
    await this.backend?.close()
  }

  private async reread(backend: OverrideBackend): Promise<void> {
    const own: OwnWrite[] = (this.ownWrites = [])
    try {
      const from = this.known
      if (backend.changesSince !== undefined && from >= 0) {
        const since = await backend.changesSince(from, this.knownStamp)
        if (this.closed) return
        if (since.changes !== undefined) {
          if (since.version === from) this.counts.unchanged++
          else {
            this.counts.changes++
            this.counts.changedRead += since.changes.length
          }
          // our own writes may have taken us to that version or past it meanwhile (see wrote)
          if (since.version <= this.known) return
          for (const { policy, userId, maxRequests } of since.changes) this.put(policy, userId, maxRequests)
          this.known = since.version
          this.knownStamp = since.stamp
          this.settle(own, since.version)
          return
        }
      } else if (this.known >= 0 && (await backend.version()) === this.known) {
        this.counts.unchanged++
        return
      }
      const snapshot = await backend.load()
      if (this.closed) return
      this.counts.full++
      this.counts.fullRead += snapshot.entries.length
      const byPolicy = new Map<string, Map<string, number>>()
      for (const { policy, userId, maxRequests } of snapshot.entries) {
        let map = byPolicy.get(policy)
        if (map === undefined) byPolicy.set(policy, (map = new Map()))
        map.set(userId, maxRequests)
      }
      this.byPolicy = byPolicy
      this.known = snapshot.version
      this.knownStamp = snapshot.stamp
      this.settle(own, snapshot.version)
    } finally {
      this.ownWrites = undefined
    }
  }

  // After a read at `version`: our writes made meanwhile that came after it apply again (the
  // read predates them; the next read, from `version`, reads them back from the store).
  private settle(own: readonly OwnWrite[], version: number): void {
    for (const w of own) if (w.version > version) this.put(w.policy, w.userId, w.maxRequests)
    this.generation++
  }

  private put(policy: string, userId: string, maxRequests: number | undefined): void {
    let map = this.byPolicy.get(policy)
    if (maxRequests === undefined) {
      map?.delete(userId)
      return
    }
    if (map === undefined) this.byPolicy.set(policy, (map = new Map()))
    map.set(userId, maxRequests)
  }

  // Our write made `write.version`. Applied here unless what we hold was read at that version or
  // later (it holds this write, or a later one of the same override). When it follows the version
  // we hold, we now hold that version: nothing else was missed.
  private wrote(write: OverrideWrite, policy: string, userId: string, maxRequests: number | undefined): void {
    if (write.version <= this.known) return
    this.ownWrites?.push({ version: write.version, policy, userId, maxRequests })
    this.put(policy, userId, maxRequests)
    if (write.version === this.known + 1) {
      this.known = write.version
      this.knownStamp = write.stamp
    }
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

/**
 * Registers `ratelimiting_overrides{policy,source}`: the overrides in force in the running config;
 * and what the runtime overrides' refreshes read, `ratelimiting_overrides_refreshes_total{result}`
 * and `ratelimiting_overrides_read_total{refresh}` (counted since the store's overrides were
 * opened: they restart at a reload that changes the store).
 */
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
  new Counter({
    name: 'ratelimiting_overrides_refreshes_total',
    help: 'Refreshes of the runtime overrides from the store, by result: unchanged (the version had not moved), changes (only the overrides changed since were read), full (every override was read).',
    labelNames: ['result'],
    registers: [registry],
    collect() {
      this.reset()
      const counts = current()?.overrides.counts
      if (counts === undefined) return
      this.inc({ result: 'unchanged' }, counts.unchanged)
      this.inc({ result: 'changes' }, counts.changes)
      this.inc({ result: 'full' }, counts.full)
    },
  })
  new Counter({
    name: 'ratelimiting_overrides_read_total',
    help: 'Runtime overrides read from the store by the refreshes, by refresh: changes or full.',
    labelNames: ['refresh'],
    registers: [registry],
    collect() {
      this.reset()
      const counts = current()?.overrides.counts
      if (counts === undefined) return
      this.inc({ refresh: 'changes' }, counts.changedRead)
      this.inc({ refresh: 'full' }, counts.fullRead)
    },
  })
}
