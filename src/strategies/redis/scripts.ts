/**
 * Running Lua scripts on Redis, for the Redis strategy and the Redis algorithms alike: a script
 * with its SHA1, EVALSHA with EVAL when the server has forgotten it, and one way to turn what
 * the driver threw into a {@link StoreError}.
 */
import { createHash } from 'node:crypto'
import { StoreError } from '../../core/errors.js'
import { ioTimers } from '../../core/io-timers.js'
import { type RedisAdapter, redisAdapter } from './client-adapter.js'
import { keySlot } from './key-slot.js'

// the algorithms (src/algorithms) reach the clients through this module, as the store does
export { type RedisAdapter, redisAdapter, type SupportedRedisClient } from './client-adapter.js'

/** A Lua script with its SHA1, as EVALSHA wants it; computed once, when the module loads. */
export interface LuaScript {
  readonly source: string
  readonly sha: string
}

/** Prepares a script (its source trimmed, so the SHA does not depend on the indentation). */
export function luaScript(source: string): LuaScript {
  const trimmed = source.trim()
  return { source: trimmed, sha: createHash('sha1').update(trimmed).digest('hex') }
}

/**
 * The two commands a script needs, as ioredis (and iovalkey) has them: a `Redis` or `Cluster`
 * fits. A `Cluster` also has its slot map (`slots[slot][0]` is the master's address), which
 * tells which node a call goes to. {@link evalScript} takes such a client or any
 * {@link RedisAdapter} (client-adapter.ts maps node-redis onto one).
 */
export interface ScriptClient {
  evalsha(sha: string, numKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>
  eval(script: string, numKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>
  readonly isCluster?: boolean
  readonly slots?: readonly (readonly string[] | undefined)[]
}

function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT')
}

// The scripts each adapter has sent by EVAL (see evalScript): by SHA, or on a Cluster by node
// name and SHA.
const sentWhole = new WeakMap<RedisAdapter, Set<string>>()

/**
 * Where the call goes, as a name for `sentWhole`: the SHA alone for a single server; on a
 * Cluster the master that owns the first key's slot (the client's slot map) with the SHA, or
 * undefined while the client does not know it yet (before its first slot map, or for a call
 * with no keys).
 */
function destination(adapter: RedisAdapter, sha: string, numKeys: number, first: string | number | undefined): string | undefined {
  if (!adapter.cluster) return sha
  if (numKeys === 0 || first === undefined) return undefined
  const node = adapter.masterOf?.(keySlot(String(first)))
  return node === undefined ? undefined : `${node} ${sha}`
}

function asAdapter(client: ScriptClient | RedisAdapter): RedisAdapter {
  return typeof (client as RedisAdapter).callEvalSha === 'function' ? (client as RedisAdapter) : redisAdapter(client as ScriptClient)
}

/**
 * Runs `script` by EVALSHA, and by EVAL when the server answers NOSCRIPT (a restart, SCRIPT
 * FLUSH, a failover; EVAL caches it again). `read` turns the reply into the result and `fail`
 * handles a failure, each in the same promise reaction as the reply: a synchronous hit costs one
 * reaction here, not a chain of them.
 *
 * A client's first call of each script is an EVAL, on a Cluster its first call of each script
 * to each master. An EVALSHA that fails with NOSCRIPT is sent again after the calls that
 * followed it, so a script the server lacks while it holds the others (a new version's changed
 * script, a client's first read after checks in the same turn, a Cluster node that has seen
 * the checks but not the read) would run after calls made after it: a read would count checks
 * made later. With the first call an EVAL, a script the server lacks runs in its place. After a
 * restart or SCRIPT FLUSH the server lacks every script, and the calls sent again keep their
 * order among themselves.
 */
export function evalScript<T>(
  client: ScriptClient | RedisAdapter,
  script: LuaScript,
  numKeys: number,
  keysAndArgs: readonly (string | number)[],
  read: (reply: unknown) => T,
  fail: (err: unknown) => T = rethrow,
): Promise<T> {
  const adapter = asAdapter(client)
  let sent = sentWhole.get(adapter)
  if (sent === undefined) {
    sent = new Set()
    sentWhole.set(adapter, sent)
  }
  const where = destination(adapter, script.sha, numKeys, keysAndArgs[0])
  if (where === undefined || !sent.has(where)) {
    if (where !== undefined) sent.add(where)
    return adapter.callEval(script.source, numKeys, keysAndArgs).then(read, fail)
  }
  return adapter.callEvalSha(script.sha, numKeys, keysAndArgs).then(read, (err: unknown) => {
    if (!isNoScript(err)) return fail(err)
    return adapter.callEval(script.source, numKeys, keysAndArgs).then(read, fail)
  })
}

function rethrow(err: unknown): never {
  throw err
}

// An error reply's message starts with its kind in capitals ("ERR", "WRONGTYPE", "NOSCRIPT",
// "CROSSSLOT"; the RESP protocol spec, "Simple errors"), as node-redis passes it on; its own
// connection errors ("The client is closed", "Socket closed unexpectedly") and Node's
// ("connect ECONNREFUSED …") do not.
const ERROR_REPLY = /^[A-Z][A-Z0-9_]+(?: |$)/

/**
 * What the driver threw, as a {@link StoreError}: an error reply (the server refused the
 * command: ioredis's `ReplyError`, node-redis's error replies) or an argument the store cannot
 * hold is `STORE_ERROR`; anything else is the connection, `STORE_UNAVAILABLE`. A StoreError (a
 * timeout, a lost reply) stays as it is.
 */
export function redisError(err: unknown, strategy = 'redis'): StoreError {
  if (err instanceof StoreError) return err
  const error = err instanceof Error ? err : undefined
  const refused = error?.name === 'ReplyError' || err instanceof RangeError || (error !== undefined && ERROR_REPLY.test(error.message))
  return new StoreError(refused ? 'STORE_ERROR' : 'STORE_UNAVAILABLE', strategy, error?.message ?? String(err), { cause: err })
}

// Calls held at most, per socket held: a held batch leaves once it has this many, and the rest of
// the iteration's calls start another. Holding every call of a batch of replies until the iteration ends made a
// convoy at 64 in flight: the client worked through all 64 replies while Redis waited, then Redis
// through all 64 calls while the client waited, so neither side's work overlapped the other's.
// Sent in parts, Redis runs the first calls while the client still makes the next ones.
// At 64 in flight on one redis-server (bench/redis.bench.ts --sync --single) the synchronous
// strategy made 69,140 decisions/s holding every call, 123,893 holding 8, 122,789 holding 16 and
// 119,545 holding 32; at 256, 133,208 against 118,976, 129,251 and 127,798.
const MAX_HELD = 16

/**
 * Corks `client`'s ready sockets until the end of this event-loop iteration and sends what they
 * hold then, as one write per socket: the calls of every I/O callback of the iteration (one per
 * HTTP connection in a server) leave together, and Redis reads them together. A
 * process.nextTick would release them after the first callback, one write per request. Calls
 * `released` just before the sockets are uncorked. Returns the release, to send what is held
 * sooner (a second call does nothing), with the number of sockets held, or undefined (holding
 * nothing) when no socket is ready.
 */
export function holdWrites(client: RedisAdapter, released: () => void): { release: () => void; sockets: number } | undefined {
  const streams = client.sockets?.()
  if (streams === undefined || streams.length === 0) return undefined
  for (const stream of streams) stream.cork()
  let held = true
  const release = (): void => {
    if (!held) return
    held = false
    released()
    for (const stream of streams) stream.uncork()
  }
  // node:timers' own (core/io-timers.ts): held writes are released whatever a test suite fakes
  // (test/integration/redis-fake-timers.test.ts)
  ioTimers.setImmediate(release)
  return { release, sockets: streams.length }
}

/**
 * A client's held writes (see {@link holdWrites}), for the strategy and the service's
 * algorithms: {@link hold} before a call is written, {@link written} after it; the writes leave at
 * the end of the event-loop iteration, or as soon as the calls held reach {@link MAX_HELD} per
 * socket held (a cluster client's calls spread over its masters' sockets).
 */
export class WriteHold {
  private readonly client: RedisAdapter
  private release: (() => void) | undefined
  private held = 0
  private limit = MAX_HELD

  constructor(client: RedisAdapter) {
    this.client = client
  }

  /** Holds the client's sockets, unless they are held already. */
  hold(): void {
    if (this.release !== undefined) return
    this.held = 0
    const hold = holdWrites(this.client, () => {
      this.release = undefined
    })
    this.release = hold?.release
    this.limit = MAX_HELD * (hold?.sockets ?? 1)
  }

  /** A call was written: sends the held calls once there are {@link MAX_HELD} per socket. */
  written(): void {
    if (this.release !== undefined && ++this.held >= this.limit) this.release()
  }
}
