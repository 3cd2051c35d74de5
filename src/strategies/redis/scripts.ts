/**
 * Running Lua scripts on Redis, for the Redis strategy and the Redis algorithms alike: a script
 * with its SHA1, EVALSHA with EVAL when the server has forgotten it, and one way to turn what
 * the driver threw into a {@link StoreError}.
 */
import { createHash } from 'node:crypto'
import timers from 'node:timers'
import { StoreError } from '../../core/errors.js'

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

/** The two commands a script needs; an ioredis `Redis` or `Cluster` has them. */
export interface ScriptClient {
  evalsha(sha: string, numKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>
  eval(script: string, numKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>
}

function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT')
}

/**
 * Runs `script` by EVALSHA, and by EVAL when the server answers NOSCRIPT (a restart, SCRIPT
 * FLUSH, a failover; EVAL caches it again). `read` turns the reply into the result and `fail`
 * handles a failure, each in the same promise reaction as the reply: a synchronous hit costs one
 * reaction here, not a chain of them.
 */
export function evalScript<T>(
  client: ScriptClient,
  script: LuaScript,
  numKeys: number,
  keysAndArgs: readonly (string | number)[],
  read: (reply: unknown) => T,
  fail: (err: unknown) => T = rethrow,
): Promise<T> {
  return client.evalsha(script.sha, numKeys, ...keysAndArgs).then(read, (err: unknown) => {
    if (!isNoScript(err)) return fail(err)
    return client.eval(script.source, numKeys, ...keysAndArgs).then(read, fail)
  })
}

function rethrow(err: unknown): never {
  throw err
}

/**
 * What the driver threw, as a {@link StoreError}: a `ReplyError` (the server refused the command)
 * or an argument the store cannot hold is `STORE_ERROR`; anything else is the connection,
 * `STORE_UNAVAILABLE`. A StoreError (a timeout, a lost reply) stays as it is.
 */
export function redisError(err: unknown, strategy = 'redis'): StoreError {
  if (err instanceof StoreError) return err
  const error = err instanceof Error ? err : undefined
  const refused = error?.name === 'ReplyError' || err instanceof RangeError
  return new StoreError(refused ? 'STORE_ERROR' : 'STORE_UNAVAILABLE', strategy, error?.message ?? String(err), { cause: err })
}

interface Corkable {
  cork(): void
  uncork(): void
}

type Connection = { status?: string; stream?: Partial<Corkable> }

/**
 * The sockets of a client that are ready to write: a single-server client's own, or each
 * master's of a cluster client (its commands go out on those). The strategy and the service's
 * algorithms cork them while many calls are in flight.
 */
function corkable(client: object): Corkable[] {
  const cluster = client as { nodes?: (role: string) => unknown[] }
  const connections = (typeof cluster.nodes === 'function' ? cluster.nodes('master') : [client]) as Connection[]
  const out: Corkable[] = []
  for (const c of connections) {
    const stream = c.stream
    if (c.status === 'ready' && typeof stream?.cork === 'function' && typeof stream.uncork === 'function') out.push(stream as Corkable)
  }
  return out
}

// node:timers' own setImmediate, taken when this module loads: a fake-timer library installed
// later (sinon, Jest, node:test's mock.timers) replaces the global, not this reference, so writes
// held by holdWrites() are released whatever a test suite fakes
// (test/integration/redis-fake-timers.test.ts).
const realSetImmediate: typeof setImmediate = timers.setImmediate

/**
 * Corks `client`'s ready sockets until the end of this event-loop iteration and sends what they
 * hold then, as one write per socket: the calls of every I/O callback of the iteration (one per
 * HTTP connection in a server) leave together, and Redis reads them together. A
 * process.nextTick would release them after the first callback, one write per request. Calls
 * `released` just before the sockets are uncorked; returns false (and holds nothing) when no
 * socket is ready.
 */
export function holdWrites(client: object, released: () => void): boolean {
  const streams = corkable(client)
  if (streams.length === 0) return false
  for (const stream of streams) stream.cork()
  realSetImmediate(() => {
    released()
    for (const stream of streams) stream.uncork()
  })
  return true
}
