/**
 * A Redis Sentinel deployment of a test's own, on free loopback ports: a master, one replica and
 * three Sentinels (`redis-server FILE --sentinel`, no other package), their config files
 * generated in a temp dir, passwords on the data nodes and on the Sentinels. The master can be
 * killed (SIGKILL) after the replica was made to miss its latest writes, and the test waits for
 * the Sentinels to promote the replica. Every process is killed when the test process exits.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Redis } from 'ioredis'
import { freePort } from '../../src/testing/tcp-proxy.js'

const INSTALL_HINT = 'redis-server is needed (it runs the Sentinels too): apt-get install -y redis-server (or brew install redis)'

/** Timings of the Sentinels, small so that a failover takes seconds. */
export interface SentinelTimings {
  /** `sentinel down-after-milliseconds`: how long the master must be silent to be down. @default 1000 */
  readonly downAfterMs?: number
  /** `sentinel failover-timeout`: also the wait before a failed election is tried again (twice it). @default 3000 */
  readonly failoverTimeoutMs?: number
}

/** A master, a replica and three Sentinels. */
export interface SentinelSet {
  readonly masterName: string
  /** The data nodes' password (`requirepass`, `masterauth`). */
  readonly password: string
  /** The Sentinels' password (`requirepass`, `sentinel sentinel-pass`). */
  readonly sentinelPassword: string
  readonly sentinels: ReadonlyArray<{ host: string; port: number }>
  /** The first master's port, then the replica's. */
  readonly dataPorts: readonly [number, number]
  /** A client of the data node on `port` (password set, no retries); the caller disconnects it. */
  dataClient(port: number): Redis
  /** The master's port as the first Sentinel that answers names it. */
  masterPort(): Promise<number>
  /**
   * Makes the replica miss the master's writes from now on, as a lagging replica would: stops it
   * (SIGSTOP, shorter than down-after-milliseconds, so the Sentinels still see it) and has the
   * master drop its link (`CLIENT KILL TYPE replica`). {@link killMaster} resumes it.
   */
  detachReplica(): Promise<void>
  /** Kills the master (SIGKILL) and resumes a detached replica. Resolves with the time of the kill (epoch ms). */
  killMaster(): Promise<number>
  /** Stops the master (SIGSTOP): it keeps its connections open and answers nothing, as a hung host would. Resolves with the time (epoch ms). */
  freezeMaster(): Promise<number>
  /** Waits until a Sentinel names another master than `oldPort`; resolves with its port and when it was seen (epoch ms). */
  waitForNewMaster(oldPort: number, timeoutMs?: number): Promise<{ port: number; atMs: number }>
  /** Kills every process and removes the files. */
  stop(): Promise<void>
}

const live = new Set<ChildProcess>()
process.once('exit', () => {
  for (const child of live) {
    child.kill('SIGCONT')
    child.kill('SIGKILL')
  }
})

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function waitFor(what: string, check: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(25)
  }
}

/** One command on a short-lived connection; rejects when the server does not answer within 500 ms. */
async function command(port: number, password: string, args: readonly string[]): Promise<unknown> {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    password,
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    connectTimeout: 500,
    commandTimeout: 500,
  })
  client.on('error', () => undefined)
  try {
    await client.connect()
    return await client.call(args[0] as string, ...args.slice(1))
  } finally {
    client.disconnect()
  }
}

/** Flat `[k1, v1, k2, v2, …]` replies of SENTINEL REPLICAS / SENTINELS, as objects. */
function records(reply: unknown): Array<Record<string, string>> {
  return (reply as string[][]).map((flat) => {
    const out: Record<string, string> = {}
    for (let i = 0; i + 1 < flat.length; i += 2) out[flat[i] as string] = flat[i + 1] as string
    return out
  })
}

function spawnServer(file: string, sentinel: boolean): ChildProcess {
  const child = spawn('redis-server', sentinel ? [file, '--sentinel'] : [file], { stdio: 'ignore' })
  live.add(child)
  child.once('exit', () => live.delete(child))
  child.once('error', () => live.delete(child))
  return child
}

async function killProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = once(child, 'exit')
  child.kill('SIGCONT')
  child.kill('SIGKILL')
  await exited
}

/** Starts a master, a replica and three Sentinels on free loopback ports, and waits until a failover could run. */
export async function startSentinelSet(timings: SentinelTimings = {}): Promise<SentinelSet> {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-sentinel-'))
  const masterName = 'mymaster'
  const password = `data-${randomBytes(6).toString('hex')}`
  const sentinelPassword = `sentinel-${randomBytes(6).toString('hex')}`
  const [masterPort, replicaPort, ...sentinelPorts] = await Promise.all(Array.from({ length: 5 }, () => freePort()))
  const ports = { master: masterPort as number, replica: replicaPort as number }
  const children = new Map<number, ChildProcess>()

  const dataConfig = (port: number, replicaOf?: number) =>
    [
      `port ${port}`,
      'bind 127.0.0.1',
      'save ""',
      'appendonly no',
      `dir ${dir}`,
      `dbfilename dump-${port}.rdb`,
      `requirepass ${password}`,
      `masterauth ${password}`,
      // the first sync of an empty master, without a file on disk
      'repl-diskless-sync yes',
      'repl-diskless-sync-delay 0',
      ...(replicaOf !== undefined ? [`replicaof 127.0.0.1 ${replicaOf}`] : []),
    ].join('\n')
  // Sentinels are told of each other and of the replica up front (the lines a Sentinel writes
  // into its own file), so that no discovery round (hello messages every 2 s) is waited for.
  const ids = sentinelPorts.map(() => randomBytes(20).toString('hex'))
  const sentinelConfig = (index: number) =>
    [
      `port ${sentinelPorts[index]}`,
      'bind 127.0.0.1',
      `dir ${dir}`,
      `requirepass ${sentinelPassword}`,
      `sentinel myid ${ids[index]}`,
      `sentinel monitor ${masterName} 127.0.0.1 ${ports.master} 2`,
      `sentinel down-after-milliseconds ${masterName} ${timings.downAfterMs ?? 1000}`,
      `sentinel failover-timeout ${masterName} ${timings.failoverTimeoutMs ?? 3000}`,
      `sentinel parallel-syncs ${masterName} 1`,
      `sentinel auth-pass ${masterName} ${password}`,
      `sentinel sentinel-pass ${sentinelPassword}`,
      `sentinel known-replica ${masterName} 127.0.0.1 ${ports.replica}`,
      ...sentinelPorts.flatMap((port, other) =>
        other === index ? [] : [`sentinel known-sentinel ${masterName} 127.0.0.1 ${port} ${ids[other]}`],
      ),
    ].join('\n')

  const start = (port: number, text: string, sentinel: boolean) => {
    const file = path.join(dir, `${sentinel ? 'sentinel' : 'redis'}-${port}.conf`)
    writeFileSync(file, `${text}\n`)
    const child = spawnServer(file, sentinel)
    children.set(port, child)
    return child
  }

  const stop = async () => {
    await Promise.all([...children.values()].map((child) => killProcess(child)))
    rmSync(dir, { recursive: true, force: true })
  }

  const dataClient = (port: number) =>
    new Redis({ host: '127.0.0.1', port, password, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0 })
  const sentinelCommand = (port: number, ...args: string[]) => command(port, sentinelPassword, ['SENTINEL', ...args])

  try {
    let failed: Error | undefined
    for (const [port, text] of [
      [ports.master, dataConfig(ports.master)],
      [ports.replica, dataConfig(ports.replica, ports.master)],
    ] as const)
      start(port, text, false).once('error', (err) => (failed = new Error(`${INSTALL_HINT} (${err.message})`)))
    sentinelPorts.forEach((port, index) => start(port as number, sentinelConfig(index), true))
    const ready = async (check: () => Promise<boolean>) => {
      if (failed !== undefined) throw failed
      return check()
    }
    await waitFor(
      'the replica in sync',
      () => ready(async () => /master_link_status:up/.test(String(await command(ports.replica, password, ['INFO', 'replication'])))),
      10_000,
    )
    // every Sentinel sees the replica and the two other Sentinels, connected and up
    await waitFor(
      'three Sentinels agreeing on the master and its replica',
      () =>
        ready(async () => {
          for (const port of sentinelPorts) {
            const replicas = records(await sentinelCommand(port as number, 'REPLICAS', masterName))
            const others = records(await sentinelCommand(port as number, 'SENTINELS', masterName))
            const replicaOk = replicas.some(
              (r) => Number(r.port) === ports.replica && r.flags === 'slave' && r['master-link-status'] === 'ok',
            )
            if (!replicaOk || others.length !== 2 || others.some((s) => s.flags !== 'sentinel')) return false
            if (!String(await sentinelCommand(port as number, 'CKQUORUM', masterName)).startsWith('OK')) return false
          }
          return true
        }),
      15_000,
    )
  } catch (err) {
    await stop()
    throw err
  }

  const currentMaster = async () => {
    for (const port of sentinelPorts) {
      const reply = await sentinelCommand(port as number, 'GET-MASTER-ADDR-BY-NAME', masterName).catch(() => undefined)
      if (Array.isArray(reply)) return Number(reply[1])
    }
    throw new Error('no Sentinel answered')
  }
  let detached = false
  return {
    masterName,
    password,
    sentinelPassword,
    sentinels: sentinelPorts.map((port) => ({ host: '127.0.0.1', port: port as number })),
    dataPorts: [ports.master, ports.replica],
    dataClient,
    masterPort: currentMaster,
    async detachReplica() {
      const master = await currentMaster()
      const replica = master === ports.master ? ports.replica : ports.master
      children.get(replica)?.kill('SIGSTOP')
      detached = true
      await command(master, password, ['CLIENT', 'KILL', 'TYPE', 'replica'])
    },
    async killMaster() {
      const master = await currentMaster()
      const child = children.get(master)
      if (child === undefined) throw new Error(`no process on the master's port ${master}`)
      const killedAtMs = Date.now()
      await killProcess(child)
      if (detached) for (const [port, other] of children) if (port !== master) other.kill('SIGCONT')
      detached = false
      return killedAtMs
    },
    async freezeMaster() {
      const master = await currentMaster()
      const child = children.get(master)
      if (child === undefined) throw new Error(`no process on the master's port ${master}`)
      const frozenAtMs = Date.now()
      child.kill('SIGSTOP')
      return frozenAtMs
    },
    async waitForNewMaster(oldPort: number, timeoutMs = 20_000) {
      const deadline = Date.now() + timeoutMs
      for (;;) {
        for (const port of sentinelPorts) {
          const reply = await sentinelCommand(port as number, 'GET-MASTER-ADDR-BY-NAME', masterName).catch(() => undefined)
          if (Array.isArray(reply) && Number(reply[1]) !== oldPort) return { port: Number(reply[1]), atMs: Date.now() }
        }
        if (Date.now() > deadline) throw new Error(`no new master within ${timeoutMs} ms`)
        await sleep(10)
      }
    },
    stop,
  }
}
