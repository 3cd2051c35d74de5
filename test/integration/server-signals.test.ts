/**
 * The `ratelimiting` command as a child process: SIGHUP reloads, SIGTERM stops gracefully
 * (in-flight requests finish, unsynced counts reach the store, exit 0), and the exit codes of a
 * bad config, a taken port and a bad command line.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { check, delay, deleteKeys, freePort, root, SHARED_REDIS_URL, uniquePrefix, until } from './server-helpers.js'

const CLI = path.join(root, 'src/server/cli.ts')

interface Child {
  readonly process: ChildProcess
  readonly logs: Array<Record<string, unknown>>
  readonly stderr: string[]
  readonly exited: Promise<number | null>
  url(): Promise<string>
}

function run(args: string[], env: Record<string, string> = {}): Child {
  const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], {
    cwd: root,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const logs: Array<Record<string, unknown>> = []
  const stderr: string[] = []
  let buffered = ''
  child.stdout?.on('data', (d: Buffer) => {
    buffered += d.toString()
    const lines = buffered.split('\n')
    buffered = lines.pop() ?? ''
    for (const line of lines) if (line.trim() !== '') logs.push(JSON.parse(line) as Record<string, unknown>)
  })
  child.stderr?.on('data', (d: Buffer) => stderr.push(d.toString()))
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  return {
    process: child,
    logs,
    stderr,
    exited,
    async url() {
      await until(
        () => logs.some((l) => l.msg === 'ratelimiting service listening') || child.exitCode !== null,
        15_000,
        'the service to listen',
      )
      const line = logs.find((l) => l.msg === 'ratelimiting service listening')
      assert.ok(line, `the service did not start: ${JSON.stringify(logs)} ${stderr.join('')}`)
      return line.url as string
    },
  }
}

describe('ratelimiting serve as a process', { timeout: 60_000 }, () => {
  let dir: string
  const children: Child[] = []
  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'rl-cli-'))
  })
  after(() => {
    for (const c of children) if (c.process.exitCode === null) c.process.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  })

  function start(yaml: string, extra: string[] = []): { child: Child; file: string } {
    const file = path.join(dir, `config-${children.length}.yaml`)
    writeFileSync(file, yaml)
    const child = run(['serve', '--config', file, '--port', '0', '--no-watch', ...extra])
    children.push(child)
    return { child, file }
  }

  it('reloads on SIGHUP', async () => {
    const { child, file } = start('rate-limiter: { max-requests: 2 }\nstore: { type: memory }\n')
    const url = await child.url()
    assert.equal((await check(url, { userId: 'hup' })).body?.limit, 2)
    writeFileSync(file, 'rate-limiter: { max-requests: 9 }\nstore: { type: memory }\n')
    child.process.kill('SIGHUP')
    await until(async () => (await check(url, { userId: 'hup' })).body?.limit === 9, 5_000, 'the SIGHUP reload')
    child.process.kill('SIGTERM')
    assert.equal(await child.exited, 0)
  })

  it('on SIGTERM stops accepting, finishes the in-flight request, then exits 0', async () => {
    const { child } = start('rate-limiter: { max-requests: 5 }\nstore: { type: memory }\n')
    const { hostname, port } = new URL(await child.url())
    const body = JSON.stringify({ userId: 'in-flight' })
    // a request whose body is still on its way when the signal arrives
    const socket = connect(Number(port), hostname)
    let response = ''
    socket.on('data', (d) => {
      response += d.toString()
    })
    socket.on('error', () => undefined) // the server closes it after the answer
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
    socket.write(
      `POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`,
    )
    // let the server read the headers: a connection whose request has not arrived yet is idle and closed at once
    await delay(300)
    child.process.kill('SIGTERM')
    await until(() => child.logs.some((l) => l.msg === 'stop signal received'), 5_000, 'the stop signal')
    await assert.rejects(fetch(`http://${hostname}:${port}/healthz`), 'new connections are refused')
    assert.equal(child.process.exitCode, null, 'still running while a request is in flight')
    socket.write(body.slice(5))
    await until(() => response.includes('\r\n\r\n{'), 5_000, 'the in-flight answer')
    assert.match(response, /^HTTP\/1\.1 200 OK/)
    assert.match(response, /"allowed":true/)
    socket.destroy()
    assert.equal(await child.exited, 0)
  })

  it('flushes unsynced counts to the store on SIGTERM', async () => {
    const prefix = uniquePrefix()
    const redis = new Redis(SHARED_REDIS_URL)
    try {
      // a day between syncs: only the shutdown flush can bring the hits to Redis
      const { child } = start(
        `rate-limiter: { use-algo: sliding-window-counter-algo, max-requests: 100, window-size: 60, sync-rate: 86400, key-prefix: "${prefix}" }\nstore: { type: redis, url: "${SHARED_REDIS_URL}" }\n`,
      )
      const url = await child.url()
      for (let i = 0; i < 4; i++) assert.equal((await check(url, { userId: 'flush-me' })).status, 200)
      const windowStart = Math.floor(Date.now() / 60_000) * 60_000
      const reader = new RedisStrategy({
        client: redis,
        prefix: `${prefix}#counter`,
      })
      assert.equal((await reader.getWindow('flush-me', 'default', windowStart, 60_000)).count, 0, 'nothing synced before the signal')
      child.process.kill('SIGTERM')
      assert.equal(await child.exited, 0)
      assert.equal((await reader.getWindow('flush-me', 'default', windowStart, 60_000)).count, 4)
    } finally {
      await deleteKeys(redis, prefix)
      redis.disconnect()
    }
  })

  it('exits 3 on an invalid config, logging the file, line, key and reason', async () => {
    const { child, file } = start('rate-limiter:\n  use-algo: leaky-bucket\nstore: { type: memory }\n')
    assert.equal(await child.exited, 3)
    const fatal = child.logs.find((l) => l.msg === 'invalid config')
    assert.ok(fatal, JSON.stringify(child.logs))
    assert.equal(fatal.level, 60)
    assert.match(
      String((fatal.issues as string[])[0]),
      new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}:2:3: rate-limiter\\.use-algo: must be one of`),
    )
  })

  it('exits 4 when the port is taken', async () => {
    const blocker = createServer()
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', () => resolve()))
    const { port } = blocker.address() as { port: number }
    try {
      const file = path.join(dir, 'taken.yaml')
      writeFileSync(file, `server: { port: ${port} }\nstore: { type: memory }\n`)
      const child = run(['serve', '--config', file])
      children.push(child)
      assert.equal(await child.exited, 4)
      assert.match(JSON.stringify(child.logs), /EADDRINUSE/)
    } finally {
      blocker.close()
    }
  })

  it('exits 4 when PostgreSQL cannot be reached at start: its table is created then', async () => {
    const file = path.join(dir, 'postgres-down.yaml')
    writeFileSync(
      file,
      `server: { port: 0 }\nrate-limiter: { use-algo: sliding-window-counter-algo }\nstore: { type: postgres, url: "postgres://127.0.0.1:${await freePort()}/test" }\n`,
    )
    const child = run(['serve', '--config', file])
    children.push(child)
    assert.equal(await child.exited, 4)
    assert.match(JSON.stringify(child.logs), /ECONNREFUSED/)
  })

  it('exits 2 on a bad command line', async () => {
    const child = run(['serve', '--colour'])
    children.push(child)
    assert.equal(await child.exited, 2)
    assert.match(child.stderr.join(''), /Unknown option '--colour'/)
  })
})
