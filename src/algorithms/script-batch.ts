/**
 * The service's checks on one Redis, sent together: the checks of one event-loop iteration (one
 * per HTTP request in a server) leave as one call of the script's batch form (lua.ts,
 * {@link BatchableScript}) instead of one call each. Redis runs them in the order they were
 * made, one after the other inside the call, so each gets the answer it would have got alone;
 * what is saved is the per-call work, on both sides: the driver's command, its reply and its
 * promise, and Redis's reading, dispatch and script start (docs/BENCHMARKS-service.md, "Service
 * on Redis").
 *
 * A check waits for nothing it did not wait for before: the writes of an iteration were already
 * held until its end (WriteHold, scripts.ts). A lone check is sent as the plain script. A batch
 * leaves as soon as it holds {@link MAX_BATCH} checks, so Redis starts on it while the next is
 * being made. A Redis Cluster client is never batched (a script's keys must share one slot).
 */
import { StoreError } from '../core/errors.js'
import { ioTimers } from '../core/io-timers.js'
import { evalScript, holdWrites, type RedisAdapter, redisError } from '../strategies/redis/scripts.js'
import type { BatchableScript } from './lua.js'

/** Learns Redis's clock from a reply: when the call left, when its reply came, Redis's time in it. */
export type Sample = (sentAtMs: number, receivedAtMs: number, redisMs: number) => void

/** Checks per batch call at most; as the writes held per socket (MAX_HELD in scripts.ts), and for the same reason. */
export const MAX_BATCH = 16

/** One check waiting in a batch. `done` gets its numbers (Redis's time removed) or its error. */
export interface BatchedCheck {
  readonly key: string
  readonly args: readonly (string | number)[]
  /** Its deadline on Redis's clock, 0 for none. */
  readonly deadline: number
  readonly what: string
  readonly length: number
  readonly done: (result: number[] | StoreError) => void
}

/** Whether a client's checks can be batched: a single server's client, not a cluster's. */
export function batchable(client: RedisAdapter): boolean {
  return !client.cluster
}

/**
 * The checks of one client waiting for the end of the iteration, per script. `send` makes the
 * call: the plain script for one check, the batch form for more; `sample` gets Redis's time
 * and the call's round trip, for the clock offset.
 */
export class ScriptBatches {
  private readonly client: RedisAdapter
  private readonly queues = new Map<BatchableScript, BatchedCheck[]>()
  private readonly sample: Sample
  private scheduled = false

  constructor(client: RedisAdapter, sample: Sample) {
    this.client = client
    this.sample = sample
  }

  add(script: BatchableScript, check: BatchedCheck): void {
    let queue = this.queues.get(script)
    if (queue === undefined) {
      queue = []
      this.queues.set(script, queue)
    }
    queue.push(check)
    if (queue.length >= MAX_BATCH) {
      this.queues.delete(script)
      this.send(script, queue)
    } else if (!this.scheduled) {
      this.scheduled = true
      ioTimers.setImmediate(this.atTurnEnd)
    }
  }

  private readonly atTurnEnd = (): void => {
    this.scheduled = false
    this.flush()
  }

  /** Sends every check waiting, as one write; before any other call, which must not overtake them. */
  flush(): void {
    if (this.queues.size === 0) return
    const hold = this.queues.size > 1 ? holdWrites(this.client, noop) : undefined
    for (const [script, queue] of this.queues) {
      this.queues.delete(script)
      this.send(script, queue)
    }
    hold?.release()
  }

  private send(script: BatchableScript, checks: BatchedCheck[]): void {
    const sentAtMs = ioTimers.now()
    const failed = (err: unknown): void => {
      const error = redisError(err)
      for (const check of checks) check.done(error)
    }
    if (checks.length === 1) {
      const check = checks[0] as BatchedCheck
      const keysAndArgs = [check.key, ...check.args, check.deadline]
      const answered = (reply: unknown): void => this.answerOne(check, reply, sentAtMs)
      callSafely(() => evalScript(this.client, script, 1, keysAndArgs, answered, failed), failed)
      return
    }
    // the earliest deadline: a batch Redis reaches late enough for one check changes nothing; a
    // check without one (0: the offset not yet known) leaves the batch without one
    let deadline = Number.POSITIVE_INFINITY
    const keysAndArgs: (string | number)[] = checks.map((c) => c.key)
    keysAndArgs.push(0)
    for (const check of checks) {
      deadline = Math.min(deadline, check.deadline)
      for (const arg of check.args) keysAndArgs.push(arg)
    }
    keysAndArgs[checks.length] = deadline
    const answered = (reply: unknown): void => this.answerMany(checks, reply, sentAtMs)
    callSafely(() => evalScript(this.client, script.batch, checks.length, keysAndArgs, answered, failed), failed)
  }

  private answerOne(check: BatchedCheck, reply: unknown, sentAtMs: number): void {
    check.done(readReply(reply, check.what, check.length, sentAtMs, this.sample))
  }

  // { n, n numbers } or { -2, message } per check, then Redis's time; { -1, time } past the deadline
  private answerMany(checks: readonly BatchedCheck[], reply: unknown, sentAtMs: number): void {
    if (!Array.isArray(reply) || reply.length < 2) {
      for (const check of checks) check.done(unexpected(check.what, reply))
      return
    }
    this.sample(sentAtMs, ioTimers.now(), Number(reply[reply.length - 1]))
    if (reply.length === 2 && Number(reply[0]) === -1) {
      for (const check of checks) check.done(late(check.what))
      return
    }
    let at = 0
    for (let c = 0; c < checks.length; c++) {
      const check = checks[c] as BatchedCheck
      const n = Number(reply[at])
      if (n === -2) {
        check.done(new StoreError('STORE_ERROR', 'redis', `${check.what}: ${String(reply[at + 1])}`))
        at += 2
      } else if (n >= check.length && at + n < reply.length) {
        const numbers: number[] = new Array<number>(n)
        for (let i = 0; i < n; i++) numbers[i] = Number(reply[at + 1 + i])
        check.done(numbers)
        at += 1 + n
      } else {
        // the rest of the reply cannot be read past a malformed part
        for (const rest of checks.slice(c)) rest.done(unexpected(rest.what, reply))
        return
      }
    }
  }
}

/**
 * The numbers of one script's reply without Redis's time, which goes to `sample` with the round
 * trip: at least `length` of them; or the error to answer (past the deadline, a malformed reply).
 */
export function readReply(reply: unknown, what: string, length: number, sentAtMs: number, sample: Sample): number[] | StoreError {
  if (!Array.isArray(reply) || reply.length < 2 || (reply.length < length + 1 && Number(reply[0]) !== -1)) return unexpected(what, reply)
  const numbers = reply.map((v) => Number(v))
  sample(sentAtMs, ioTimers.now(), numbers.pop() as number)
  return numbers[0] === -1 ? late(what) : numbers
}

/** Makes a driver call that answers its own failures (evalScript); one it throws goes to `failed` too. */
export function callSafely(call: () => Promise<void>, failed: (err: unknown) => void): void {
  try {
    void call()
  } catch (err) {
    failed(err)
  }
}

function noop(): void {}

function unexpected(what: string, reply: unknown): StoreError {
  return new StoreError('STORE_ERROR', 'redis', `${what}: unexpected reply ${String(reply)}`)
}

// past its deadline, Redis changed nothing; the caller has already been told of the timeout
function late(what: string): StoreError {
  return new StoreError('STORE_TIMEOUT', 'redis', `${what}: Redis ran the script after its deadline`)
}
