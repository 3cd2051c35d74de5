import { ioTimers } from './io-timers.js'

/** A clock returns the current time in epoch milliseconds. */
export type Clock = () => number

/**
 * `Date.now()`, read at every call (a fake-timer library installed later is honoured): the default
 * clock of synchronous namespaces, whose decisions wait on a store round trip anyway.
 */
export const wallClock: Clock = () => Date.now()

// How many reads one Date.now() serves at most. Date.now() costs about 38 ns here, more than a
// whole local decision, so the default clock amortises it; see bench/engine.bench.ts.
const READS_PER_REFRESH = 64
// A timer that has not fired this long after it was due may never fire (a fake-timer library's
// reset, or timers faked before this module loaded): until one does, a reading also ends with
// the event-loop turn it was taken in.
const TIMER_OVERDUE_MS = 20

let cachedMs = 0
let readsLeft = 0
// The Date.now the cached reading came from. A fake-timer library swaps Date (and so Date.now)
// when it installs and again when it uninstalls; a reading from another Date.now is never served.
let source: () => number = Date.now
let sourceIsNative = isNative(Date.now)
let timerDueAtMs = Number.NaN // when the pending expiry timer should fire; NaN when none is pending
let timerTrusted = true // false from the moment the pending timer is overdue until one fires
let turnExpiryPending = false
// A native promise: fake-timer libraries fake queueMicrotask and process.nextTick, never this.
const settled = Promise.resolve()

function isNative(fn: () => number): boolean {
  return Function.prototype.toString.call(fn).includes('[native code]')
}

function expire(): void {
  readsLeft = 0
  timerDueAtMs = Number.NaN
  timerTrusted = true
}

function expireTurn(): void {
  readsLeft = 0
  turnExpiryPending = false
}

function refresh(): number {
  const now = Date.now
  if (now !== source) {
    source = now
    sourceIsNative = isNative(now)
  }
  const ms = Date.now()
  readsLeft = 0
  // A fake Date (jest.setSystemTime, mock.timers.tick move it without any timer firing): read it
  // every time, tests do not need the speed.
  if (!sourceIsNative) return ms
  if (timerDueAtMs !== timerDueAtMs) {
    // NaN: no timer pending. One timer a millisecond, not a setImmediate per event-loop
    // iteration: in a server each request tends to get an iteration of its own, and a
    // setImmediate costs more (~150 ns) than the Date.now() it saves (~40 ns); see
    // bench/engine.bench.ts ("Cost of reading the clock").
    timerDueAtMs = ms + 1
    // node:timers' own (io-timers.ts): a fake-timer library installed later can neither hold nor
    // drop it
    ioTimers.setTimeout(expire, 1).unref()
  } else if (ms - timerDueAtMs > TIMER_OVERDUE_MS) {
    // a synchronous run longer than that, or a timer that will never fire
    timerTrusted = false
  }
  if (!timerTrusted && !turnExpiryPending) {
    // the reading also ends with this turn: a pause between two reads leaves the turn (a busy
    // wait aside), so no reading outlives it, whatever the timers do
    turnExpiryPending = true
    void settled.then(expireTurn)
  }
  cachedMs = ms
  readsLeft = READS_PER_REFRESH - 1
  return ms
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
 * Fake timers cannot stall it: a reading is served only by the `Date.now` it came from (a
 * fake-timer library that installs or uninstalls swaps it), a fake `Date.now` is read on every
 * call (so `jest.setSystemTime`, `mock.timers.tick` and `clock.tick` show at once), the expiry
 * timer is node:timers' own (fake timers installed later cannot hold or drop it), and if it still
 * has not fired 20 ms after its time (a synchronous run that long, or timers faked before this
 * module loaded) a reading also ends with the event-loop turn it was taken in (a native promise's
 * reaction, which no fake-timer library replaces) until a timer fires again.
 *
 * @example
 * import { cachedClock } from 'ratelimiting'
 * const nowMs = cachedClock()
 */
export const cachedClock: Clock = () => (readsLeft-- > 0 && Date.now === source ? cachedMs : refresh())

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
