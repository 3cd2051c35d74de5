import { ConfigError, usageRangeError } from './errors.js'
import type { Decision, Limiter } from './limiter.js'

/** The per-key queue bound of `limiter.acquire()` when the limiter sets none. */
export const DEFAULT_MAX_QUEUE = 10_000

// A denial with no wait to go by (the store failed and onStoreError said "deny") is tried again
// after this long, not at once: a loop of store calls would only add load to a failing store.
const STORE_RETRY_MS = 100

/** Codes carried by {@link AcquireError}. */
export type AcquireErrorCode = 'ACQUIRE_ABORTED' | 'ACQUIRE_TIMEOUT' | 'QUEUE_FULL' | 'NEVER_ALLOWED' | 'ACQUIRE_CLOSED'

/**
 * Why `limiter.acquire()` (or `schedule()`) gave up waiting. Nothing was counted for the call:
 * an acquire counts only the hit it resolves with.
 *
 * - `ACQUIRE_ABORTED`: the `signal` aborted; `cause` is the signal's reason.
 * - `ACQUIRE_TIMEOUT`: the wait would exceed (or has run) `maxWaitMs`.
 * - `QUEUE_FULL`: `maxQueue` calls already wait on this key in this process.
 * - `NEVER_ALLOWED`: no wait admits the hit (a cost above a limit; a deny-listed key).
 * - `ACQUIRE_CLOSED`: the limiter's instance was closed while the call waited.
 *
 * @example
 * try { await limiter.acquire('api', 1, { maxWaitMs: 5000 }) } catch (err) { if (err instanceof AcquireError && err.code === 'ACQUIRE_TIMEOUT') skip() }
 */
export class AcquireError extends Error {
  override readonly name = 'AcquireError'
  readonly code: AcquireErrorCode
  /** The key the call waited on. */
  readonly key: string
  constructor(code: AcquireErrorCode, key: string, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.code = code
    this.key = key
  }
}

/** Options of one `limiter.acquire()` call. */
export interface AcquireOptions {
  /** Aborts the wait: the call rejects with `ACQUIRE_ABORTED` and counts nothing. */
  readonly signal?: AbortSignal
  /**
   * The longest wait, in ms of the namespace's clock. When a denial's `retryAfterMs` shows the
   * hit cannot be admitted in time the call rejects at once (`ACQUIRE_TIMEOUT`) instead of
   * sleeping first. `0`: admit now or reject. @default Infinity
   */
  readonly maxWaitMs?: number
}

/** Options of one `limiter.schedule()` call. */
export interface ScheduleOptions extends AcquireOptions {
  /** The cost of the hit `fn` waits for. @default 1 */
  readonly cost?: number
}

/** Checks `maxQueue` once, when the limiter is built. */
export function checkMaxQueue(maxQueue: unknown): number {
  if (maxQueue === undefined) return DEFAULT_MAX_QUEUE
  if (typeof maxQueue !== 'number' || !Number.isInteger(maxQueue) || maxQueue < 1)
    throw new ConfigError('INVALID_OPTION', `maxQueue must be a positive integer, got ${String(maxQueue)}`)
  return maxQueue
}

interface Waiter {
  readonly cost: number
  /** Epoch ms on the namespace's clock; Infinity without `maxWaitMs`. */
  readonly deadlineMs: number
  readonly resolve: (d: Decision) => void
  readonly reject: (err: unknown) => void
  readonly signal: AbortSignal | undefined
  onAbort: (() => void) | undefined
  done: boolean
}

/** The waiters of one key, served in FIFO order by one timer. */
interface KeyQueue {
  readonly key: string
  readonly waiters: Waiter[]
  /** Index of the first entry not yet removed (entries before it are done). */
  head: number
  /** Waiters not yet settled. */
  live: number
  /** Live waiters that have a deadline. */
  timed: number
  timer: ReturnType<typeof setTimeout> | undefined
  /** When the timer fires: the head's earliest admission, on the namespace's clock. */
  wakeAtMs: number
  /** A synchronous-mode try is waiting for the store. */
  busy: boolean
}

const queuesByLimiter = new WeakMap<Limiter, KeyQueues>()

/**
 * The queues of one limiter, made on its first `acquire()`: a limiter that never acquires has
 * none and pays nothing.
 */
export function keyQueuesOf(limiter: Limiter): KeyQueues {
  let queues = queuesByLimiter.get(limiter)
  if (queues === undefined) {
    queues = new KeyQueues(limiter)
    queuesByLimiter.set(limiter, queues)
  }
  return queues
}

/**
 * Waiting for a turn: `limiter.acquire()` and `limiter.schedule()`.
 *
 * Per key, one queue in FIFO order and at most one timer: the head waiter tries a hit; when it
 * is admitted the next one tries at once; when it is denied the queue sleeps the decision's exact
 * `retryAfterMs` and the head tries again. Waiters behind the head never wake on their own, so
 * a thousand waiters on a key cost one timer, not a thousand (no thundering herd).
 *
 * A try never counts a denied hit, whatever the limiter's `countDenied`, and never blocks its key
 * (a wait is not a violation; a block made elsewhere is waited out): the tries go through a
 * copy of the limiter with `countDenied: false` and `blocksOnDeny: false`. In local and periodic namespaces that limiter
 * counts only admitted hits; in a synchronous one the store decides after the hit is written,
 * and a denied hit is taken back at once (locally, and in the store by a push in the background,
 * as `countDenied: false` always does): other processes may see it for one round trip, which can
 * only make them wait longer, never admit more.
 */
export class KeyQueues {
  private readonly queues = new Map<string, KeyQueue>()
  /** The limiter's decisions with `countDenied: false`. */
  private readonly tries: Limiter
  private readonly onClose = (): void => this.closeAll()
  private watchingClose = false

  constructor(private readonly limiter: Limiter) {
    // the same fields and methods, only countDenied differs; the limiter itself is untouched,
    // so its hot path keeps its shape
    this.tries =
      limiter.countDenied || limiter.blocksOnDeny
        ? (Object.assign(Object.create(Object.getPrototypeOf(limiter) as object) as Limiter, limiter, {
            countDenied: false,
            blocksOnDeny: false,
          }) as Limiter)
        : limiter
  }

  acquire(key: string, cost: number, options: AcquireOptions | undefined): Promise<Decision> {
    const ns = this.limiter.namespace
    let signal: AbortSignal | undefined
    let deadlineMs = Number.POSITIVE_INFINITY
    try {
      ns.check(key, cost) // also NAMESPACE_CLOSED
      if (cost < 0) throw usageRangeError('INVALID_VALUE', `cost must be >= 0, got ${cost}`)
      if (options !== undefined) {
        if (typeof options !== 'object' || options === null)
          throw new TypeError(`acquire options must be an object, got ${String(options)}`)
        signal = options.signal
        if (signal !== undefined && !(signal instanceof AbortSignal))
          throw new TypeError(`acquire option signal must be an AbortSignal, got ${String(signal)}`)
        const { maxWaitMs } = options
        if (maxWaitMs !== undefined) {
          if (typeof maxWaitMs !== 'number' || !(maxWaitMs >= 0))
            throw new RangeError(`acquire option maxWaitMs must be a number >= 0 (ms), got ${String(maxWaitMs)}`)
          deadlineMs = ns.clock() + maxWaitMs
        }
      }
    } catch (err) {
      return Promise.reject(err)
    }
    let smallest: number
    try {
      smallest = this.limiter.smallestLimit(key) // a limit may be a function of the key
    } catch (err) {
      return Promise.reject(err)
    }
    if (cost > smallest)
      return Promise.reject(
        new AcquireError('NEVER_ALLOWED', key, `a hit of cost ${cost} on "${key}" can never be admitted: a limit is ${smallest}`),
      )
    if (signal?.aborted === true) return Promise.reject(abortError(key, signal))
    let queue = this.queues.get(key)
    if (queue !== undefined && queue.live >= this.limiter.maxQueue)
      return Promise.reject(
        new AcquireError('QUEUE_FULL', key, `${queue.live} acquires already wait on "${key}" (maxQueue ${this.limiter.maxQueue})`),
      )
    // the queue sleeps until its head can be admitted; nobody behind it goes first
    if (queue?.timer !== undefined && queue.wakeAtMs > deadlineMs)
      return Promise.reject(
        new AcquireError(
          'ACQUIRE_TIMEOUT',
          key,
          `acquire on "${key}" would wait longer than its maxWaitMs: the first waiter of the key is admitted in ${queue.wakeAtMs - (deadlineMs - (options?.maxWaitMs ?? 0))} ms at the earliest`,
        ),
      )
    return new Promise<Decision>((resolve, reject) => {
      const waiter: Waiter = { cost, deadlineMs, resolve, reject, signal, onAbort: undefined, done: false }
      if (queue === undefined) {
        queue = { key, waiters: [], head: 0, live: 0, timed: 0, timer: undefined, wakeAtMs: 0, busy: false }
        this.queues.set(key, queue)
        if (!this.watchingClose) {
          ns.watchClose(this.onClose)
          this.watchingClose = true
        }
      }
      const q = queue
      q.waiters.push(waiter)
      q.live++
      if (deadlineMs !== Number.POSITIVE_INFINITY) q.timed++
      if (signal !== undefined) {
        waiter.onAbort = () => {
          const wasHead = this.first(q) === waiter
          this.settle(q, waiter)
          waiter.reject(abortError(key, signal))
          if (q.live === 0) return this.drop(q)
          // the head's sleep was for its own cost: the new head tries now (a try in flight
          // finishes first)
          if (wasHead && q.timer !== undefined) {
            clearTimeout(q.timer)
            q.timer = undefined
            this.pump(q)
          }
        }
        signal.addEventListener('abort', waiter.onAbort, { once: true })
      }
      if (q.timer === undefined && !q.busy) this.pump(q)
    })
  }

  /** Rejects every waiting call: the namespace closed. */
  closeAll(): void {
    const queues = [...this.queues.values()]
    this.queues.clear()
    if (this.watchingClose) this.limiter.namespace.unwatchClose(this.onClose)
    this.watchingClose = false
    for (const q of queues) {
      if (q.timer !== undefined) clearTimeout(q.timer)
      q.timer = undefined
      for (let i = q.head; i < q.waiters.length; i++) {
        const w = q.waiters[i] as Waiter
        if (w.done) continue
        this.settle(q, w)
        w.reject(new AcquireError('ACQUIRE_CLOSED', q.key, `acquire on "${q.key}" gave up: the limiter's instance was closed`))
      }
    }
  }

  /** Serves the queue from its head until a try is denied (then sleeps) or must wait for the store. */
  private pump(q: KeyQueue): void {
    while (q.timer === undefined && !q.busy) {
      const head = this.first(q)
      if (head === undefined) return this.drop(q)
      const nowMs = this.limiter.clock()
      if (nowMs > head.deadlineMs) {
        // the wait has run past maxWaitMs already (a slow store call, a clock that jumped)
        this.timeOut(q, head, `has waited past its maxWaitMs by ${nowMs - head.deadlineMs} ms`)
        continue
      }
      let d: Decision | Promise<Decision>
      try {
        d = this.tries.hit(q.key, head.cost)
      } catch (err) {
        // NAMESPACE_CLOSED, or a namespace-level refusal: every waiter of the key gets it
        this.failAll(q, err)
        return
      }
      if (d instanceof Promise) {
        q.busy = true
        d.then(
          (decision) => {
            q.busy = false
            if (this.queues.get(q.key) !== q) return // closed meanwhile
            this.decided(q, head, decision)
            this.pump(q)
          },
          (err: unknown) => {
            q.busy = false
            if (this.queues.get(q.key) === q) this.failAll(q, err)
          },
        )
        return
      }
      this.decided(q, head, d)
    }
  }

  /** Applies the decision of `head`'s try: resolves it, rejects it, or arms the queue's timer. */
  private decided(q: KeyQueue, head: Waiter, d: Decision): void {
    if (d.allowed) {
      // Admitted and counted. When the call was aborted while the store decided, the hit is
      // counted all the same: it goes to the next waiter of the same cost, or stays counted
      // (never an extra admission).
      const taker = head.done ? this.first(q) : head
      if (taker === undefined || taker.cost !== head.cost) return
      this.settle(q, taker)
      taker.resolve(d)
      return
    }
    if (head.done) return // aborted during the try: the next head tries at once
    let waitMs = d.retryAfterMs
    if (waitMs === Number.POSITIVE_INFINITY) {
      this.settle(q, head)
      head.reject(new AcquireError('NEVER_ALLOWED', q.key, `a hit of cost ${head.cost} on "${q.key}" can never be admitted`))
      return
    }
    if (!(waitMs > 0)) waitMs = STORE_RETRY_MS
    const nowMs = this.limiter.clock()
    const admitAtMs = nowMs + waitMs
    const detail = `would wait longer than its maxWaitMs: the key admits a hit of cost ${head.cost} in ${waitMs} ms at the earliest`
    if (admitAtMs > head.deadlineMs) {
      this.timeOut(q, head, detail)
      return
    }
    // nobody behind the head is admitted before it: a deadline that comes first cannot be met
    if (q.timed > 0) {
      for (let i = q.head; i < q.waiters.length; i++) {
        const w = q.waiters[i] as Waiter
        if (!w.done && admitAtMs > w.deadlineMs) this.timeOut(q, w, detail)
      }
    }
    q.wakeAtMs = admitAtMs
    q.timer = setTimeout(() => {
      q.timer = undefined
      this.pump(q)
    }, waitMs)
  }

  private timeOut(q: KeyQueue, w: Waiter, detail: string): void {
    this.settle(q, w)
    w.reject(new AcquireError('ACQUIRE_TIMEOUT', q.key, `acquire on "${q.key}" ${detail}`))
  }

  private failAll(q: KeyQueue, err: unknown): void {
    for (let i = q.head; i < q.waiters.length; i++) {
      const w = q.waiters[i] as Waiter
      if (w.done) continue
      this.settle(q, w)
      w.reject(err)
    }
    this.drop(q)
  }

  /** The first waiter not settled, dropping the settled ones before it. */
  private first(q: KeyQueue): Waiter | undefined {
    const { waiters } = q
    while (q.head < waiters.length && (waiters[q.head] as Waiter).done) q.head++
    if (q.head > 1024 && q.head * 2 > waiters.length) {
      waiters.splice(0, q.head)
      q.head = 0
    }
    return waiters[q.head]
  }

  /** Marks a waiter settled and unhooks its signal. */
  private settle(q: KeyQueue, w: Waiter): void {
    w.done = true
    q.live--
    if (w.deadlineMs !== Number.POSITIVE_INFINITY) q.timed--
    if (w.onAbort !== undefined) w.signal?.removeEventListener('abort', w.onAbort)
  }

  /** Forgets an empty, idle queue; the close hook goes once no key waits. */
  private drop(q: KeyQueue): void {
    if (q.live > 0 || q.busy) return
    if (q.timer !== undefined) clearTimeout(q.timer)
    q.timer = undefined
    if (this.queues.get(q.key) === q) this.queues.delete(q.key)
    if (this.queues.size === 0 && this.watchingClose) {
      this.limiter.namespace.unwatchClose(this.onClose)
      this.watchingClose = false
    }
  }
}

function abortError(key: string, signal: AbortSignal): AcquireError {
  return new AcquireError('ACQUIRE_ABORTED', key, `acquire on "${key}" was aborted`, { cause: signal.reason })
}
