/** A clock returns the current time in epoch milliseconds. */
export type Clock = () => number

// How many reads one Date.now() serves at most. Date.now() costs about 38 ns here, more than a
// whole local decision, so the default clock amortises it; see bench/engine.bench.ts.
const READS_PER_REFRESH = 64

let cachedMs = 0
let readsLeft = 0
let invalidationScheduled = false

function invalidate(): void {
  readsLeft = 0
  invalidationScheduled = false
}

function refresh(): number {
  cachedMs = Date.now()
  readsLeft = READS_PER_REFRESH - 1
  if (!invalidationScheduled) {
    invalidationScheduled = true
    // One timer a millisecond, not a setImmediate per event-loop iteration: in a server each
    // request tends to get an iteration of its own, and a setImmediate costs more (~150 ns) than
    // the Date.now() it saves (~40 ns); see bench/engine.bench.ts ("Cost of reading the clock").
    setTimeout(invalidate, 1).unref()
  }
  return cachedMs
}

/**
 * The engine's default clock: `Date.now()`, cached. A reading serves at most 64 reads and is
 * dropped by a timer about 1 ms after it was taken, so it is at most about 1 ms old, or older
 * only while one event-loop iteration runs longer than that (timers fire between iterations;
 * nginx's `ngx.now()`, which Kong uses, is cached per iteration in the same way). A tight loop of
 * decisions pays for the system clock once in 64 reads, a server once a millisecond. Pass
 * `clock: Date.now` to a namespace to read the system clock on every hit instead.
 * bench/engine.bench.ts measures both.
 *
 * @example
 * import { cachedClock } from 'ratelimiting'
 * const nowMs = cachedClock()
 */
export const cachedClock: Clock = () => (readsLeft-- > 0 ? cachedMs : refresh())

/** A clock that only moves when told to; for tests. */
export interface FakeClock {
  /** Reads the fake time in epoch ms; pass this as a namespace's `clock`. */
  readonly now: Clock
  /** Moves the time forward by `ms` milliseconds. */
  advance(ms: number): void
  /** Sets the time to `ms` epoch milliseconds. */
  set(ms: number): void
}

/**
 * Creates a clock for tests that starts at `startMs` and moves only on `advance` or `set`.
 *
 * @example
 * const clock = createFakeClock(1_700_000_000_000)
 * rl.new({ namespace: 'api', windowSizes: [1], syncRate: -1, clock: clock.now })
 * clock.advance(999)
 */
export function createFakeClock(startMs = 0): FakeClock {
  let nowMs = startMs
  return {
    now: () => nowMs,
    advance(ms: number) {
      if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`advance(ms) takes a finite ms >= 0, got ${ms}`)
      nowMs += ms
    },
    set(ms: number) {
      if (!Number.isFinite(ms)) throw new RangeError(`set(ms) takes a finite epoch ms, got ${ms}`)
      nowMs = ms
    },
  }
}
