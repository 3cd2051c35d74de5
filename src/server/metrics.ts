import { Counter, collectDefaultMetrics, Gauge, type Metric, Registry } from 'prom-client'
import { GatewayMetrics } from './gateway/gateway-metrics.js'
import { LatencyHistogram, type MetricValue } from './latency-histogram.js'
import { registerOverridesGauge } from './overrides.js'
import type { Policy, Runtime } from './runtime.js'

export { LATENCY_BUCKETS } from './latency-histogram.js'

/** How a decision ended, as the `outcome` label. */
export type Outcome = 'allowed' | 'denied' | 'shadow_denied' | 'store_error' | 'failed_open' | 'failed_closed' | 'denylist' | 'allowlist'

const OUTCOMES: readonly Outcome[] = [
  'allowed',
  'denied',
  'shadow_denied',
  'store_error',
  'failed_open',
  'failed_closed',
  'denylist',
  'allowlist',
]

/**
 * The decisions and latencies of one policy and algorithm, as plain numbers: the request path
 * adds to fields and a bucket array, and /metrics reads them. prom-client's own `inc` and
 * `observe` validate and hash labels on every call, which cost more than a memory decision.
 */
export class DecisionTally {
  readonly policy: string
  readonly algorithm: string
  readonly outcomes: Record<Outcome, number> = {
    allowed: 0,
    denied: 0,
    shadow_denied: 0,
    store_error: 0,
    failed_open: 0,
    failed_closed: 0,
    denylist: 0,
    allowlist: 0,
  }
  readonly latency = new LatencyHistogram()

  constructor(policy: string, algorithm: string) {
    this.policy = policy
    this.algorithm = algorithm
  }

  /** Records one decision that took `seconds`. */
  record(outcome: Outcome, seconds: number): void {
    this.outcomes[outcome]++
    this.latency.observe(seconds)
  }
}

/**
 * The service's Prometheus metrics, in a registry of its own (two services in one process do
 * not share counters).
 */
export class ServiceMetrics {
  readonly registry = new Registry()
  private readonly tallies = new Map<string, DecisionTally>()
  private readonly byPolicy = new WeakMap<Policy, DecisionTally>()
  private readonly storeErrors: Counter<'store' | 'operation'>
  private readonly reloads: Counter<'result'>
  private readonly refused: Counter
  private openConnections: () => number = () => 0
  /** Envoy's protocol: rule hits, shadow denials of rules, gRPC latency. */
  readonly gateway: GatewayMetrics

  constructor(current: () => Runtime | undefined, options: { defaultMetrics?: boolean } = {}) {
    const registers = [this.registry]
    this.gateway = new GatewayMetrics(this.registry)
    const startedAt = Date.now()
    const tallies = this.tallies
    this.custom({
      name: 'ratelimiting_decisions_total',
      help: 'Rate-limit decisions by policy, algorithm and outcome (allowed, denied, shadow_denied, store_error, failed_open, failed_closed, denylist, allowlist).',
      type: 'counter',
      values: () => {
        const values: MetricValue[] = []
        for (const t of tallies.values()) {
          for (const outcome of OUTCOMES) {
            const value = t.outcomes[outcome]
            if (value > 0) values.push({ labels: { policy: t.policy, algorithm: t.algorithm, outcome }, value })
          }
        }
        return values
      },
    })
    this.custom({
      name: 'ratelimiting_decision_duration_seconds',
      help: 'Time to decide one request (store round trip included), seconds.',
      type: 'histogram',
      values: () => {
        const values: MetricValue[] = []
        for (const t of tallies.values())
          values.push(...t.latency.samples('ratelimiting_decision_duration_seconds', { policy: t.policy, algorithm: t.algorithm }))
        return values
      },
    })
    this.custom({
      name: 'ratelimiting_local_denials_total',
      help: 'Requests denied without a Redis call, from a denial Redis made earlier that still holds (store.remember-denials), by policy. Counts from the last reload.',
      type: 'counter',
      values: () => {
        const values: MetricValue[] = []
        for (const [name, policy] of current()?.policies ?? []) {
          const denied = (policy.algorithm as { deniedLocally?: unknown }).deniedLocally
          if (typeof denied === 'number') values.push({ labels: { policy: name }, value: denied })
        }
        return values
      },
    })
    this.custom({
      name: 'ratelimiting_shadow_denials_total',
      help: 'Requests answered as allowed that shadow mode would have denied: by policy (HTTP API), or by domain and rule (Envoy).',
      type: 'counter',
      values: () => {
        const values: MetricValue[] = []
        for (const t of tallies.values())
          if (t.outcomes.shadow_denied > 0) values.push({ labels: { policy: t.policy }, value: t.outcomes.shadow_denied })
        return [...values, ...this.gateway.shadowSamples()]
      },
    })
    this.storeErrors = new Counter({
      name: 'ratelimiting_store_errors_total',
      help: 'Store failures by store type and operation (decide, peek, reset, readiness, sync, connection).',
      labelNames: ['store', 'operation'],
      registers,
    })
    this.reloads = new Counter({
      name: 'ratelimiting_config_reloads_total',
      help: 'Config reloads by result (success, failure).',
      labelNames: ['result'],
      registers,
    })
    this.refused = new Counter({
      name: 'ratelimiting_connections_refused_total',
      help: 'Connections answered 503 and closed because server.max-connections were open.',
      registers,
    })
    const openConnections = () => this.openConnections()
    new Gauge({
      name: 'ratelimiting_open_connections',
      help: 'HTTP connections open now (server.max-connections caps them).',
      registers,
      collect() {
        this.set(openConnections())
      },
    })
    const engines = () => {
      const runtime = current()
      return runtime === undefined ? [] : [...runtime.policies.values()].filter((p) => p.engine !== undefined)
    }
    new Gauge({
      name: 'ratelimiting_sync_lag_seconds',
      help: 'sliding-window-counter-algo: seconds since the last sync that reached the store (since start when none has yet).',
      labelNames: ['policy'],
      registers,
      collect() {
        this.reset()
        const now = Date.now()
        for (const p of engines()) {
          const stats = p.engine?.stats()
          if (stats === undefined || stats.mode === 'local') continue
          const since = stats.lastSyncAtMs > 0 ? stats.lastSyncAtMs : startedAt
          this.set({ policy: p.name }, Math.max(0, now - since) / 1000)
        }
      },
    })
    this.custom({
      name: 'ratelimiting_syncs_total',
      help: 'sliding-window-counter-algo: completed sync cycles with the store (and flushes).',
      type: 'counter',
      values: () => {
        const values: MetricValue[] = []
        for (const p of engines()) {
          const stats = p.engine?.stats()
          if (stats !== undefined && stats.mode !== 'local') values.push({ labels: { policy: p.name }, value: stats.syncs })
        }
        return values
      },
    })
    new Gauge({
      name: 'ratelimiting_sync_pending_hits',
      help: 'sliding-window-counter-algo: hits not yet pushed to the store at the last sync.',
      labelNames: ['policy'],
      registers,
      collect() {
        this.reset()
        for (const p of engines()) {
          const stats = p.engine?.stats()
          if (stats !== undefined && stats.mode !== 'local') this.set({ policy: p.name }, stats.pendingHits)
        }
      },
    })
    new Gauge({
      name: 'ratelimiting_sync_pending_windows',
      help: 'sliding-window-counter-algo: key-windows with unpushed hits at the last sync.',
      labelNames: ['policy'],
      registers,
      collect() {
        this.reset()
        for (const p of engines()) {
          const stats = p.engine?.stats()
          if (stats !== undefined && stats.mode !== 'local') this.set({ policy: p.name }, stats.pendingWindows)
        }
      },
    })
    new Gauge({
      name: 'ratelimiting_local_keys',
      help: 'sliding-window-counter-algo: key-windows held in the local counter table.',
      labelNames: ['policy'],
      registers,
      collect() {
        this.reset()
        for (const p of engines()) {
          const stats = p.engine?.stats()
          if (stats !== undefined) this.set({ policy: p.name }, stats.dict.keys)
        }
      },
    })
    new Gauge({
      name: 'ratelimiting_policy_info',
      help: 'The policies of the running config (value 1): algorithm, limit, window seconds and store.',
      labelNames: ['policy', 'algorithm', 'limit', 'window', 'store'],
      registers,
      collect() {
        this.reset()
        const runtime = current()
        if (runtime === undefined) return
        for (const p of runtime.policies.values()) {
          this.set(
            { policy: p.name, algorithm: p.algo, limit: String(p.limit), window: String(p.windowSize), store: runtime.store.type },
            1,
          )
        }
      },
    })
    registerOverridesGauge(this.registry, current)
    if (options.defaultMetrics !== false) collectDefaultMetrics({ register: this.registry })
  }

  /** The tally of a policy (kept across reloads for the same policy name and algorithm). */
  tally(policy: Policy): DecisionTally {
    let tally = this.byPolicy.get(policy)
    if (tally !== undefined) return tally
    const id = `${policy.name}\u0000${policy.algo}`
    tally = this.tallies.get(id)
    if (tally === undefined) {
      tally = new DecisionTally(policy.name, policy.algo)
      this.tallies.set(id, tally)
    }
    this.byPolicy.set(policy, tally)
    return tally
  }

  /** Counts a store failure. */
  storeError(store: string, operation: string): void {
    this.storeErrors.inc({ store, operation })
  }

  /** Counts a connection refused by the connection cap. */
  connectionRefused(): void {
    this.refused.inc()
  }

  /** Where `ratelimiting_open_connections` reads the open connections. */
  watchConnections(open: () => number): void {
    this.openConnections = open
  }

  /** Counts a reload. */
  reload(result: 'success' | 'failure'): void {
    this.reloads.inc({ result })
  }

  /** The exposition text and its content type. */
  async render(): Promise<{ body: string; contentType: string }> {
    return { body: await this.registry.metrics(), contentType: this.registry.contentType }
  }

  // A metric whose values are computed at scrape time from plain numbers.
  private custom(spec: { name: string; help: string; type: 'counter' | 'histogram'; values: () => MetricValue[] }): void {
    const metric = {
      name: spec.name,
      help: spec.help,
      type: spec.type,
      get: async () => ({ name: spec.name, help: spec.help, type: spec.type, values: spec.values(), aggregator: 'sum' }),
    }
    this.registry.registerMetric(metric as unknown as Metric)
  }
}
