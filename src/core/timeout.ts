import { StoreError } from './errors.js'
import { ioTimers } from './io-timers.js'

/** A deadline set by {@link deadline}; `settle()` it when the call it bounds settles. */
export interface Deadline {
  settle(): void
}

/** A store call waiting for its deadline: `onTimeout` is called when it passes, unless settled before. */
class Pending implements Deadline {
  readonly queue: DeadlineQueue
  readonly deadline: number
  readonly strategy: string
  readonly what: string
  readonly detail: string | undefined
  onTimeout: ((err: StoreError) => void) | undefined

  constructor(
    queue: DeadlineQueue,
    deadline: number,
    strategy: string,
    what: string,
    detail: string | undefined,
    onTimeout: (err: StoreError) => void,
  ) {
    this.queue = queue
    this.deadline = deadline
    this.strategy = strategy
    this.what = what
    this.detail = detail
    this.onTimeout = onTimeout
  }

  settle(): void {
    this.queue.settle(this)
  }
}

/**
 * The deadlines of every pending store call with one timeout, in the order they were set (so in
 * deadline order: the same timeout added to a clock that does not go back), swept by one timer
 * armed for the earliest unsettled deadline. A synchronous hit then costs an entry in an array
 * instead of a timer set and cleared per call. The timer keeps the process alive while a call is
 * pending, as the call would, and is unref'd as soon as none is.
 */
class DeadlineQueue {
  readonly ms: number
  private readonly entries: Pending[] = []
  private head = 0
  private pending = 0
  private timer: NodeJS.Timeout | undefined
  private refed = false

  constructor(ms: number) {
    this.ms = ms
  }

  /** Adds a deadline `ms` from now. */
  add(strategy: string, what: string, detail: string | undefined, onTimeout: (err: StoreError) => void): Pending {
    const entry = new Pending(this, ioTimers.now() + this.ms, strategy, what, detail, onTimeout)
    this.entries.push(entry)
    this.pending++
    if (this.timer === undefined) this.arm(entry.deadline)
    else if (!this.refed) {
      this.timer.ref()
      this.refed = true
    }
    return entry
  }

  /** The call settled first: its deadline no longer matters. */
  settle(entry: Pending): void {
    if (entry.onTimeout === undefined) return
    entry.onTimeout = undefined
    if (--this.pending === 0) {
      // nothing left to time out: drop the settled entries, let the process exit
      this.entries.length = 0
      this.head = 0
      if (this.refed) {
        this.timer?.unref()
        this.refed = false
      }
    } else this.trim()
  }

  // Moves the head past settled entries (calls mostly settle in the order they were made), and
  // now and then drops them from the array.
  private trim(): void {
    const entries = this.entries
    let head = this.head
    while (head < entries.length && (entries[head] as Pending).onTimeout === undefined) head++
    if (head > 1024 && head * 2 > entries.length) {
      entries.splice(0, head)
      head = 0
    }
    this.head = head
  }

  private arm(at: number): void {
    this.timer = ioTimers.setTimeout(() => this.sweep(), Math.max(0, Math.ceil(at - ioTimers.now())))
    this.refed = this.pending > 0
    if (!this.refed) this.timer.unref()
  }

  private sweep(): void {
    this.timer = undefined
    const now = ioTimers.now()
    for (;;) {
      this.trim()
      const entry = this.entries[this.head]
      if (entry === undefined || entry.deadline > now) break
      const onTimeout = entry.onTimeout as (err: StoreError) => void
      this.settle(entry)
      onTimeout(timeoutError(entry.strategy, entry.what, this.ms, entry.detail))
    }
    // the earliest deadline still pending (trim left the head on it), if any
    const next = this.entries[this.head]
    if (next !== undefined && this.timer === undefined) this.arm(next.deadline)
  }
}

const queues = new Map<number, DeadlineQueue>()

function timeoutError(strategy: string, what: string, ms: number, detail: string | undefined): StoreError {
  return new StoreError('STORE_TIMEOUT', strategy, `${what} timed out after ${ms} ms${detail === undefined ? '' : ` (${detail})`}`)
}

/**
 * Calls `onTimeout` with a STORE_TIMEOUT {@link StoreError} (`<what> timed out after <ms> ms`,
 * and ` (<detail>)` when given) `ms` from now unless `settle()` is called first. Deadlines of the
 * same `ms` share one timer (see DeadlineQueue), so bounding a call costs no timer of its own;
 * the timer keeps the process alive while a deadline is pending, as the store call it bounds
 * would, and stops doing so once none is. The one way every store call is bounded.
 */
export function deadline(ms: number, strategy: string, what: string, onTimeout: (err: StoreError) => void, detail?: string): Deadline {
  let queue = queues.get(ms)
  if (queue === undefined) {
    // a few distinct timeouts in practice (storeTimeoutMs); fetch's shrinking ones are rare
    if (queues.size >= 64) return ownDeadline(ms, strategy, what, detail, onTimeout)
    queue = new DeadlineQueue(ms)
    queues.set(ms, queue)
  }
  return queue.add(strategy, what, detail, onTimeout)
}

/** Options of {@link withTimeout}. */
export interface TimeoutOptions<T> {
  /** Added to the message in parentheses, such as "the write may have landed". */
  readonly detail?: string
  /** Called with the value when the promise fulfills after the deadline (to release a connection). */
  readonly onLate?: (value: T) => void
}

/**
 * Settles like `promise`, or rejects with a STORE_TIMEOUT {@link StoreError} after `ms`
 * (a {@link deadline}: no timer of its own, and the process is kept alive only while pending).
 */
export function withTimeout<T>(promise: Promise<T>, ms: number, strategy: string, what: string, options?: TimeoutOptions<T>): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let late = false
    const bound = deadline(
      ms,
      strategy,
      what,
      (err) => {
        late = true
        reject(err)
      },
      options?.detail,
    )
    promise.then(
      (value) => {
        bound.settle()
        if (late) options?.onLate?.(value)
        else resolve(value)
      },
      (err: unknown) => {
        bound.settle()
        reject(err)
      },
    )
  })
}

// A deadline with a timer of its own, past 64 distinct timeouts.
function ownDeadline(
  ms: number,
  strategy: string,
  what: string,
  detail: string | undefined,
  onTimeout: (err: StoreError) => void,
): Deadline {
  const timer = ioTimers.setTimeout(() => onTimeout(timeoutError(strategy, what, ms, detail)), ms)
  return { settle: () => ioTimers.clearTimeout(timer) }
}
