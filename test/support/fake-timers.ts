/**
 * Fake timers as a user's test suite installs them, for tests of the library under them.
 */
import FakeTimers from '@sinonjs/fake-timers'

/** The real timers, for a test's own deadline while the fake ones are installed. */
export const realTimers = { setTimeout, clearTimeout }

/**
 * Installs what a test suite fakes: the timers, setImmediate, Date, performance and hrtime. Not
 * process.nextTick: Node's own streams call it, so faking it on the real process object stalls
 * every socket, any client's, and node:test's own report (Jest fakes it in its sandbox's
 * process object, which Node's internals never see).
 */
export function installFakeTimers(now?: number): ReturnType<typeof FakeTimers.install> {
  return FakeTimers.install({
    now,
    toFake: [
      'setTimeout',
      'clearTimeout',
      'setImmediate',
      'clearImmediate',
      'setInterval',
      'clearInterval',
      'Date',
      'hrtime',
      'performance',
    ],
  })
}
