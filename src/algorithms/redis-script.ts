import { performance } from 'node:perf_hooks'
import { StoreError } from '../core/errors.js'
import { withTimeout } from '../core/timeout.js'
import { corkable, evalScript, type LuaScript, redisError } from '../strategies/redis/scripts.js'
import type { RedisScriptClient } from './types.js'

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
 * Redis's clock as seen from this process: `redisMs - performance.now()`, learnt from the time
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

const offsets = new WeakMap<RedisScriptClient, RedisClockOffset>()

/** Script calls of one client sent and not answered yet, and whether its sockets are corked. */
interface Writes {
  inFlight: number
  corked: boolean
}

const writes = new WeakMap<RedisScriptClient, Writes>()

// Counts a call going out on `client`. With calls already waiting for replies (many requests in
// flight), holds this tick's writes and sends them as one socket write on the next tick: one
// syscall (and one read in Redis) for every call the requests of one event-loop turn make,
// instead of one each, as the Redis strategy does. A lone call is written at once.
function sending(client: RedisScriptClient): Writes {
  let state = writes.get(client)
  if (state === undefined) {
    state = { inFlight: 0, corked: false }
    writes.set(client, state)
  }
  if (state.inFlight > 0 && !state.corked) {
    const streams = corkable(client)
    if (streams.length > 0) {
      const held = state
      for (const stream of streams) stream.cork()
      held.corked = true
      process.nextTick(() => {
        held.corked = false
        for (const stream of streams) stream.uncork()
      })
    }
  }
  state.inFlight++
  return state
}

function offsetOf(client: RedisScriptClient): RedisClockOffset {
  let offset = offsets.get(client)
  if (offset === undefined) {
    offset = new RedisClockOffset()
    offsets.set(client, offset)
  }
  return offset
}

/**
 * Runs one of the algorithms' scripts (lua.ts): by EVALSHA, falling back to EVAL on NOSCRIPT,
 * bounded by `timeoutMs`, with the deadline appended to `args` so that Redis skips the script
 * if it only gets to run it after the caller gave up. Resolves with the reply's numbers without
 * Redis's time (which the offset learns from): at least `length` of them. Failures reject with a {@link StoreError}
 * (`STORE_UNAVAILABLE`, `STORE_TIMEOUT` or `STORE_ERROR`).
 */
export async function runScript(
  client: RedisScriptClient,
  script: LuaScript,
  keys: readonly string[],
  args: readonly (string | number)[],
  timeoutMs: number,
  what: string,
  length: number,
): Promise<number[]> {
  const offset = offsetOf(client)
  const sentAtMs = performance.now()
  let reply: unknown
  const state = sending(client)
  try {
    const call = evalScript(client, script, keys.length, [...keys, ...args, offset.deadline(sentAtMs, timeoutMs)], (r) => r)
    reply = await withTimeout(call, timeoutMs, 'redis', 'script')
  } catch (err) {
    throw redisError(err)
  } finally {
    state.inFlight--
  }
  if (!Array.isArray(reply) || reply.length < 2 || (reply.length < length + 1 && Number(reply[0]) !== -1))
    throw new StoreError('STORE_ERROR', 'redis', `${what}: unexpected reply ${String(reply)}`)
  const numbers = reply.map((v) => Number(v))
  offset.sample(sentAtMs, performance.now(), numbers.pop() as number)
  // past its deadline, Redis changed nothing; the caller has already been told of the timeout
  if (numbers[0] === -1) throw new StoreError('STORE_TIMEOUT', 'redis', `${what}: Redis ran the script after its deadline`)
  return numbers
}
