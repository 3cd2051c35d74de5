/**
 * TLS: the HTTP listener over HTTPS (and mTLS), its certificate rotated on reload without
 * cutting open connections, and bad certificate files refused at start (exit 3, the file named)
 * and on reload (the running certificate stays). Certificates are made with openssl at set-up.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { copyFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { Agent, request } from 'node:https'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { connect, type TLSSocket } from 'node:tls'
import * as grpc from '@grpc/grpc-js'
import { runCli } from '../../src/server/cli-main.js'
import { ConfigFileError } from '../../src/server/config.js'
import { RedisStrategy } from '../../src/strategies/redis/redis-strategy.js'
import { makeTestCerts, type TestCerts } from '../support/certs.js'
import { type PrivatePostgres, startPrivatePostgres } from '../support/postgres-server.js'
import { rlsClient } from '../support/envoy-client.js'
import { check, freePort, startTestService, until } from './server-helpers.js'

interface TlsAnswer {
  readonly status: number
  readonly body: Record<string, unknown>
  /** The serial of the certificate the server presented. */
  readonly serial: string
}

/** POST /v1/check over HTTPS through `agent`. */
function httpsCheck(url: string, agent: Agent, userId: string): Promise<TlsAnswer> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ userId })
    const req = request(
      `${url}/v1/check`,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } },
      (res) => {
        const serial = (res.socket as TLSSocket).getPeerCertificate().serialNumber
        const chunks: Buffer[] = []
        res.on('data', (c: Buffer) => chunks.push(c))
        res.on('end', () =>
          resolve({
            status: res.statusCode ?? 0,
            body: JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>,
            serial,
          }),
        )
        res.on('error', reject)
      },
    )
    req.on('error', reject)
    req.end(body)
  })
}

const io = () => {
  const out: string[] = []
  return { out, io: { stdout: (t: string) => out.push(t), stderr: (t: string) => out.push(t), env: {}, onSignal: () => () => undefined } }
}

describe('HTTPS listener', { timeout: 60_000 }, () => {
  let certs: TestCerts
  let dir: string
  before(() => {
    certs = makeTestCerts()
    dir = mkdtempSync(path.join(tmpdir(), 'rl-tls-'))
  })
  after(() => {
    certs.remove()
    rmSync(dir, { recursive: true, force: true })
  })

  /** A config whose server.tls files are copies in their own directory (so a test may replace them). */
  function tlsYaml(files: { cert: string; key: string; ca?: string }, clientAuth = 'none'): string {
    return (
      `server:\n  tls:\n    cert: ${files.cert}\n    key: ${files.key}\n` +
      (files.ca !== undefined ? `    ca: ${files.ca}\n` : '') +
      `    client-auth: ${clientAuth}\n` +
      'rate-limiter: { use-algo: fixed-window-algo, max-requests: 1000, window-size: 60 }\nstore: { type: memory }\n'
    )
  }

  it('answers /v1/check to a client that trusts the CA; a client without the CA refuses the server', async () => {
    const t = await startTestService(tlsYaml({ cert: certs.server.cert, key: certs.server.key }))
    const agent = new Agent({ ca: certs.caPem })
    try {
      assert.match(t.url, /^https:\/\/127\.0\.0\.1:\d+$/)
      const answer = await httpsCheck(t.url, agent, 'alice')
      assert.equal(answer.status, 200)
      assert.equal(answer.body.allowed, true)
      assert.equal(answer.serial, certs.server.serial)
      await assert.rejects(httpsCheck(t.url, new Agent(), 'alice'), (err: NodeJS.ErrnoException) => {
        assert.match(String(err.code), /UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED|UNABLE_TO_GET_ISSUER/)
        return true
      })
      // a plain HTTP client gets no answer from the TLS port
      await assert.rejects(fetch(t.url.replace('https:', 'http:') + '/v1/check', { method: 'POST', body: '{"userId":"a"}' }))
    } finally {
      agent.destroy()
      await t.close()
    }
  })

  it('with client-auth: require, answers a client certificate of the CA and refuses none or another CA’s', async () => {
    const t = await startTestService(tlsYaml({ cert: certs.server.cert, key: certs.server.key, ca: certs.ca }, 'require'))
    const agents = [
      new Agent({ ca: certs.caPem, cert: certs.client.certPem, key: certs.client.keyPem }),
      new Agent({ ca: certs.caPem }),
      new Agent({ ca: certs.caPem, cert: certs.wrongClient.certPem, key: certs.wrongClient.keyPem }),
    ] as const
    try {
      assert.equal((await httpsCheck(t.url, agents[0], 'bob')).status, 200)
      await assert.rejects(httpsCheck(t.url, agents[1], 'bob'))
      await assert.rejects(httpsCheck(t.url, agents[2], 'bob'))
    } finally {
      for (const a of agents) a.destroy()
      await t.close()
    }
  })

  it('caps connections before the handshake: one past server.max-connections is closed', async () => {
    const t = await startTestService(
      tlsYaml({ cert: certs.server.cert, key: certs.server.key }).replace('server:\n', 'server:\n  max-connections: 1\n'),
    )
    const first = new Agent({ ca: certs.caPem, keepAlive: true, maxSockets: 1 })
    const second = new Agent({ ca: certs.caPem })
    try {
      assert.equal((await httpsCheck(t.url, first, 'carol')).status, 200)
      await assert.rejects(httpsCheck(t.url, second, 'carol'))
      assert.match(await (await fetchMetrics(t.url, first)).text(), /ratelimiting_connections_refused_total 1/)
    } finally {
      first.destroy()
      second.destroy()
      await t.close()
    }
  })

  it('rotates on reload under keep-alive traffic: new connections get the new certificate, no request fails', async () => {
    const live = { cert: path.join(dir, 'live.pem'), key: path.join(dir, 'live.key') }
    copyFileSync(certs.server.cert, live.cert)
    copyFileSync(certs.server.key, live.key)
    const t = await startTestService(tlsYaml(live))
    const keepAlive = new Agent({ ca: certs.caPem, keepAlive: true, maxSockets: 4 })
    let running = true
    const answers: TlsAnswer[] = []
    const errors: unknown[] = []
    const loops = Array.from({ length: 4 }, async (_, loop) => {
      let i = 0
      while (running)
        try {
          answers.push(await httpsCheck(t.url, keepAlive, `rot-${loop}-${i++ % 20}`))
        } catch (err) {
          errors.push(err)
        }
    })
    try {
      await until(() => answers.length > 50, 5000, 'traffic')
      copyFileSync(certs.server2.cert, live.cert)
      copyFileSync(certs.server2.key, live.key)
      assert.equal(await t.service.reload('SIGHUP'), true)
      const atSwitch = answers.length
      await until(() => answers.length > atSwitch + 50, 5000, 'traffic after the rotation')
      const fresh = new Agent({ ca: certs.caPem })
      try {
        assert.equal((await httpsCheck(t.url, fresh, 'new-connection')).serial, certs.server2.serial)
      } finally {
        fresh.destroy()
      }
      running = false
      await Promise.all(loops)
      assert.deepEqual(errors, [], 'no request failed during the rotation')
      assert.ok(answers.every((a) => a.status === 200))
      // the keep-alive connections opened before the rotation were not cut: they still show the old certificate
      assert.equal(answers.at(-1)?.serial, certs.server.serial)
    } finally {
      running = false
      await Promise.all(loops)
      keepAlive.destroy()
      await t.close()
    }
  })

  it('reloads when the certificate files change on disk', async () => {
    const live = { cert: path.join(dir, 'watched.pem'), key: path.join(dir, 'watched.key') }
    copyFileSync(certs.server.cert, live.cert)
    copyFileSync(certs.server.key, live.key)
    const t = await startTestService(tlsYaml(live), { watch: true, watchDebounceMs: 50 })
    const serial = async () => {
      const agent = new Agent({ ca: certs.caPem })
      try {
        return (await httpsCheck(t.url, agent, 'erin')).serial
      } finally {
        agent.destroy()
      }
    }
    try {
      assert.equal(await serial(), certs.server.serial)
      copyFileSync(certs.server2.cert, live.cert)
      copyFileSync(certs.server2.key, live.key)

      await until(async () => (await serial()) === certs.server2.serial, 5000, 'the new certificate served')
      assert.equal(t.service.lastReload()?.source, 'watch')
    } finally {
      await t.close()
    }
  })

  it('refuses a reload with a bad certificate file and keeps serving the running one', async () => {
    const live = { cert: path.join(dir, 'bad-live.pem'), key: path.join(dir, 'bad-live.key') }
    copyFileSync(certs.server.cert, live.cert)
    copyFileSync(certs.server.key, live.key)
    const t = await startTestService(tlsYaml(live))
    try {
      // a key that does not match the certificate
      copyFileSync(certs.server2.cert, live.cert)
      assert.equal(await t.service.reload(), false)
      assert.match(t.service.lastReload()?.error ?? '', /server\.tls\.key: .*bad-live\.key: does not match the certificate/)
      // an expired certificate
      copyFileSync(certs.expired.cert, live.cert)
      copyFileSync(certs.expired.key, live.key)
      assert.equal(await t.service.reload(), false)
      assert.match(t.service.lastReload()?.error ?? '', /server\.tls\.cert: .*bad-live\.pem: the certificate expired/)
      const agent = new Agent({ ca: certs.caPem })
      try {
        assert.equal((await httpsCheck(t.url, agent, 'dave')).serial, certs.server.serial)
      } finally {
        agent.destroy()
      }
    } finally {
      await t.close()
    }
  })

  it('bad files at start: exit 3 from check-config naming the file, ConfigFileError from the service', async () => {
    const cases: Array<[string, { cert: string; key: string; ca?: string }, RegExp]> = [
      ['missing', { cert: path.join(dir, 'nope.pem'), key: certs.server.key }, /server\.tls\.cert: .*nope\.pem: file not found/],
      [
        'mismatched key',
        { cert: certs.server.cert, key: certs.server2.key },
        /server\.tls\.key: .*server2\.key: does not match the certificate/,
      ],
      ['expired', { cert: certs.expired.cert, key: certs.expired.key }, /server\.tls\.cert: .*expired\.pem: the certificate expired/],
      ['not PEM', { cert: certs.server.key, key: certs.server.key }, /server\.tls\.cert: .*server\.key: not a PEM certificate/],
    ]
    for (const [name, files, pattern] of cases) {
      const file = path.join(dir, `start-${name.replace(/ /g, '-')}.yaml`)
      writeFileSync(file, tlsYaml(files))
      const { out, io: cliIo } = io()
      assert.equal(await runCli(['check-config', file], cliIo), 3, name)
      assert.match(out.join(''), pattern, name)
      await assert.rejects(startTestService(tlsYaml(files)), (err: unknown) => err instanceof ConfigFileError && pattern.test(err.message))
    }
    // client-auth needs the CA
    const file = path.join(dir, 'start-no-ca.yaml')
    writeFileSync(file, tlsYaml({ cert: certs.server.cert, key: certs.server.key }, 'require'))
    const { out, io: cliIo } = io()
    assert.equal(await runCli(['check-config', file], cliIo), 3)
    assert.match(out.join(''), /server\.tls\.ca: is required with client-auth: require/)
  })
})

/** The serial of the certificate the gRPC listener on `port` presents to a new connection (ALPN h2). */
function grpcServerSerial(port: number, ca: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, ca, ALPNProtocols: ['h2'], servername: 'localhost' }, () => {
      assert.equal(socket.alpnProtocol, 'h2')
      resolve(socket.getPeerCertificate().serialNumber)
      socket.destroy()
    })
    socket.on('error', reject)
  })
}

const ENVOY_REQUEST = { domain: 'edge', descriptors: [{ entries: [{ key: 'remote_address', value: '10.0.0.1' }] }] }

describe('gRPC over TLS', { timeout: 60_000 }, () => {
  let certs: TestCerts
  let dir: string
  before(() => {
    certs = makeTestCerts()
    dir = mkdtempSync(path.join(tmpdir(), 'rl-grpc-tls-'))
    writeFileSync(
      path.join(dir, 'edge.yaml'),
      'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 1000 }\n',
    )
  })
  after(() => {
    certs.remove()
    rmSync(dir, { recursive: true, force: true })
  })

  function grpcYaml(files: { cert: string; key: string; ca?: string }, clientAuth = 'none'): string {
    return (
      `store: { type: memory }\nenvoy: { domains: ${path.join(dir, 'edge.yaml')} }\n` +
      `grpc:\n  port: 0\n  tls:\n    cert: ${files.cert}\n    key: ${files.key}\n` +
      (files.ca !== undefined ? `    ca: ${files.ca}\n` : '') +
      `    client-auth: ${clientAuth}\n`
    )
  }

  it('answers ShouldRateLimit over TLS; a client in clear gets no answer', async () => {
    const t = await startTestService(grpcYaml({ cert: certs.server.cert, key: certs.server.key }), { grpcPort: 0 })
    const port = t.service.grpc?.port as number
    const secure = rlsClient(port, grpc.credentials.createSsl(certs.caPem))
    const clear = rlsClient(port)
    try {
      const answer = await secure.call(ENVOY_REQUEST)
      assert.equal(answer.overall_code, 'OK')
      await assert.rejects(clear.call(ENVOY_REQUEST), (err: grpc.ServiceError) => err.code === grpc.status.UNAVAILABLE)
    } finally {
      secure.close()
      clear.close()
      await t.close()
    }
  })

  it('with client-auth: require, answers a client certificate of the CA and refuses none or another CA’s', async () => {
    const t = await startTestService(grpcYaml({ cert: certs.server.cert, key: certs.server.key, ca: certs.ca }, 'require'), { grpcPort: 0 })
    const port = t.service.grpc?.port as number
    const withCert = rlsClient(port, grpc.credentials.createSsl(certs.caPem, certs.client.keyPem, certs.client.certPem))
    const without = rlsClient(port, grpc.credentials.createSsl(certs.caPem))
    const wrongCa = rlsClient(port, grpc.credentials.createSsl(certs.caPem, certs.wrongClient.keyPem, certs.wrongClient.certPem))
    try {
      assert.equal((await withCert.call(ENVOY_REQUEST)).overall_code, 'OK')
      await assert.rejects(without.call(ENVOY_REQUEST), (err: grpc.ServiceError) => err.code === grpc.status.UNAVAILABLE)
      await assert.rejects(wrongCa.call(ENVOY_REQUEST), (err: grpc.ServiceError) => err.code === grpc.status.UNAVAILABLE)
    } finally {
      withCert.close()
      without.close()
      wrongCa.close()
      await t.close()
    }
  })

  it('rotates on reload: new connections get the new certificate, a connected client goes on, a bad file is refused', async () => {
    const live = { cert: path.join(dir, 'live.pem'), key: path.join(dir, 'live.key') }
    copyFileSync(certs.server.cert, live.cert)
    copyFileSync(certs.server.key, live.key)
    const t = await startTestService(grpcYaml(live), { grpcPort: 0 })
    const port = t.service.grpc?.port as number
    const client = rlsClient(port, grpc.credentials.createSsl(certs.caPem))
    let running = true
    let answered = 0
    const errors: unknown[] = []
    const loop = (async () => {
      while (running)
        try {
          await client.call(ENVOY_REQUEST)
          answered++
        } catch (err) {
          errors.push(err)
        }
    })()
    try {
      await until(() => answered > 20, 5000, 'gRPC traffic')
      assert.equal(await grpcServerSerial(port, certs.caPem), certs.server.serial)
      copyFileSync(certs.server2.cert, live.cert)
      copyFileSync(certs.server2.key, live.key)
      assert.equal(await t.service.reload('SIGHUP'), true)
      assert.equal(await grpcServerSerial(port, certs.caPem), certs.server2.serial)
      const atSwitch = answered
      await until(() => answered > atSwitch + 20, 5000, 'gRPC traffic after the rotation')
      // a key of another certificate: refused, the running one stays
      copyFileSync(certs.server.key, live.key)
      assert.equal(await t.service.reload(), false)
      assert.match(t.service.lastReload()?.error ?? '', /grpc\.tls\.key: .*live\.key: does not match the certificate/)
      assert.equal(await grpcServerSerial(port, certs.caPem), certs.server2.serial)
      running = false
      await loop
      assert.deepEqual(errors, [], 'no call failed during the rotation')
    } finally {
      running = false
      await loop
      client.close()
      await t.close()
    }
  })

  it('a missing grpc.tls file at start: exit 3 from check-config naming it', async () => {
    const file = path.join(dir, 'missing.yaml')
    writeFileSync(file, grpcYaml({ cert: certs.server.cert, key: path.join(dir, 'gone.key') }))
    const { out, io: cliIo } = io()
    assert.equal(await runCli(['check-config', file], cliIo), 3)
    assert.match(out.join(''), /grpc\.tls\.key: .*gone\.key: file not found/)
  })
})

describe('Redis store over TLS', { timeout: 60_000 }, () => {
  let certs: TestCerts
  let redis: ChildProcess
  let port: number
  before(async () => {
    certs = makeTestCerts()
    port = await freePort()
    // a redis-server of the test's own: TLS only, client certificates required
    // prettier-ignore
    redis = spawn('redis-server', [
      '--port', '0', '--tls-port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--tls-cert-file', certs.server.cert, '--tls-key-file', certs.server.key, '--tls-ca-cert-file', certs.ca,
      '--tls-auth-clients', 'yes',
    ], { stdio: 'ignore' })
    redis.on('error', () => undefined)
    await until(
      () =>
        new Promise<boolean>((resolve) => {
          const socket = connect({ host: '127.0.0.1', port, ca: certs.caPem, cert: certs.client.certPem, key: certs.client.keyPem }, () => {
            socket.destroy()
            resolve(true)
          })
          socket.on('error', () => resolve(false))
        }),
      10_000,
      'redis-server --tls-port (apt-get install -y redis-server)',
    )
  })
  after(() => {
    redis.kill('SIGKILL')
    certs.remove()
  })

  const yaml = (tls: string) =>
    `rate-limiter: { use-algo: fixed-window-algo, max-requests: 2, window-size: 60, key-prefix: "test:tls:${Date.now()}" }\n` +
    `store:\n  type: redis\n  url: rediss://127.0.0.1:${port}\n  timeout-ms: 1000\n${tls}`

  it('checks against a rediss:// server that requires a client certificate', async () => {
    const t = await startTestService(yaml(`  tls: { ca: ${certs.ca}, cert: ${certs.client.cert}, key: ${certs.client.key} }\n`))
    try {
      const answers = []
      for (let i = 0; i < 3; i++) answers.push(await check(t.url, { userId: 'frank' }))
      assert.deepEqual(
        answers.map((a) => a.status),
        [200, 200, 429],
      )
    } finally {
      await t.close()
    }
  })

  it('is refused without the client certificate: the store is down', async () => {
    const t = await startTestService(yaml(`  tls: { ca: ${certs.ca} }\n`))
    try {
      const answer = await check(t.url, { userId: 'frank' })
      assert.equal(answer.status, 503)
    } finally {
      await t.close()
    }
  })

  it('RedisStrategy passes its tls option to the client it makes from a rediss:// url', async () => {
    const probe = (strategy: RedisStrategy) =>
      strategy.pushDiffs({
        namespace: 'tls',
        nodeId: 'tls',
        seq: 0,
        nowMs: Date.now(),
        windows: [],
        refresh: [{ key: 'tls', windowStartMs: 0, windowSizeMs: 1 }],
      })
    const url = `rediss://127.0.0.1:${port}`
    const good = new RedisStrategy({
      url,
      prefix: 'test:tls',
      tls: { ca: certs.caPem, cert: certs.client.certPem, key: certs.client.keyPem },
    })
    const bad = new RedisStrategy({ url, prefix: 'test:tls', tls: { ca: certs.caPem } })
    try {
      await probe(good)
      await assert.rejects(probe(bad))
    } finally {
      await good.close()
      await bad.close().catch(() => undefined)
    }
  })

  it('a missing store.tls file at start is a ConfigFileError naming it; store.tls with redis:// is invalid', async () => {
    await assert.rejects(
      startTestService(yaml(`  tls: { ca: ${certs.ca}, cert: /nonexistent/client.pem, key: ${certs.client.key} }\n`)),
      (err: unknown) => err instanceof ConfigFileError && /\/nonexistent\/client\.pem: store\.tls\.cert: file not found/.test(err.message),
    )
    await assert.rejects(
      startTestService(yaml(`  tls: { ca: ${certs.ca} }\n`).replace('rediss://', 'redis://')),
      (err: unknown) => err instanceof ConfigFileError && /store\.tls: is for a TLS connection/.test(err.message),
    )
  })
})

describe('PostgreSQL store over TLS', { timeout: 60_000 }, () => {
  let certs: TestCerts
  let postgres: PrivatePostgres
  before(async () => {
    certs = makeTestCerts()
    postgres = await startPrivatePostgres({ cert: certs.server.cert, key: certs.server.key, ca: certs.ca })
  })
  after(async () => {
    await postgres.destroy()
    certs.remove()
  })

  const yaml = (url: string, tls: string) =>
    'rate-limiter: { use-algo: sliding-window-counter-algo, max-requests: 2, window-size: 60, sync-rate: 0 }\n' +
    `store:\n  type: postgres\n  url: ${url}\n  timeout-ms: 2000\n${tls}`

  it('checks against a server that requires a client certificate (sslmode verify-full by default)', async () => {
    const t = await startTestService(
      yaml(postgres.url, `  tls: { ca: ${certs.ca}, cert: ${certs.client.cert}, key: ${certs.client.key} }\n`),
    )
    try {
      const answers = []
      for (let i = 0; i < 3; i++) answers.push((await check(t.url, { userId: 'grace' })).status)
      assert.deepEqual(answers, [200, 200, 429])
    } finally {
      await t.close()
    }
  })

  it('is refused without the client certificate; sslmode=disable with store.tls and an unknown sslmode are invalid', async () => {
    await assert.rejects(startTestService(yaml(postgres.url, `  tls: { ca: ${certs.ca} }\n`)), /requires a valid client certificate/)
    await assert.rejects(
      startTestService(yaml(`${postgres.url}?sslmode=disable`, `  tls: { ca: ${certs.ca} }\n`)),
      (err: unknown) =>
        err instanceof ConfigFileError && /store\.tls: is for a TLS connection, but the url says sslmode=disable/.test(err.message),
    )
    await assert.rejects(
      startTestService(yaml(`${postgres.url}?sslmode=sometimes`, '')),
      (err: unknown) => err instanceof ConfigFileError && /store\.url: sslmode must be one of/.test(err.message),
    )
  })
})

function fetchMetrics(url: string, agent: Agent): Promise<{ text(): Promise<string> }> {
  return new Promise((resolve, reject) => {
    request(`${url}/metrics`, { agent }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ text: async () => Buffer.concat(chunks).toString('utf8') }))
      res.on('error', reject)
    })
      .on('error', reject)
      .end()
  })
}
