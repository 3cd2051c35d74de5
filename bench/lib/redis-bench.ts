/**
 * What the Redis benchmark needs besides its plan: the servers it starts for itself (one node, or
 * a 3-master Cluster), their counters (commands, CPU time, bytes) summed over the nodes, and the
 * check that a synchronous limiter admits exactly its limit under concurrency.
 */
import { Cluster, Redis } from 'ioredis'
import { startRedisCluster, startRedisServer } from '../../test/support/redis-server.js'

/** A server (or cluster) of the bench's own, with a client per node to read its counters. */
export interface BenchRedis {
  readonly topology: 'single node' | '3-master Cluster'
  /** A new client for a subject: one connection (one per master on the cluster). */
  client(): Redis | Cluster
  /** Counters summed over the nodes: see {@link readCounters}. */
  counters(): Promise<Record<string, number>>
  flush(): Promise<void>
  version(): Promise<string>
  stop(): Promise<void>
}

// Commands that only ever run inside the scripts of this bench (ours: HMGET, HSET, PEXPIREAT,
// EXISTS, GET, SET, ...; rate-limiter-flexible's: SET, INCRBY, PTTL, EXPIRE), and the bench's own.
const INSIDE_SCRIPTS = new Set(['hmget', 'hset', 'hget', 'pexpireat', 'exists', 'get', 'set', 'incrby', 'incrbyfloat', 'pttl', 'expire'])
const OWN = new Set(['info', 'config|resetstat', 'flushall', 'cluster|info', 'cluster|slots', 'cluster|nodes', 'cluster|shards', 'command'])

/**
 * One node's counters: `sent` (commands clients sent, each a round trip), `executed` (those run
 * by scripts too), `serverCpuUs` (user + system), `bytesIn`/`bytesOut` (what the node read and
 * wrote on its sockets).
 */
async function readCounters(admin: Redis): Promise<Record<string, number>> {
  const text = await admin.info('all')
  const number = (field: string) => Number(new RegExp(`^${field}:([\\d.]+)`, 'm').exec(text)?.[1] ?? 0)
  const out = {
    sent: 0,
    executed: 0,
    serverCpuUs: (number('used_cpu_user') + number('used_cpu_sys')) * 1e6,
    bytesIn: number('total_net_input_bytes'),
    bytesOut: number('total_net_output_bytes'),
  }
  for (const match of text.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    const command = match[1] as string
    const calls = Number(match[2])
    if (OWN.has(command)) continue
    out.executed += calls
    if (!INSIDE_SCRIPTS.has(command)) out.sent += calls
  }
  return out
}

function sum(parts: Record<string, number>[]): Record<string, number> {
  const out: Record<string, number> = {}
  for (const part of parts) for (const [k, v] of Object.entries(part)) out[k] = (out[k] ?? 0) + v
  return out
}

/** Starts a redis-server on a free loopback port. */
export async function singleNode(): Promise<BenchRedis> {
  const server = await startRedisServer()
  const admin = new Redis(server.url)
  return {
    topology: 'single node',
    client: () => new Redis(server.url),
    counters: () => readCounters(admin),
    flush: async () => void (await admin.flushall()),
    version: async () => /redis_version:(\S+)/.exec(await admin.info('server'))?.[1] ?? 'unknown',
    stop: async () => {
      admin.disconnect()
      await server.stop()
    },
  }
}

/** Starts a 3-master Redis Cluster (no replicas) on free loopback ports. */
export async function cluster(): Promise<BenchRedis> {
  const handle = await startRedisCluster(3)
  const admins = handle.ports.map((port) => new Redis({ port, host: '127.0.0.1' }))
  return {
    topology: '3-master Cluster',
    client: () => new Cluster(handle.ports.map((port) => ({ host: '127.0.0.1', port }))),
    counters: async () => sum(await Promise.all(admins.map(readCounters))),
    flush: async () => void (await Promise.all(admins.map((a) => a.flushall()))),
    version: async () => /redis_version:(\S+)/.exec(await (admins[0] as Redis).info('server'))?.[1] ?? 'unknown',
    stop: async () => {
      for (const a of admins) a.disconnect()
      await handle.stop()
    },
  }
}

/**
 * How many of `hits` concurrent hits of one key a decide function admits (a limit of `limit`,
 * a fresh key): exactly `limit` when the store orders them.
 */
export async function admittedUnderConcurrency(decide: (key: string) => Promise<boolean>, key: string, hits: number): Promise<number> {
  const results = await Promise.all(Array.from({ length: hits }, () => decide(key)))
  return results.filter(Boolean).length
}
