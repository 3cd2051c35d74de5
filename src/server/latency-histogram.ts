// The service's latency histograms as plain numbers: the request path adds to an array, /metrics reads it.

/** A sample of a metric computed at scrape time. */
export type MetricValue = { labels: Record<string, string | number>; value: number; metricName?: string }

/** Upper bounds (seconds) of the decision latency histogram: 10 µs to 1 s. */
export const LATENCY_BUCKETS: readonly number[] = [
  0.00001, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
]

/** Latencies as plain numbers: observations per bucket (not cumulative), their sum and count. */
export class LatencyHistogram {
  /** Observations per bucket; the last slot is above the largest bound. */
  readonly buckets = new Float64Array(LATENCY_BUCKETS.length + 1)
  sum = 0
  count = 0

  /** Records one observation of `seconds`. */
  observe(seconds: number): void {
    this.sum += seconds
    this.count++
    let i = 0
    while (i < LATENCY_BUCKETS.length && seconds > (LATENCY_BUCKETS[i] as number)) i++
    ;(this.buckets as Float64Array)[i] = (this.buckets[i] as number) + 1
  }

  /** The Prometheus samples of this histogram as metric `name` with `labels`. */
  samples(name: string, labels: Record<string, string | number>): MetricValue[] {
    const values: MetricValue[] = []
    let cumulative = 0
    LATENCY_BUCKETS.forEach((le, i) => {
      cumulative += this.buckets[i] as number
      values.push({ metricName: `${name}_bucket`, labels: { le, ...labels }, value: cumulative })
    })
    values.push({ metricName: `${name}_bucket`, labels: { le: '+Inf', ...labels }, value: this.count })
    values.push({ metricName: `${name}_sum`, labels, value: this.sum })
    values.push({ metricName: `${name}_count`, labels, value: this.count })
    return values
  }
}
