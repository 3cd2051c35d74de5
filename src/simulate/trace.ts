/**
 * A trace: the requests the simulator replays, in time order. Times and keys live in typed
 * arrays (12 bytes a request, no object each), so a log of millions of lines is read once and
 * replayed through every cell of the grid without being read again.
 */
export interface Trace {
  /** Request times, epoch ms, ascending. */
  readonly times: Float64Array
  /** Each request's key, as an index into `keyNames`. */
  readonly keys: Int32Array
  /** The distinct keys, in the order first seen. */
  readonly keyNames: readonly string[]
  /** Requests in the trace. */
  readonly length: number
}

/**
 * Collects requests in any order and builds a {@link Trace}: keys interned, sorted by time (a
 * stable sort: requests logged at the same time keep their order).
 */
export class TraceBuilder {
  private times = new Float64Array(1024)
  private keys = new Int32Array(1024)
  private count = 0
  private readonly ids = new Map<string, number>()
  private readonly names: string[] = []

  /** Requests added so far. */
  get length(): number {
    return this.count
  }

  /** Adds one request for `key` at `timeMs` (epoch ms). */
  add(timeMs: number, key: string): void {
    let id = this.ids.get(key)
    if (id === undefined) {
      id = this.names.length
      this.ids.set(key, id)
      this.names.push(key)
    }
    if (this.count === this.times.length) {
      const times = new Float64Array(this.count * 2)
      times.set(this.times)
      this.times = times
      const keys = new Int32Array(this.count * 2)
      keys.set(this.keys)
      this.keys = keys
    }
    this.times[this.count] = timeMs
    this.keys[this.count] = id
    this.count++
  }

  /**
   * The trace, sorted by time. With `spreadWholeSeconds`, when every time is a whole second (an
   * access log's resolution), the requests of each second are spread evenly across it, in their
   * order: a sync rate below one second then sees them arrive as they did, not all at once.
   */
  build(spreadWholeSeconds = true): Trace {
    const n = this.count
    let times = this.times.subarray(0, n)
    let keys = this.keys.subarray(0, n)
    if (!isSorted(times)) {
      const order = new Uint32Array(n)
      for (let i = 0; i < n; i++) order[i] = i
      // ties broken by position: a stable sort
      order.sort((a, b) => (times[a] as number) - (times[b] as number) || a - b)
      const sortedTimes = new Float64Array(n)
      const sortedKeys = new Int32Array(n)
      for (let i = 0; i < n; i++) {
        const from = order[i] as number
        sortedTimes[i] = times[from] as number
        sortedKeys[i] = keys[from] as number
      }
      times = sortedTimes
      keys = sortedKeys
    } else {
      times = times.slice()
      keys = keys.slice()
    }
    if (spreadWholeSeconds && allWholeSeconds(times)) spreadSeconds(times)
    return { times, keys, keyNames: this.names.slice(), length: n }
  }
}

function isSorted(times: Float64Array): boolean {
  for (let i = 1; i < times.length; i++) if ((times[i] as number) < (times[i - 1] as number)) return false
  return true
}

function allWholeSeconds(times: Float64Array): boolean {
  for (let i = 0; i < times.length; i++) if ((times[i] as number) % 1000 !== 0) return false
  return true
}

// The i-th of n requests logged in one second moves to i/n of the way through it.
function spreadSeconds(times: Float64Array): void {
  let start = 0
  while (start < times.length) {
    const second = times[start] as number
    let end = start + 1
    while (end < times.length && times[end] === second) end++
    const n = end - start
    for (let i = 1; i < n; i++) times[start + i] = second + Math.floor((i * 1000) / n)
    start = end
  }
}

/** The key with the most requests (the first of them on a tie), or -1 for an empty trace. */
export function hottestKey(trace: Trace): number {
  const counts = new Uint32Array(trace.keyNames.length)
  let best = -1
  let bestCount = 0
  for (let i = 0; i < trace.length; i++) {
    const k = trace.keys[i] as number
    const c = (counts[k] as number) + 1
    counts[k] = c
    if (c > bestCount || (c === bestCount && k < best)) {
      best = k
      bestCount = c
    }
  }
  return best
}

/** Trace length in seconds, first to last request (at least one window's worth is not implied). */
export function traceSeconds(trace: Trace): number {
  if (trace.length === 0) return 0
  return ((trace.times[trace.length - 1] as number) - (trace.times[0] as number)) / 1000
}

/** A seeded PRNG (mulberry32): the synthetic traces and random node assignment are repeatable. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
