/**
 * Helpers of the service's integration tests: a service in-process on port 0 with its config in
 * a temp file, the shared Redis with a unique key prefix per run, and a redis-server of our own
 * on a free port for fault injection.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { createLogger } from '../../src/server/logger.js'
import { type RunningService, type ServiceOptions, startService } from '../../src/server/service.js'
import { freePort } from '../../src/testing/tcp-proxy.js'
export { freePort }

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
export const SHARED_REDIS_URL = 'redis://127.0.0.1:6379'

/** A log sink the tests can read: one parsed JSON object per line. */
export function logSink(): {
  stream: Writable
  lines: Array<Record<string, unknown>>
} {
  const lines: Array<Record<string, unknown>> = []
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim() !== '') lines.push(JSON.parse(line) as Record<string, unknown>)
      done()
    },
  })
  return { stream, lines }
}

/** A service on port 0 with `yaml` as its config file. */
export interface TestService {
  readonly service: RunningService
  readonly url: string
  readonly file: string
  readonly logs: Array<Record<string, unknown>>
  /** Rewrites the config file. */
  write(yaml: string): void
  close(): Promise<void>
}

export async function startTestService(yaml: string, options: Partial<ServiceOptions> = {}): Promise<TestService> {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-service-'))
  const file = path.join(dir, 'ratelimiting.yaml')
  writeFileSync(file, yaml)
  const sink = logSink()
  let service: RunningService
  try {
    service = await startService({
      configPath: file,
      port: 0,
      watch: false,
      defaultMetrics: false,
      env: {},
      logger: createLogger('info', sink.stream),
      ...options,
    })
  } catch (err) {
    rmSync(dir, { recursive: true, force: true })
    throw err
  }
  return {
    service,
    url: service.url,
    file,
    logs: sink.lines,
    write: (text) => writeFileSync(file, text),
    async close() {
      try {
        await service.close()
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    },
  }
}

/** A JSON answer: status, headers and parsed body (undefined when empty). */
export interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly body: Record<string, unknown> | undefined
}

export async function call(url: string, init: RequestInit = {}): Promise<Answer> {
  const res = await fetch(url, init)
  const text = await res.text()
  return {
    status: res.status,
    headers: res.headers,
    body: text === '' ? undefined : (JSON.parse(text) as Record<string, unknown>),
  }
}

export function check(base: string, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  return call(`${base}/v1/check`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  })
}

/** A key prefix no other run uses. */
export function uniquePrefix(): string {
  return `test:rl-server:${randomUUID().slice(0, 8)}`
}

/** Deletes every key under `prefix` (never anything else). */
export async function deleteKeys(redis: Redis, prefix: string): Promise<void> {
  let cursor = '0'
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
    cursor = next
    if (keys.length > 0) await redis.del(...keys)
  } while (cursor !== '0')
}

/** Every key under `prefix`. */
export async function keysUnder(redis: Redis, prefix: string): Promise<string[]> {
  const found: string[] = []
  let cursor = '0'
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000)
    cursor = next
    found.push(...keys)
  } while (cursor !== '0')
  return found.sort()
}

/** A redis-server of our own, for outages and hangs; never the shared one. */
export interface OwnRedis {
  readonly port: number
  readonly url: string
  /** Kills the server (SIGKILL) and waits for it to exit. */
  kill(): Promise<void>
  /** Starts it again on the same port. */
  start(): Promise<void>
  /** SIGSTOP: the server keeps its connections but answers nothing. */
  freeze(): void
  /** SIGCONT. */
  thaw(): void
}

export async function startOwnRedis(): Promise<OwnRedis> {
  const port = await freePort()
  let child: ChildProcess | undefined
  const start = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' })
    const deadline = Date.now() + 5000
    for (;;) {
      const probe = new Redis({
        port,
        host: '127.0.0.1',
        lazyConnect: true,
        retryStrategy: () => null,
        maxRetriesPerRequest: 0,
      })
      probe.on('error', () => undefined)
      try {
        await probe.connect()
        await probe.ping()
        probe.disconnect()
        return
      } catch {
        probe.disconnect()
        if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not start`)
        await new Promise((r) => setTimeout(r, 50))
      }
    }
  }
  await start()
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    async kill() {
      const c = child
      if (c === undefined || c.exitCode !== null || c.signalCode !== null) return
      const exited = new Promise((r) => c.once('exit', r))
      c.kill('SIGCONT')
      c.kill('SIGKILL')
      await exited
    },
    start,
    freeze: () => child?.kill('SIGSTOP'),
    thaw: () => child?.kill('SIGCONT'),
  }
}

/** Resolves after `ms`. Only for waiting on real servers (never in unit tests). */
export function delay(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}

/** Polls `probe` every 20 ms until it returns true, or fails after `timeoutMs`. */
export async function until(probe: () => boolean | Promise<boolean>, timeoutMs = 3000, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await delay(20)
  }
}
