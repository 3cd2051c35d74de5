/**
 * The processes the service benchmarks drive: `ratelimiting serve` on a config of their own and a
 * redis-server of their own (never the shared one: a benchmark that holds a million keys or reads
 * INFO commandstats must not see another job's), each on a free loopback port.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { freePort } from '../../src/testing/tcp-proxy.js'

/** The repository root. */
export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

async function waitFor(probe: () => Promise<boolean>, what: string, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await probe().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`${what} did not start within ${timeoutMs} ms`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

/** Resident memory of a process, MB (NaN off Linux). */
export function rssMb(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN
  try {
    const kb = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]
    return kb === undefined ? Number.NaN : Number(kb) / 1024
  } catch {
    return Number.NaN
  }
}

async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return
  const exited = new Promise((r) => child.once('exit', r))
  child.kill('SIGTERM')
  const killed = setTimeout(() => child.kill('SIGKILL'), 30_000)
  await exited
  clearTimeout(killed)
}

/** A service process. */
export interface ServiceProcess {
  readonly url: string
  readonly pid: number | undefined
  /** One value of a metric from /metrics (the first line matching `name` and `labels`), or NaN. */
  metric(name: string, labels?: string): Promise<number>
  stop(): Promise<void>
}

/**
 * Starts `ratelimiting serve` (dist/ when built, src/ through tsx otherwise) with `yaml` as its
 * config, logging warnings only.
 */
export async function startServiceProcess(yaml: string): Promise<ServiceProcess> {
  const port = await freePort()
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-bench-'))
  const file = path.join(dir, 'ratelimiting.yaml')
  writeFileSync(file, yaml)
  const built = path.join(root, 'dist/server/cli.js')
  const cli = existsSync(built) ? [built] : ['--import', 'tsx', path.join(root, 'src/server/cli.ts')]
  const child = spawn(process.execPath, [...cli, 'serve', '--config', file, '--no-watch', '--port', String(port), '--log-level', 'warn'], {
    cwd: root,
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const url = `http://127.0.0.1:${port}`
  try {
    await waitFor(async () => (await fetch(`${url}/healthz`)).ok, 'the service')
  } catch (err) {
    child.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
    throw err
  }
  return {
    url,
    pid: child.pid,
    async metric(name, labels = '') {
      const text = await (await fetch(`${url}/metrics`)).text()
      const head = labels === '' ? `${name} ` : `${name}{${labels}} `
      const line = text.split('\n').find((l) => l.startsWith(head))
      return line === undefined ? Number.NaN : Number(line.slice(head.length))
    },
    async stop() {
      await stopChild(child)
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** A redis-server of the benchmark's own. */
export interface RedisProcess {
  readonly url: string
  readonly port: number
  /** Calls per command from INFO commandstats (`evalsha`, `hincrbyfloat`, …). */
  commandCalls(): Promise<Map<string, number>>
  /** `used_memory` from INFO memory, MB. */
  usedMemoryMb(): Promise<number>
  stop(): Promise<void>
}

/** Starts redis-server on a free port, without persistence. */
export async function startRedisProcess(): Promise<RedisProcess> {
  const { Redis } = await import('ioredis')
  const port = await freePort()
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  })
  const admin = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => 100 })
  admin.on('error', () => undefined)
  await waitFor(async () => {
    if (admin.status !== 'ready') await admin.connect()
    return (await admin.ping()) === 'PONG'
  }, `redis-server on port ${port}`)
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async commandCalls() {
      const calls = new Map<string, number>()
      for (const m of (await admin.info('commandstats')).matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls.set(m[1] as string, Number(m[2]))
      return calls
    },
    async usedMemoryMb() {
      return Number(/^used_memory:(\d+)/m.exec(await admin.info('memory'))?.[1]) / 1e6
    },
    async stop() {
      admin.disconnect()
      await stopChild(child)
    },
  }
}
