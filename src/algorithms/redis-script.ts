import { ioTimers } from '../core/io-timers.js'
import { StoreError } from '../core/errors.js'
import { deadline } from '../core/timeout.js'
import { evalScript, type LuaScript, type RedisAdapter, redisError, WriteHold } from '../strategies/redis/scripts.js'
import type { BatchableScript } from './lua.js'
import { batchable, callSafely, readReply, type Sample, ScriptBatches } from './script-batch.js'

// How much earlier than the caller's timeout a script's deadline falls on Redis's clock: the time
// the reply of a script that ran just in time needs to come back and be read, plus the error of
// the offset estimate. A deadline is only set while the estimate is good to a quarter of the
// timeout.
function deadlineMarginMs(timeoutMs: number): number {
  return Math.max(10, timeoutMs / 10)
}

// Samples older than this give way to the next one, however rough: clocks drift.
const OFFSET_SAMPLE_LIFE_MS = 10_000

/**
 * Redis's clock as seen from this process: `redisMs - ioTimers.now()` (performance.now as it was when the library loaded: a suite's fake timers replace the global), learnt from the time
 * every script returns. The best sample (the shortest round trip) is kept for a while; its
 * error is at most half its round trip.
 */
class RedisClockOffset {
  private offsetMs = 0
  private errorMs = Number.POSITIVE_INFINITY
  private sampledAtMs = Number.NEGATIVE_INFINITY

  sample(sentAtMs: number, receivedAtMs: number, redisMs: number): void {
    const errorMs = (receivedAtMs - sentAtMs) / 2
    if (errorMs > this.errorMs && receivedAtMs - this.sampledAtMs < OFFSET_SAMPLE_LIFE_MS) return
    this.offsetMs = redisMs - (sentAtMs + receivedAtMs) / 2
    this.errorMs = errorMs
    this.sampledAtMs = receivedAtMs
  }

  /** The deadline on Redis's clock of a call sent at `sentAtMs` with `timeoutMs`; 0 (none) while unknown. */
  deadline(sentAtMs: number, timeoutMs: number): number {
    const margin = deadlineMarginMs(timeoutMs) + this.errorMs
    if (!(margin <= timeoutMs / 4)) return 0
    return Math.floor(sentAtMs + this.offsetMs + timeoutMs - margin)
  }
}

/** What the scripts keep per client: Redis's clock, whether its sockets are held, and its checks waiting to be batched. */
interface ClientState {
  readonly offset: RedisClockOffset
  readonly sample: Sample
  readonly writes: WriteHold
  readonly batches: ScriptBatches | undefined
}

const states = new WeakMap<RedisAdapter, ClientState>()

function stateOf(client: RedisAdapter): ClientState {
  let state = states.get(client)
  if (state === undefined) {
    const offset = new RedisClockOffset()
    const sample: Sample = (sentAtMs, receivedAtMs, redisMs) => offset.sample(sentAtMs, receivedAtMs, redisMs)
    state = { offset, sample, writes: new WriteHold(client), batches: batchable(client) ? new ScriptBatches(client, sample) : undefined }
    states.set(client, state)
  }
  return state
}

// Every call is held (WriteHold): the client's socket writes leave at the end of this event-loop
// iteration, or once 16 calls per socket are held. The requests of one iteration arrive each in its own I/O
// callback (one per HTTP connection): corking for the tick wrote one call per request, and that
// write syscall (a loopback TCP send, which runs Redis's side of the delivery too) was the largest
// item of the service's CPU profile (see docs/BENCHMARKS-service.md). A lone call waits only for
// the rest of its own iteration. The checks (a {@link BatchableScript}) of a single server's
// client go further: those of one iteration are one call (script-batch.ts).

/**
 * Runs one of the algorithms' scripts (lua.ts): by EVALSHA, falling back to EVAL on NOSCRIPT,
 * bounded by `timeoutMs`, with the deadline appended to `args` so that Redis skips the script
 * if it only gets to run it after the caller gave up. Resolves with the reply's numbers without
 * Redis's time (which the offset learns from): at least `length` of them. Failures reject with a {@link StoreError}
 * (`STORE_UNAVAILABLE`, `STORE_TIMEOUT` or `STORE_ERROR`). A check of one key is batched with
 * the others of this iteration; any other call first sends the checks made before it.
 *
 * One promise of its own, settled in the reaction to the driver's reply (the deadline is an
 * entry in core/timeout.ts's shared queue): a decision waits on two promise reactions between
 * the reply and the algorithm's answer, not a chain of wrappers.
 */
export function runScript(
  client: RedisAdapter,
  script: LuaScript | BatchableScript,
  keys: readonly string[],
  args: readonly (string | number)[],
  timeoutMs: number,
  what: string,
  length: number,
): Promise<number[]> {
  const state = stateOf(client)
  const sentAtMs = ioTimers.now()
  const deadlineAt = state.offset.deadline(sentAtMs, timeoutMs)
  return new Promise<number[]>((resolve, reject) => {
    let late = false
    const bound = deadline(timeoutMs, 'redis', 'script', (err) => {
      late = true
      reject(err)
    })
    const done = (result: number[] | StoreError): void => {
      bound.settle()
      // a reply after the timeout: the caller has its answer
      if (late) return
      if (result instanceof StoreError) reject(result)
      else resolve(result)
    }
    const batches = state.batches
    if ('batch' in script && batches !== undefined && keys.length === 1) {
      batches.add(script, { key: keys[0] as string, args, deadline: deadlineAt, what, length, done })
      return
    }
    batches?.flush()
    const answered = (reply: unknown): void => {
      // nor is the round trip of a reply after the timeout worth a sample
      done(late ? [] : readReply(reply, what, length, sentAtMs, state.sample))
    }
    const failed = (err: unknown): void => done(redisError(err))
    state.writes.hold()
    callSafely(() => evalScript(client, script, keys.length, [...keys, ...args, deadlineAt], answered, failed), failed)
    state.writes.written()
  })
}
