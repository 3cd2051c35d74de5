/**
 * Measuring primitives of the engine benchmark: a timed loop compiled once per subject, the
 * calibration of its length, medians, and the heap cost of holding many keys.
 */
import { setImmediate as nextTurn } from 'node:timers/promises'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'

/** One call under test. Returns a value, or a Promise that the loop awaits like a user would. */
export type Op = (key: string) => unknown

/** Where a loop left off in its key list, carried from one measurement to the next. */
export interface LoopState {
  cursor: number
  sink: unknown
}

/** Runs `n` calls of `op` over `keys` (round-robin from `state.cursor`) and returns the elapsed ns. */
export type TimedLoop = (op: Op, keys: readonly string[], n: number, state: LoopState) => number | Promise<number>

type RawLoop = (op: Op, keys: readonly string[], n: number, state: LoopState, hrtime: () => bigint) => number | Promise<number>

const AsyncFunction = Object.getPrototypeOf(async () => undefined).constructor as new (...args: string[]) => RawLoop

function loopSource(isAsync: boolean): string {
  const call = isAsync ? 'try { sink = await op(keys[j]) } catch (error) { sink = error }' : 'sink = op(keys[j])'
  return `
    let j = state.cursor
    const len = keys.length
    let sink
    const t0 = hrtime()
    for (let i = 0; i < n; i++) {
      ${call}
      if (++j === len) j = 0
    }
    const t1 = hrtime()
    state.cursor = j
    state.sink = sink
    return Number(t1 - t0)`
}

/**
 * A timed loop of its own for one subject. Every subject gets freshly compiled code, so the call
 * site `op(...)` only ever sees that subject's function (monomorphic, inlinable, as in a user's
 * code) instead of one loop shared by all subjects that would be slow for everyone alike.
 * Async subjects are awaited call by call, inside a try/catch so a rejection (a denial, for
 * rate-limiter-flexible) is caught the way a user's middleware would catch it.
 */
export function compileLoop(isAsync: boolean): TimedLoop {
  const params = ['op', 'keys', 'n', 'state', 'hrtime']
  const loop = isAsync ? new AsyncFunction(...params, loopSource(true)) : (new Function(...params, loopSource(false)) as RawLoop)
  const hrtime = process.hrtime.bigint
  return (op, keys, n, state) => loop(op, keys, n, state, hrtime)
}

/** The positive integer after `name` in `args` (`--rounds 7`), or `fallback` when `name` is absent. */
export function positiveIntOption(args: readonly string[], name: string, fallback: number): number {
  const at = args.indexOf(name)
  if (at < 0) return fallback
  const value = Number(args[at + 1])
  if (!Number.isInteger(value) || value < 1) throw new RangeError(`${name} takes a positive integer, got ${String(args[at + 1])}`)
  return value
}

/** Median of a non-empty list. */
export function median(values: readonly number[]): number {
  if (values.length === 0) throw new RangeError('median of an empty list')
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? (sorted[mid] as number) : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2
}

/** How long each measurement should take, and how long to warm up first. */
export interface CalibrationOptions {
  /** Wall time one measurement aims at, ms. */
  readonly targetMs: number
  /** Least time spent running the subject before its first measurement, ms. */
  readonly warmupMs: number
}

/**
 * Warms a loop up and returns how many calls make one measurement of about `targetMs`. The
 * warm-up doubles the call count until a run takes a quarter of the target and at least
 * `warmupMs` have been spent in the subject (so the optimising compiler has seen it).
 */
export async function calibrate(run: (n: number) => number | Promise<number>, options: CalibrationOptions): Promise<number> {
  const targetNs = options.targetMs * 1e6
  const warmupNs = options.warmupMs * 1e6
  let n = 16
  let spent = 0
  for (;;) {
    const elapsed = await run(n)
    spent += elapsed
    if (elapsed >= targetNs / 4 && spent >= warmupNs) return Math.max(1, Math.ceil((n * targetNs) / elapsed))
    if (elapsed < targetNs / 4) n *= 2
  }
}

/** A full, settled garbage collection, `global.gc` when node runs with `--expose-gc`. */
export function getGc(): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc
  if (typeof exposed === 'function') return exposed
  // without --expose-gc (the test runner): the flag can still be set, and a fresh context sees gc
  setFlagsFromString('--expose-gc')
  return runInNewContext('gc') as () => void
}

async function settle(gc: () => void): Promise<void> {
  // twice with a turn between: weak references and ArrayBuffer backing stores are freed late
  gc()
  await nextTurn()
  gc()
  await nextTurn()
  gc()
}

/** What holding `keys` keys costs, from `process.memoryUsage()` deltas in bytes. */
export interface MemoryDelta {
  readonly keys: number
  /** V8 heap: objects, Maps, strings, small typed arrays. */
  readonly heapUsed: number
  /** Memory outside the V8 heap held by JS objects; includes `arrayBuffers`. */
  readonly external: number
  /** ArrayBuffer backing stores (typed arrays); already part of `external`. */
  readonly arrayBuffers: number
  /** `heapUsed + external` per key. */
  readonly bytesPerKey: number
}

/** A limiter built for a memory measurement: `hit` counts one hit, `dispose` frees timers. */
export interface MemoryTarget {
  readonly op: Op
  readonly isAsync: boolean
  dispose(): void | Promise<void>
}

/**
 * Heap per tracked key: a settled GC, `memoryUsage()`, then a limiter built and filled with
 * `keys` distinct keys (`prefix + i`, built inside the measured region so every subject pays for
 * the key strings it keeps), a settled GC, `memoryUsage()` again while the limiter is still
 * reachable. Counts `heapUsed + external`: Node's `external` already includes `arrayBuffers`
 * (where our typed-array counters live), so adding `arrayBuffers` again would count them twice.
 */
export async function measureHeapPerKey(make: () => MemoryTarget, keys: number, prefix = 'user:'): Promise<MemoryDelta> {
  const gc = getGc()
  await settle(gc)
  const before = process.memoryUsage()
  const target = make()
  const op = target.op
  if (target.isAsync) {
    for (let i = 0; i < keys; i++) await op(prefix + i)
  } else {
    for (let i = 0; i < keys; i++) op(prefix + i)
  }
  await settle(gc)
  const after = process.memoryUsage()
  // the limiter is used after the second reading, so it was reachable while it was taken
  await target.dispose()
  const heapUsed = after.heapUsed - before.heapUsed
  const external = after.external - before.external
  const arrayBuffers = after.arrayBuffers - before.arrayBuffers
  return { keys, heapUsed, external, arrayBuffers, bytesPerKey: (heapUsed + external) / keys }
}

/**
 * Extra cost of calling `fn` once in each of `turns` event-loop turns (setImmediate callbacks),
 * over the same number of empty turns: what a clock costs when every request arrives in a turn
 * of its own, as in a server. Returns ns per turn (can be slightly negative when it is noise).
 */
export async function perTurnCostNs(fn: (() => unknown) | undefined, turns: number): Promise<number> {
  const hrtime = process.hrtime.bigint
  let sink: unknown
  const t0 = hrtime()
  await new Promise<void>((resolve) => {
    let left = turns
    const step = fn
      ? () => {
          sink = fn()
          if (--left > 0) setImmediate(step)
          else resolve()
        }
      : () => {
          if (--left > 0) setImmediate(step)
          else resolve()
        }
    setImmediate(step)
  })
  const elapsed = Number(hrtime() - t0)
  void sink
  return elapsed / turns
}
