/**
 * A real nginx in front of an app, asking the service's forward-auth route with auth_request.
 * The nginx config is examples/nginx-forward-auth.conf, the snippet docs/GATEWAY.md shows (checked
 * to be the same text), with only its addresses and token replaced. scripts/nginx.sh installs
 * nginx; each nginx here is a process of the test (`nginx -p <tmpdir> ... -g 'daemon off;'`) with
 * its pid file, logs and temp paths in a temp dir, on a free loopback port.
 *
 * Two clients are told apart by their source address (127.0.0.1 and 127.0.0.2, both loopback),
 * so nginx's `$remote_addr` differs as it would for two real clients, and the snippet runs
 * unchanged: no header nginx trusts has to be added for the test.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http, { type IncomingHttpHeaders } from 'node:http'
import net from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import {
  delay,
  deleteKeys,
  freePort,
  keysUnder,
  root,
  SHARED_REDIS_URL,
  startTestService,
  type TestService,
  uniquePrefix,
} from './server-helpers.js'

const SNIPPET = readFileSync(path.join(root, 'examples/nginx-forward-auth.conf'), 'utf8')
const TOKEN = `test-token-${process.pid}`

/** The app behind nginx: answers 200 and counts the requests (and bodies) that reach it. */
interface App {
  readonly port: number
  readonly bodies: string[]
  close(): Promise<void>
}

async function startApp(): Promise<App> {
  const bodies: string[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      bodies.push(Buffer.concat(chunks).toString('utf8'))
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.end('from the app')
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return {
    port: (server.address() as net.AddressInfo).port,
    bodies,
    async close() {
      server.closeAllConnections()
      server.close()
      await once(server, 'close')
    },
  }
}

interface NginxOptions {
  readonly servicePort: number
  readonly appPort: number
  readonly token: string
  /** Replaces lines of the snippet, each found exactly once (the X-Forwarded-For variant). */
  readonly edits?: ReadonlyArray<readonly [string, string]>
}

interface Nginx {
  readonly port: number
  stop(): Promise<void>
}

function replaceOnce(text: string, from: string, to: string): string {
  const at = text.indexOf(from)
  assert.ok(at >= 0 && text.indexOf(from, at + 1) < 0, `the snippet has ${JSON.stringify(from)} exactly once`)
  return text.slice(0, at) + to + text.slice(at + from.length)
}

async function startNginx(options: NginxOptions): Promise<Nginx> {
  const found = spawnSync('nginx', ['-v'], { encoding: 'utf8' })
  if (found.error !== undefined) throw new Error(`nginx is not installed: run 'bash scripts/nginx.sh' (apt-get install -y nginx)`)
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-nginx-'))
  // as root, nginx's workers run as nobody: they must reach the temp paths below
  chmodSync(dir, 0o755)
  const port = await freePort()
  let snippet = SNIPPET
  snippet = replaceOnce(snippet, 'listen 80;', `listen 127.0.0.1:${port};`)
  snippet = replaceOnce(snippet, 'server 127.0.0.1:8080;', `server 127.0.0.1:${options.servicePort};`)
  snippet = replaceOnce(snippet, 'server 127.0.0.1:3000;', `server 127.0.0.1:${options.appPort};`)
  snippet = replaceOnce(snippet, 'Bearer change-me-client-token', `Bearer ${options.token}`)
  for (const [from, to] of options.edits ?? []) snippet = replaceOnce(snippet, from, to)
  writeFileSync(path.join(dir, 'forward-auth.conf'), snippet)
  const conf = path.join(dir, 'nginx.conf')
  writeFileSync(
    conf,
    [
      'worker_processes 1;',
      `pid ${dir}/nginx.pid;`,
      `error_log ${dir}/error.log warn;`,
      'events { worker_connections 64; }',
      'http {',
      '    access_log off;',
      `    client_body_temp_path ${dir}/client_body;`,
      `    proxy_temp_path ${dir}/proxy;`,
      `    fastcgi_temp_path ${dir}/fastcgi;`,
      `    uwsgi_temp_path ${dir}/uwsgi;`,
      `    scgi_temp_path ${dir}/scgi;`,
      `    include ${dir}/forward-auth.conf;`,
      '}',
      '',
    ].join('\n'),
  )
  const child: ChildProcess = spawn('nginx', ['-p', `${dir}/`, '-c', conf, '-e', `${dir}/error.log`, '-g', 'daemon off;'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')))
  const exited = once(child, 'exit')
  const errorLog = () => {
    try {
      return readFileSync(path.join(dir, 'error.log'), 'utf8')
    } catch {
      return ''
    }
  }
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM') // fast shutdown: the master stops its worker and exits
      await exited
    }
    rmSync(dir, { recursive: true, force: true })
  }
  const deadline = Date.now() + 10_000
  for (;;) {
    if (child.exitCode !== null) {
      const log = errorLog()
      rmSync(dir, { recursive: true, force: true })
      throw new Error(`nginx exited with code ${child.exitCode}: ${stderr}${log}`)
    }
    if (await accepts(port)) return { port, stop }
    if (Date.now() > deadline) {
      const log = errorLog()
      await stop()
      throw new Error(`nginx did not listen on 127.0.0.1:${port}: ${stderr}${log}`)
    }
    await delay(20)
  }
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })
}

interface Reply {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly body: string
}

/** One request to nginx from `from` (a loopback address: the client nginx sees). */
function send(
  port: number,
  from: string,
  options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        path: '/page',
        method: options.method ?? 'GET',
        headers: options.headers,
        localAddress: from,
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('error', reject)
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }))
      },
    )
    req.on('error', reject)
    req.end(options.body)
  })
}

function portOf(service: TestService): number {
  return Number(new URL(service.url).port)
}

const POLICY = 'rate-limiter: { use-algo: sliding-window-algo, max-requests: 3, window-size: 60'

describe('nginx auth_request in front of the forward-auth route', { timeout: 120_000 }, () => {
  it('runs the snippet docs/GATEWAY.md shows', () => {
    const docs = readFileSync(path.join(root, 'docs/GATEWAY.md'), 'utf8')
    assert.ok(docs.includes('```nginx\n' + SNIPPET + '```\n'), 'docs/GATEWAY.md shows examples/nginx-forward-auth.conf verbatim')
  })

  const stores = [
    {
      name: 'the memory store, with a bearer token',
      prefix: undefined,
      store: 'store: { type: memory }',
      auth: `auth: { tokens: [${TOKEN}] }`,
    },
    { name: 'the shared Redis', prefix: uniquePrefix(), store: `store: { type: redis, url: "${SHARED_REDIS_URL}" }`, auth: '' },
  ]
  for (const run of stores) {
    describe(run.name, () => {
      let service: TestService
      let app: App
      let nginx: Nginx
      before(async () => {
        const prefix = run.prefix === undefined ? '' : `, key-prefix: "${run.prefix}"`
        service = await startTestService(`${POLICY}${prefix} }\n${run.store}\n${run.auth}\n`)
        app = await startApp()
        nginx = await startNginx({ servicePort: portOf(service), appPort: app.port, token: TOKEN })
      })
      after(async () => {
        await Promise.allSettled([nginx?.stop(), app?.close(), service?.close()])
        if (run.prefix !== undefined) {
          const redis = new Redis(SHARED_REDIS_URL)
          await deleteKeys(redis, run.prefix)
          redis.disconnect()
        }
      })

      it('passes the first 3 requests on to the app, with the RateLimit headers', async () => {
        for (const left of [2, 1, 0]) {
          const r = await send(nginx.port, '127.0.0.1')
          assert.equal(r.status, 200)
          assert.equal(r.body, 'from the app')
          assert.match(String(r.headers.ratelimit), new RegExp(`^"default";r=${left};t=\\d+$`))
          assert.equal(r.headers['ratelimit-policy'], '"default";q=3;w=60')
          assert.equal(r.headers['retry-after'], undefined)
        }
        assert.equal(app.bodies.length, 3)
      })

      it('answers the 4th with 429, Retry-After and the RateLimit headers; the app never sees it', async () => {
        const r = await send(nginx.port, '127.0.0.1')
        assert.equal(r.status, 429)
        const retryAfter = Number(r.headers['retry-after'])
        assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${r.headers['retry-after']}`)
        assert.match(String(r.headers.ratelimit), /^"default";r=0;t=\d+$/)
        assert.equal(r.headers['ratelimit-policy'], '"default";q=3;w=60')
        assert.equal(r.headers['content-type'], 'application/json')
        assert.equal((JSON.parse(r.body) as { error: string }).error, 'rate_limited')
        assert.equal(app.bodies.length, 3)
      })

      it('does not give a spoofed X-Forwarded-For or X-Real-IP a fresh limit', async () => {
        const r = await send(nginx.port, '127.0.0.1', { headers: { 'x-forwarded-for': '203.0.113.7', 'x-real-ip': '203.0.113.7' } })
        assert.equal(r.status, 429)
        assert.equal(app.bodies.length, 3)
      })

      it('limits another client address on its own', async () => {
        const r = await send(nginx.port, '127.0.0.2')
        assert.equal(r.status, 200)
        assert.match(String(r.headers.ratelimit), /^"default";r=2;t=\d+$/)
        assert.equal(app.bodies.length, 4)
      })

      it('keeps a POST body for the app (the auth sub-request goes without it)', async () => {
        const r = await send(nginx.port, '127.0.0.2', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: 'the body' })
        assert.equal(r.status, 200)
        assert.match(String(r.headers.ratelimit), /^"default";r=1;t=\d+$/)
        assert.deepEqual(app.bodies.slice(4), ['the body'])
      })

      if (run.prefix !== undefined) {
        const prefix = run.prefix
        it('keeps its counts in Redis, under its own key prefix', async () => {
          const redis = new Redis(SHARED_REDIS_URL)
          try {
            assert.deepEqual(await keysUnder(redis, prefix), [`${prefix}:127.0.0.1`, `${prefix}:127.0.0.2`])
          } finally {
            redis.disconnect()
          }
        })
      }
    })
  }

  describe('with key-header x-forwarded-for and $proxy_add_x_forwarded_for', () => {
    let service: TestService
    let app: App
    let nginx: Nginx
    before(async () => {
      service = await startTestService(`${POLICY} }\nstore: { type: memory }\nforward-auth: { key-header: x-forwarded-for }\n`)
      app = await startApp()
      nginx = await startNginx({
        servicePort: portOf(service),
        appPort: app.port,
        token: TOKEN,
        edits: [['proxy_set_header X-Real-IP $remote_addr;', 'proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;']],
      })
    })
    after(() => Promise.allSettled([nginx?.stop(), app?.close(), service?.close()]))

    it('keys on the entry nginx appended, whatever the client put before it', async () => {
      const statuses: number[] = []
      for (const spoofed of ['198.51.100.1', '198.51.100.2', '198.51.100.3, 198.51.100.4', '198.51.100.5']) {
        statuses.push((await send(nginx.port, '127.0.0.1', { headers: { 'x-forwarded-for': spoofed } })).status)
      }
      assert.deepEqual(statuses, [200, 200, 200, 429])
      assert.equal((await send(nginx.port, '127.0.0.2')).status, 200)
      assert.equal(app.bodies.length, 4)
    })
  })

  describe("when the service refuses nginx's token", () => {
    let service: TestService
    let app: App
    let nginx: Nginx
    before(async () => {
      service = await startTestService(`${POLICY} }\nstore: { type: memory }\nauth: { tokens: [${TOKEN}] }\n`)
      app = await startApp()
      nginx = await startNginx({ servicePort: portOf(service), appPort: app.port, token: 'not-the-service-token' })
    })
    after(() => Promise.allSettled([nginx?.stop(), app?.close(), service?.close()]))

    it('answers the client 500, not 401, and passes nothing to the app', async () => {
      const r = await send(nginx.port, '127.0.0.1')
      // auth_request copies the sub-request's WWW-Authenticate onto the answer; on a 500 no client acts on it
      assert.equal(r.status, 500)
      assert.equal(app.bodies.length, 0)
    })
  })
})
