/**
 * memcached for the integration tests: the shared one on 127.0.0.1:11211 (started by
 * scripts/memcached.sh; tests use key prefixes of their own and never flush it), and private
 * servers on free loopback ports that a fault test may kill and restart.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { freePort } from '../../src/testing/tcp-proxy.js'

/** The shared server (override with RL_TEST_MEMCACHED). */
export const SHARED_MEMCACHED = process.env.RL_TEST_MEMCACHED ?? '127.0.0.1:11211'

/** Resolves with the server's version line, or rejects if nothing answers within `timeoutMs`. */
export function memcachedVersion(server: string, timeoutMs = 1000): Promise<string> {
  const [host, port] = server.split(':') as [string, string]
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), host)
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new Error(`memcached at ${server}: no answer within ${timeoutMs} ms`))
    }, timeoutMs)
    let text = ''
    socket.on('connect', () => socket.write('version\r\n'))
    socket.on('data', (d: Buffer) => {
      text += d.toString()
      if (text.includes('\r\n')) {
        clearTimeout(timer)
        socket.destroy()
        resolve(text.trim())
      }
    })
    socket.on('error', (err) => {
      clearTimeout(timer)
      reject(err)
    })
  })
}

/** Fails with the command to run when the shared memcached does not answer. */
export async function requireSharedMemcached(): Promise<string> {
  try {
    await memcachedVersion(SHARED_MEMCACHED)
  } catch (err) {
    throw new Error(`memcached does not answer at ${SHARED_MEMCACHED}: run 'bash scripts/memcached.sh' (installs and starts it)`, {
      cause: err,
    })
  }
  return SHARED_MEMCACHED
}

/** A private memcached on a free loopback port. */
export interface PrivateMemcached {
  readonly port: number
  readonly server: string
  /** SIGKILLs the server: every item is gone. */
  kill(): Promise<void>
  /** Starts an empty server on the same port and waits until it answers. */
  start(): Promise<void>
}

/** Starts `memcached -l 127.0.0.1 -p <free port>` as a child process (stopped by `kill`). */
export async function startPrivateMemcached(): Promise<PrivateMemcached> {
  const port = await freePort()
  let child: ChildProcess | undefined
  const server: PrivateMemcached = {
    port,
    server: `127.0.0.1:${port}`,
    async kill() {
      const c = child
      child = undefined
      if (c === undefined || c.exitCode !== null) return
      const exited = once(c, 'exit')
      c.kill('SIGKILL')
      await exited
    },
    async start() {
      if (child !== undefined) return
      const args = ['-l', '127.0.0.1', '-p', String(port), '-U', '0', '-m', '16', '-t', '1']
      if (process.getuid?.() === 0) args.push('-u', 'nobody')
      const c = spawn('memcached', args, { stdio: 'ignore' })
      child = c
      const failed = once(c, 'error').then(([err]) => {
        throw new Error(`could not start memcached (apt-get install -y memcached): ${(err as Error).message}`)
      })
      const ready = (async () => {
        for (let i = 0; i < 100; i++) {
          try {
            await memcachedVersion(server.server, 200)
            return
          } catch {
            await sleep(20)
          }
        }
        throw new Error(`memcached on port ${port} did not answer`)
      })()
      failed.catch(() => undefined) // an error after start is seen by the next call
      await Promise.race([ready, failed])
    },
  }
  await server.start()
  return server
}
