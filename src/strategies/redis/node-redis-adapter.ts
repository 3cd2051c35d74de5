/**
 * node-redis (5 and 6, `createClient` and `createCluster`) as a {@link RedisAdapter}: raw
 * commands, the not-connected and keyPrefix refusals, and QUIT for replies lost. Split from
 * client-adapter.ts, which recognises the clients and adapts ioredis and iovalkey.
 */
import { ConfigError } from '../../core/errors.js'
import type {
  NodeRedisClientLike,
  NodeRedisClusterLike,
  NodeRedisCommandOptions,
  RedisAdapter,
  RedisNodeAdapter,
} from './client-adapter.js'

// Every command of the library: bulk replies as strings whatever type mapping the client was
// given (withTypeMapping), and no per-command timeout: each call is bounded by the library's own
// deadline (storeTimeoutMs, timeoutMs; core/timeout.ts), while node-redis 6's default of 5 s arms
// a timer per command, 16 µs of client CPU per command instead of 4.6 at 64 in flight
// (bench/redis-client-adapters.bench.ts; docs/BENCHMARKS-redis.md, "Clients").
const RAW_COMMAND: NodeRedisCommandOptions = { typeMapping: {}, timeout: undefined }

// node-redis takes strings (or Buffers) only
function commandArgs(command: string, script: string, numKeys: number, keysAndArgs: readonly (string | number)[]): string[] {
  const args = new Array<string>(keysAndArgs.length + 3)
  args[0] = command
  args[1] = script
  args[2] = String(numKeys)
  for (let i = 0; i < keysAndArgs.length; i++) {
    const arg = keysAndArgs[i]
    args[i + 3] = typeof arg === 'string' ? arg : String(arg)
  }
  return args
}

/**
 * A node-redis client (or cluster) that is not open: the library never connects a client it is
 * given (its owner's `connect()` would then fail), so it says what to do. Not a reply error: a
 * `STORE_UNAVAILABLE`, decided by the namespace's `onStoreError` like an outage.
 */
function notConnected(driver: string): Error {
  return new Error(
    `the ${driver} client is not connected: call await client.connect() before its first use (the library never connects or closes a client it is given)`,
  )
}

function refusePrefix(driver: string, client: object): void {
  const own = client as { _keyPrefix?: unknown; options?: { keyPrefix?: unknown } }
  const keyPrefix = own._keyPrefix ?? own.options?.keyPrefix
  if (typeof keyPrefix === 'string' && keyPrefix.length > 0)
    throw new ConfigError(
      'INVALID_OPTION',
      `redis: the ${driver} client has keyPrefix ${JSON.stringify(keyPrefix)}, which the library's commands (sent raw) do not carry; leave it unset and use the library's prefix option`,
    )
}

// The connection (node-redis's socketEpoch, counted per connection made) each client was last
// sent a QUIT on: the replies that QUIT disturbs again (its "OK" answers the call waiting first)
// must not renew the next connection too.
const quitEpochs = new WeakMap<object, number | undefined>()

// Replies lost: QUIT makes the server close the connection, which node-redis treats as a dropped
// connection (it reconnects, failing the commands that were waiting for replies). node-redis
// has no public call that reconnects a client.
function quitConnection(client: NodeRedisClientLike | undefined): void {
  if (client?.isOpen !== true) return
  const epoch = (client as { socketEpoch?: number }).socketEpoch
  if (epoch !== undefined && quitEpochs.get(client) === epoch) return
  quitEpochs.set(client, epoch)
  client.sendCommand(['QUIT']).catch(() => undefined)
}

// node-redis holds every command of an event-loop iteration and writes them as one (its own
// setImmediate): no sockets() to hold
class NodeRedisAdapter implements RedisAdapter, RedisNodeAdapter {
  readonly driver = 'node-redis'
  readonly cluster = false
  private readonly client: NodeRedisClientLike

  constructor(client: NodeRedisClientLike) {
    refusePrefix(this.driver, client)
    this.client = client
  }

  callEvalSha(sha: string, numKeys: number, keysAndArgs: readonly (string | number)[]): Promise<unknown> {
    if (!this.client.isOpen) return Promise.reject(notConnected(this.driver))
    return this.client.sendCommand(commandArgs('EVALSHA', sha, numKeys, keysAndArgs), RAW_COMMAND)
  }

  callEval(source: string, numKeys: number, keysAndArgs: readonly (string | number)[]): Promise<unknown> {
    if (!this.client.isOpen) return Promise.reject(notConnected(this.driver))
    return this.client.sendCommand(commandArgs('EVAL', source, numKeys, keysAndArgs), RAW_COMMAND)
  }

  scanNodes(): Promise<readonly RedisNodeAdapter[]> {
    return Promise.resolve([this])
  }

  scan(cursor: string, pattern: string, count: number): Promise<unknown> {
    if (!this.client.isOpen) return Promise.reject(notConnected(this.driver))
    return this.client.sendCommand(['SCAN', cursor, 'MATCH', pattern, 'COUNT', String(count)], RAW_COMMAND)
  }

  unlink(names: readonly string[]): Promise<unknown> {
    if (!this.client.isOpen) return Promise.reject(notConnected(this.driver))
    return this.client.sendCommand(['UNLINK', ...names])
  }

  reconnect(): void {
    quitConnection(this.client)
  }
}

/** The adapter of a node-redis client, `createClient()` of redis 5 or 6 (what {@link redisAdapter} makes for one). */
export function nodeRedisAdapter(client: NodeRedisClientLike): RedisAdapter {
  return new NodeRedisAdapter(client)
}

class NodeRedisClusterAdapter implements RedisAdapter {
  readonly driver = 'node-redis cluster'
  readonly cluster = true
  private readonly client: NodeRedisClusterLike

  constructor(client: NodeRedisClusterLike) {
    refusePrefix(this.driver, client)
    this.client = client
  }

  // the cluster routes by the first key (every key of a call shares its slot); a call with no key goes to any master
  callEvalSha(sha: string, numKeys: number, keysAndArgs: readonly (string | number)[]): Promise<unknown> {
    if (!this.client.isOpen) return Promise.reject(notConnected(this.driver))
    return this.client.sendCommand(firstKey(numKeys, keysAndArgs), false, commandArgs('EVALSHA', sha, numKeys, keysAndArgs), RAW_COMMAND)
  }

  callEval(source: string, numKeys: number, keysAndArgs: readonly (string | number)[]): Promise<unknown> {
    if (!this.client.isOpen) return Promise.reject(notConnected(this.driver))
    return this.client.sendCommand(firstKey(numKeys, keysAndArgs), false, commandArgs('EVAL', source, numKeys, keysAndArgs), RAW_COMMAND)
  }

  masterOf(slot: number): string | undefined {
    return this.client.slots[slot]?.master.address
  }

  async scanNodes(): Promise<readonly RedisNodeAdapter[]> {
    if (!this.client.isOpen) throw notConnected(this.driver)
    const nodes: RedisNodeAdapter[] = []
    for (const master of this.client.masters) nodes.push(new NodeRedisAdapter(await this.client.nodeClient(master)))
    return nodes
  }

  unlink(names: readonly string[]): Promise<unknown> {
    if (!this.client.isOpen) return Promise.reject(notConnected(this.driver))
    return this.client.sendCommand(names[0], false, ['UNLINK', ...names])
  }

  // which master's connection lost replies is not known here: every master's is renewed
  reconnect(): void {
    for (const master of this.client.masters) quitConnection(master.client)
  }
}

function firstKey(numKeys: number, keysAndArgs: readonly (string | number)[]): string | undefined {
  return numKeys > 0 ? String(keysAndArgs[0]) : undefined
}

/** The adapter of a node-redis cluster, `createCluster()` of redis 5 or 6 (what {@link redisAdapter} makes for one). */
export function nodeRedisClusterAdapter(client: NodeRedisClusterLike): RedisAdapter {
  return new NodeRedisClusterAdapter(client)
}
