import type { Metric, Registry } from 'prom-client'
import { LatencyHistogram, type MetricValue } from '../latency-histogram.js'

// The metrics of Envoy's protocol, as envoyproxy/ratelimit keeps them: per domain and rule, the
// hits in total, within the limit, near it, over it and let through by shadow mode; and the gRPC
// calls' latency. Plain numbers on the request path, read at scrape time.

/** Distinct (domain, rule) pairs counted one by one; further ones are summed under rule "_other". */
export const MAX_RULE_SERIES = 10_000

const KINDS = ['total_hits', 'within_limit', 'near_limit', 'over_limit', 'shadow_mode', 'store_error'] as const
type Kind = (typeof KINDS)[number]

class RuleTally {
  readonly counts: Record<Kind, number> = { total_hits: 0, within_limit: 0, near_limit: 0, over_limit: 0, shadow_mode: 0, store_error: 0 }
  /** Requests a rule in shadow mode would have denied. */
  shadowDenials = 0
  constructor(
    readonly domain: string,
    readonly rule: string,
  ) {}
}

class LatencyTally extends LatencyHistogram {
  constructor(
    readonly method: string,
    readonly code: string,
  ) {
    super()
  }
}

type Sample = MetricValue

/** Why the gRPC listener closed a connection of its own accord. */
export type GrpcCloseReason = 'idle' | 'resets'

/** The Envoy protocol's metrics, registered in the service's registry. */
export class GatewayMetrics {
  private readonly rules = new Map<string, RuleTally>()
  private readonly latencies = new Map<string, LatencyTally>()
  private readonly globalShadows = new Map<string, number>()
  private grpcRefused = 0
  private readonly grpcClosed: Record<GrpcCloseReason, number> = { idle: 0, resets: 0 }
  private grpcOpen: () => number = () => 0

  constructor(registry: Registry) {
    this.register(
      registry,
      'ratelimiting_rule_hits_total',
      'counter',
      "Hits of Envoy rate limit rules by domain, rule (the reference's stats key) and kind: total_hits, within_limit, near_limit, over_limit, shadow_mode, store_error.",
      () => {
        const out: Sample[] = []
        for (const t of this.rules.values())
          for (const kind of KINDS)
            if (t.counts[kind] > 0) out.push({ labels: { domain: t.domain, rule: t.rule, kind }, value: t.counts[kind] })
        return out
      },
    )
    this.register(
      registry,
      'ratelimiting_global_shadow_mode_total',
      'counter',
      'ShouldRateLimit answers turned from OVER_LIMIT into OK by the global shadow mode, by domain.',
      () => [...this.globalShadows].map(([domain, value]) => ({ labels: { domain }, value })),
    )
    this.register(
      registry,
      'ratelimiting_grpc_request_duration_seconds',
      'histogram',
      'gRPC calls of the rate limit service, seconds, by method and gRPC status code.',
      () => {
        const out: Sample[] = []
        for (const t of this.latencies.values())
          out.push(...t.samples('ratelimiting_grpc_request_duration_seconds', { method: t.method, code: t.code }))
        return out
      },
    )
    this.register(
      registry,
      'ratelimiting_grpc_connections_refused_total',
      'counter',
      'gRPC connections sent GOAWAY and closed at once because grpc.max-connections were open.',
      () => [{ labels: {}, value: this.grpcRefused }],
    )
    this.register(
      registry,
      'ratelimiting_grpc_open_connections',
      'gauge',
      'gRPC connections open now (grpc.max-connections caps them).',
      () => [{ labels: {}, value: this.grpcOpen() }],
    )
    this.register(
      registry,
      'ratelimiting_grpc_connections_closed_total',
      'counter',
      'gRPC connections the service closed, by reason: idle (grpc.idle-timeout-ms without a call), resets (grpc.max-stream-resets).',
      () => (['idle', 'resets'] as const).map((reason) => ({ labels: { reason }, value: this.grpcClosed[reason] })),
    )
  }

  /** Counts a gRPC connection refused by `grpc.max-connections`. */
  grpcConnectionRefused(): void {
    this.grpcRefused++
  }

  /** Counts a gRPC connection the listener closed: idle too long, or too many streams reset. */
  grpcConnectionClosed(reason: GrpcCloseReason): void {
    this.grpcClosed[reason]++
  }

  /** Where `ratelimiting_grpc_open_connections` reads the open gRPC connections. */
  watchGrpcConnections(open: () => number): void {
    this.grpcOpen = open
  }

  /** The shadow denials of rules, as samples of `ratelimiting_shadow_denials_total`. */
  shadowSamples(): Sample[] {
    const out: Sample[] = []
    for (const t of this.rules.values())
      if (t.shadowDenials > 0) out.push({ labels: { domain: t.domain, rule: t.rule }, value: t.shadowDenials })
    return out
  }

  /**
   * Counts `hits` of a rule whose window held `after` once they were counted, with the
   * reference's arithmetic: hits past the near-limit threshold are near_limit, hits past the
   * limit over_limit (and shadow_mode when the rule is in shadow mode), the rest within_limit.
   */
  ruleHits(
    domain: string,
    rule: string,
    limit: number,
    nearRatio: number,
    hits: number,
    after: number,
    isOver: boolean,
    shadow: boolean,
  ): void {
    const t = this.tally(domain, rule)
    const c = t.counts
    c.total_hits += hits
    const before = after - hits
    const near = Math.floor(limit * nearRatio)
    if (isOver) {
      if (before >= limit) c.over_limit += hits
      else {
        c.over_limit += after - limit
        c.near_limit += Math.max(0, limit - Math.max(near, before))
      }
      if (shadow) {
        c.shadow_mode += before >= limit ? hits : after - limit
        t.shadowDenials++
      }
      return
    }
    if (after > near) c.near_limit += before >= near ? hits : after - near
    c.within_limit += hits
  }

  /** Counts a descriptor the store failed to decide. */
  storeFailure(domain: string, rule: string): void {
    this.tally(domain, rule).counts.store_error++
  }

  /** Counts an answer the global shadow mode turned into OK. */
  globalShadow(domain: string): void {
    this.globalShadows.set(domain, (this.globalShadows.get(domain) ?? 0) + 1)
  }

  /** Records one gRPC call. */
  grpcCall(method: string, code: string, seconds: number): void {
    const id = `${method}\u0000${code}`
    let t = this.latencies.get(id)
    if (t === undefined) {
      t = new LatencyTally(method, code)
      this.latencies.set(id, t)
    }
    t.observe(seconds)
  }

  private tally(domain: string, rule: string): RuleTally {
    const id = `${domain}\u0000${rule}`
    let t = this.rules.get(id)
    if (t !== undefined) return t
    if (this.rules.size >= MAX_RULE_SERIES) {
      // detailed_metric can make a series per value: past the cap they are summed in one
      const other = this.rules.get('_other\u0000_other')
      if (other !== undefined) return other
      t = new RuleTally('_other', '_other')
      this.rules.set('_other\u0000_other', t)
      return t
    }
    t = new RuleTally(domain, rule)
    this.rules.set(id, t)
    return t
  }

  private register(registry: Registry, name: string, type: 'counter' | 'gauge' | 'histogram', help: string, values: () => Sample[]): void {
    const metric = { name, help, type, get: async () => ({ name, help, type, values: values(), aggregator: 'sum' }) }
    registry.registerMetric(metric as unknown as Metric)
  }
}
