/**
 * The one place that knows Redis drivers: every client the Redis strategy, the service's Redis
 * algorithms and the simple API accept is mapped here onto {@link RedisAdapter}, the few calls
 * the scripts need. The rest of the code sees only the adapter. Clients are recognised by the
 * methods they have, never by their class:
 *
 * - ioredis and iovalkey (`Redis`, `Cluster`): `evalsha` and `eval`; a cluster has `nodes()`.
 * - node-redis 5 and 6 (`createClient`): `sendCommand(args)` and `isOpen`.
 * - a node-redis cluster (`createCluster`): `sendCommand(firstKey, isReadonly, args)` and
 *   `nodeClient()`.
 * - an object that is already a {@link RedisAdapter} (`callEvalSha`): used as it is.
 *
 * docs/STORES-redis.md ("Clients") says what each one means for a user.
 */
import { ConfigError } from '../../core/errors.js'
import { withTimeout } from '../../core/timeout.js'
import { nodeRedisAdapter, nodeRedisClusterAdapter } from './node-redis-adapter.js'

export { nodeRedisAdapter, nodeRedisClusterAdapter } from './node-redis-adapter.js'

/** A socket whose writes can be held (Node's `net.Socket`): see `WriteHold` in scripts.ts. */
export interface Corkable {
  cork(): void
  uncork(): void
}

/** One master, for commands that run on every node in turn (SCAN). */
export interface RedisNodeAdapter {
  /** `SCAN cursor MATCH pattern COUNT count`: resolves with `[nextCursor, names]`. */
  scan(cursor: string, pattern: string, count: number): Promise<unknown>
}

/**
 * What the library asks of a Redis client. Pass one as `client` to use a driver the library
 * does not know; the built-in ones are made by {@link redisAdapter}.
 */
export interface RedisAdapter {
  /** Names the driver in errors, such as "ioredis" or "node-redis cluster". */
  readonly driver: string
  /** Whether keys spread over several masters (a Redis Cluster): scripts are cached per master. */
  readonly cluster: boolean
  /** `EVALSHA sha numKeys ...keysAndArgs`; a server that lacks the script rejects with a message starting "NOSCRIPT". */
  callEvalSha(sha: string, numKeys: number, keysAndArgs: readonly (string | number)[]): Promise<unknown>
  /** `EVAL source numKeys ...keysAndArgs`. */
  callEval(source: string, numKeys: number, keysAndArgs: readonly (string | number)[]): Promise<unknown>
  /**
   * A cluster's master for a hash slot, as the client's slot map has it now (any string naming
   * the node, such as `host:port`), or undefined while it does not know. Not called on a single
   * server.
   */
  masterOf?(slot: number): string | undefined
  /** The masters to SCAN (the one server, or each master of a cluster); empty while a cluster client knows none. */
  scanNodes(): Promise<readonly RedisNodeAdapter[]>
  /** `UNLINK ...names`, names of one hash slot. */
  unlink(names: readonly string[]): Promise<unknown>
  /** Sockets ready to write whose writes may be held until the end of the event-loop iteration; none if omitted. */
  sockets?(): readonly Corkable[]
  /** Drops the connections and makes new ones: replies were lost, so no later reply matches its command. */
  reconnect?(): void
  /** Closes a client the library made (from a `url`): QUIT when connected, then disconnects. */
  close?(): Promise<void>
}

/** The ioredis (and iovalkey) calls the adapter makes; a `Redis` or a `Cluster` has them. */
export interface IoredisLike {
  evalsha(sha: string, numKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>
  eval(script: string, numKeys: number, ...keysAndArgs: (string | number)[]): Promise<unknown>
  scan?(cursor: string, matchToken: 'MATCH', pattern: string, countToken: 'COUNT', count: number): Promise<unknown>
  unlink?(...keys: string[]): Promise<unknown>
  quit?(): Promise<unknown>
  disconnect?(reconnect?: boolean): void
  readonly status?: string
  /** A cluster's master connections. */
  nodes?(role: 'master'): unknown[]
  /** A cluster's slot map: `slots[slot][0]` is the master's `host:port`. */
  readonly slots?: readonly (readonly string[] | undefined)[]
}

/** A node-redis client (`createClient()`, redis 5 and 6), as far as the adapter uses it. */
export interface NodeRedisClientLike {
  sendCommand(args: string[], options?: NodeRedisCommandOptions): Promise<unknown>
  /** False until `connect()` resolves, and again after `close()`/`destroy()`. */
  readonly isOpen: boolean
  connect(): Promise<unknown>
}

/** What the adapter passes to node-redis's `sendCommand` (see RAW_COMMAND in client-adapter.ts). */
export interface NodeRedisCommandOptions {
  readonly typeMapping?: object
  readonly timeout?: number | undefined
}

/** A node of a node-redis cluster's slot map. */
export interface NodeRedisClusterNode {
  readonly address: string
  readonly client?: NodeRedisClientLike
}

/** A node-redis cluster (`createCluster()`, redis 5 and 6), as far as the adapter uses it. */
export interface NodeRedisClusterLike {
  sendCommand(
    firstKey: string | undefined,
    isReadonly: boolean | undefined,
    args: string[],
    options?: NodeRedisCommandOptions,
  ): Promise<unknown>
  readonly isOpen: boolean
  readonly masters: readonly NodeRedisClusterNode[]
  readonly slots: readonly ({ readonly master: NodeRedisClusterNode } | undefined)[]
  nodeClient(node: NodeRedisClusterNode): NodeRedisClientLike | Promise<NodeRedisClientLike>
  connect(): Promise<unknown>
}

/** Every client the library takes: ioredis or iovalkey, node-redis, a node-redis cluster, or an adapter. */
export type SupportedRedisClient = IoredisLike | NodeRedisClientLike | NodeRedisClusterLike | RedisAdapter

type Shape = Record<string, unknown>

function isAdapter(client: Shape): boolean {
  return typeof client.callEvalSha === 'function' && typeof client.callEval === 'function'
}

function isIoredisLike(client: Shape): boolean {
  return typeof client.evalsha === 'function' && typeof client.eval === 'function'
}

function isNodeRedisCluster(client: Shape): boolean {
  return typeof client.sendCommand === 'function' && typeof client.nodeClient === 'function' && 'masters' in client
}

function isNodeRedisClient(client: Shape): boolean {
  return typeof client.sendCommand === 'function' && typeof client.isOpen === 'boolean'
}

const EXPECTED =
  "an ioredis Redis or Cluster (or iovalkey's), a node-redis client (createClient) or cluster (createCluster), or a RedisAdapter"

function describeValue(value: unknown): string {
  if (value === null || typeof value !== 'object') return value === null ? 'null' : typeof value
  const methods = ['evalsha', 'eval', 'sendCommand', 'isOpen', 'nodeClient', 'callEvalSha'].filter((m) => m in value)
  return methods.length === 0 ? 'an object with none of evalsha, sendCommand, callEvalSha' : `an object with only ${methods.join(', ')}`
}

/** Why `client` is no client the library takes, or undefined when it is one. */
export function clientProblem(client: unknown): string | undefined {
  if (typeof client !== 'object' || client === null) return `client must be ${EXPECTED}, got ${describeValue(client)}`
  const shape = client as Shape
  if (isAdapter(shape) || isIoredisLike(shape) || isNodeRedisCluster(shape) || isNodeRedisClient(shape)) return undefined
  return `client must be ${EXPECTED}, got ${describeValue(client)}`
}

// One adapter per client, so that everything using a client (several algorithms, a strategy)
// shares what is kept per client: the scripts each master has been sent, the held writes, the
// batched checks.
const adapters = new WeakMap<object, RedisAdapter>()

/**
 * The adapter of `client`, recognised by its methods (see the module comment); the same object
 * for the same client. Throws a {@link ConfigError} naming what is missing, or a node-redis
 * `keyPrefix` (the library's commands are sent raw, which node-redis does not prefix: use the
 * library's own prefix option).
 *
 * @example
 * import { createClient } from 'redis'
 * const client = await createClient({ url: 'redis://127.0.0.1:6379' }).connect()
 * const adapter = redisAdapter(client)
 */
export function redisAdapter(client: SupportedRedisClient): RedisAdapter {
  const known = adapters.get(client)
  if (known !== undefined) return known
  const problem = clientProblem(client)
  if (problem !== undefined) throw new ConfigError('INVALID_OPTION', `redis: ${problem}`)
  const shape = client as unknown as Shape
  if (isAdapter(shape)) return client as RedisAdapter
  let adapter: RedisAdapter
  if (isIoredisLike(shape)) adapter = ioredisAdapter(client as IoredisLike)
  else if (isNodeRedisCluster(shape)) adapter = nodeRedisClusterAdapter(client as NodeRedisClusterLike)
  else adapter = nodeRedisAdapter(client as NodeRedisClientLike)
  adapters.set(client, adapter)
  return adapter
}

type IoredisConnection = { status?: string; stream?: Partial<Corkable> }

// ioredis and iovalkey: the fastest path, so each call is the driver's own method, arguments spread
class IoredisAdapter implements RedisAdapter {
  readonly driver = 'ioredis'
  readonly cluster: boolean
  private readonly client: IoredisLike

  constructor(client: IoredisLike) {
    this.client = client
    this.cluster = typeof client.nodes === 'function'
  }

  callEvalSha(sha: string, numKeys: number, keysAndArgs: readonly (string | number)[]): Promise<unknown> {
    return this.client.evalsha(sha, numKeys, ...keysAndArgs)
  }

  callEval(source: string, numKeys: number, keysAndArgs: readonly (string | number)[]): Promise<unknown> {
    return this.client.eval(source, numKeys, ...keysAndArgs)
  }

  masterOf(slot: number): string | undefined {
    return this.client.slots?.[slot]?.[0]
  }

  scanNodes(): Promise<readonly RedisNodeAdapter[]> {
    const nodes = this.cluster ? ((this.client.nodes as (role: 'master') => IoredisLike[])('master') ?? []) : [this.client]
    return Promise.resolve(nodes.map(ioredisNode))
  }

  unlink(names: readonly string[]): Promise<unknown> {
    if (typeof this.client.unlink !== 'function') return Promise.reject(new TypeError('redis: the client has no unlink method'))
    return this.client.unlink(...names)
  }

  // a single server's own socket, or each master's of a cluster (its commands go out on those)
  sockets(): Corkable[] {
    const connections = (
      this.cluster ? (this.client.nodes as (role: 'master') => unknown[])('master') : [this.client]
    ) as IoredisConnection[]
    const out: Corkable[] = []
    for (const c of connections) {
      const stream = c.stream
      if (c.status === 'ready' && typeof stream?.cork === 'function' && typeof stream.uncork === 'function') out.push(stream as Corkable)
    }
    return out
  }

  // ioredis reconnects at once and resends the commands that had no reply (the pushes are idempotent)
  reconnect(): void {
    this.client.disconnect?.(true)
  }

  async close(): Promise<void> {
    const client = this.client
    // at most a second for pending replies, then a hard disconnect so that no reconnect timer keeps the process alive
    if (client.status === 'ready' && typeof client.quit === 'function')
      await withTimeout(client.quit(), 1000, 'redis', 'quit').catch(() => undefined)
    client.disconnect?.()
  }
}

function ioredisNode(node: IoredisLike): RedisNodeAdapter {
  return {
    scan: (cursor, pattern, count) =>
      typeof node.scan === 'function'
        ? node.scan(cursor, 'MATCH', pattern, 'COUNT', count)
        : Promise.reject(new TypeError('redis: the client has no scan method')),
  }
}

/** The adapter of an ioredis or iovalkey `Redis` or `Cluster` (what {@link redisAdapter} makes for one). */
export function ioredisAdapter(client: IoredisLike): RedisAdapter {
  return new IoredisAdapter(client)
}
