/**
 * Redis servers of a test's own, on free loopback ports: started as child processes (no
 * persistence, so a restart loses the data as a crash would), killed and restarted on demand,
 * and always stopped when the test process exits. Never the shared servers on the default ports.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { once } from 'node:events'
import { mkdirSync, rmSync } from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { Cluster, Redis } from 'ioredis'
import { freePort } from '../../src/testing/tcp-proxy.js'

const run = promisify(execFile)
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const INSTALL_HINT = 'redis-server is needed: apt-get install -y redis-server (or brew install redis)'

/** One redis-server process of the test's own. */
export interface RedisServerHandle {
  readonly port: number
  readonly url: string
  /** Whether the process is running. */
  readonly running: boolean
  /** Kills the process (SIGKILL: no goodbye to clients, the data is lost). */
  kill(): Promise<void>
  /** Starts it again on the same port (empty, or with its cluster config for a cluster node). */
  start(): Promise<void>
  /** Kills it and removes its files. */
  stop(): Promise<void>
}

const live = new Set<ChildProcess>()
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL')
})

/** Sends one inline command over a raw socket; resolves with the raw reply, or undefined on error. */
export function rawCommand(port: number, command: string, timeoutMs = 500): Promise<string | undefined> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    let data = ''
    const done = (value: string | undefined) => {
      socket.destroy()
      resolve(value)
    }
    socket.setTimeout(timeoutMs, () => done(undefined))
    socket.on('error', () => done(undefined))
    socket.on('connect', () => socket.write(`${command}\r\n`))
    socket.on('data', (chunk) => {
      data += chunk.toString()
      // a simple reply ends with CRLF; a bulk reply ($n) is complete once n bytes follow
      const bulk = /^\$(\d+)\r\n/.exec(data)
      if (bulk === null ? data.endsWith('\r\n') : data.length >= bulk[0].length + Number(bulk[1]) + 2) done(data)
    })
  })
}

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
}

/** Starts a redis-server on a free port (or `port`); `cluster` makes it a cluster-enabled node. */
export async function startRedisServer(options: { port?: number; cluster?: boolean; dir?: string } = {}): Promise<RedisServerHandle> {
  const port = options.port ?? (await freePort())
  const dir = options.dir ?? path.join(repoRoot, '.tmp', 'redis-test', `${port}-${randomUUID().slice(0, 8)}`)
  mkdirSync(dir, { recursive: true })
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no']
  if (options.cluster === true)
    args.push('--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', '3000')
  let child: ChildProcess | undefined
  const handle: RedisServerHandle = {
    port,
    url: `redis://127.0.0.1:${port}`,
    get running() {
      return child !== undefined
    },
    async start() {
      if (child !== undefined) return
      const proc = spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'pipe'] })
      let failed: Error | undefined
      proc.on('error', (err) => {
        failed = new Error(`${INSTALL_HINT} (${err.message})`)
      })
      live.add(proc)
      child = proc
      proc.once('exit', () => {
        live.delete(proc)
        if (child === proc) child = undefined
      })
      await waitFor(
        `redis-server on port ${port}`,
        async () => {
          if (failed !== undefined) throw failed
          return (await rawCommand(port, 'PING')) === '+PONG\r\n'
        },
        5000,
      )
    },
    async kill() {
      const proc = child
      if (proc === undefined) return
      child = undefined
      const exited = once(proc, 'exit')
      proc.kill('SIGKILL')
      await exited
    },
    async stop() {
      await handle.kill()
      if (options.dir === undefined) rmSync(dir, { recursive: true, force: true })
    },
  }
  await handle.start()
  return handle
}

/** A Redis Cluster of the test's own: `masters` cluster-enabled servers joined with no replicas. */
export interface RedisClusterHandle {
  readonly nodes: readonly RedisServerHandle[]
  readonly ports: readonly number[]
  /** Waits until every running node reports cluster_state:ok. */
  waitOk(timeoutMs?: number): Promise<void>
  stop(): Promise<void>
}

/** Starts and joins a small cluster on free loopback ports (each node also uses port + 10000). */
export async function startRedisCluster(masters = 3): Promise<RedisClusterHandle> {
  const dir = path.join(repoRoot, '.tmp', 'redis-test', `cluster-${randomUUID().slice(0, 8)}`)
  const nodes: RedisServerHandle[] = []
  const cleanup = async () => {
    for (const node of nodes) await node.stop()
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    while (nodes.length < masters) {
      const port = await freePort()
      // the cluster bus listens on port + 10000: it must be free too
      if (port + 10000 > 65535 || !(await isFree(port + 10000))) continue
      nodes.push(await startRedisServer({ port, cluster: true, dir }))
    }
    const addresses = nodes.map((n) => `127.0.0.1:${n.port}`)
    await run('redis-cli', ['--cluster', 'create', ...addresses, '--cluster-replicas', '0', '--cluster-yes'], { timeout: 20_000 })
  } catch (err) {
    await cleanup()
    throw err
  }
  const handle: RedisClusterHandle = {
    nodes,
    ports: nodes.map((n) => n.port),
    async waitOk(timeoutMs = 15_000) {
      await waitFor(
        'cluster_state:ok',
        async () => {
          for (const node of nodes) {
            if (!node.running) continue
            const info = await rawCommand(node.port, 'CLUSTER INFO')
            if (info === undefined || !info.includes('cluster_state:ok')) return false
          }
          return true
        },
        timeoutMs,
      )
    },
    stop: cleanup,
  }
  try {
    await handle.waitOk()
  } catch (err) {
    await cleanup()
    throw err
  }
  return handle
}

async function isFree(port: number): Promise<boolean> {
  const server = net.createServer()
  try {
    server.listen(port, '127.0.0.1')
    await once(server, 'listening')
    server.close()
    await once(server, 'close')
    return true
  } catch {
    return false
  }
}

/** The shared test cluster of scripts/redis-cluster.sh; started by this call when it is down. */
export async function sharedClusterPorts(): Promise<number[]> {
  const ports = (process.env.RL_CLUSTER_PORTS ?? '7101 7102 7103').split(/\s+/).filter(Boolean).map(Number)
  const info = await rawCommand(ports[0] as number, 'CLUSTER INFO')
  if (info === undefined || !info.includes('cluster_state:ok')) {
    await run('bash', [path.join(repoRoot, 'scripts', 'redis-cluster.sh')], { timeout: 60_000 })
  }
  return ports
}

/** Fails with the install command when the shared Redis on 6379 is not answering. */
export async function sharedRedisUrl(): Promise<string> {
  const port = Number(process.env.RL_REDIS_PORT ?? 6379)
  if ((await rawCommand(port, 'PING')) !== '+PONG\r\n')
    throw new Error(`no Redis on 127.0.0.1:${port}: start it (service redis-server start) or install it (${INSTALL_HINT})`)
  return `redis://127.0.0.1:${port}`
}

/**
 * A test file's clean-up on the shared servers: deletes the keys under `prefix` on the shared
 * Redis at `url`, and on each master of every cluster client among `clients` (key by key: one
 * slot each), then disconnects the clients.
 */
export async function deleteTestKeys(url: string, prefix: string, clients: readonly (Redis | Cluster)[]): Promise<void> {
  const admin = new Redis(url)
  const names = await admin.keys(`${prefix}*`)
  if (names.length > 0) await admin.unlink(...names)
  admin.disconnect()
  for (const c of clients) {
    if (c instanceof Cluster)
      for (const node of c.nodes('master')) for (const name of await node.keys(`${prefix}*`)) await node.unlink(name)
    c.disconnect()
  }
}
