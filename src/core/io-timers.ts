/**
 * The timers the library paces its store I/O with: store call deadlines, the periodic sync, the
 * retry of a failed synchronous write, the release of held socket writes, the cached clock's
 * expiry. Taken from node:timers and node:perf_hooks when this module loads, so a fake-timer
 * library installed later (jest.useFakeTimers, sinon, node:test's mock.timers) replaces the
 * globals but not these: the sockets they pace are real, and a timer armed under fakes that are
 * then removed would never fire (a deadline queue or a sync loop waiting on it would stall for the
 * rest of the process). Time in decisions is the namespace's clock, which fakes do move.
 *
 * The object is mutable for the library's own tests only, which swap in fakes to drive the
 * periodic timer without sleeping; nothing else assigns to it.
 */
import { performance } from 'node:perf_hooks'
import timers from 'node:timers'

export const ioTimers = {
  setTimeout: timers.setTimeout as typeof setTimeout,
  clearTimeout: timers.clearTimeout as typeof clearTimeout,
  setImmediate: timers.setImmediate as typeof setImmediate,
  /** A monotonic clock in ms (performance.now), for deadlines. */
  now: performance.now.bind(performance) as () => number,
}
