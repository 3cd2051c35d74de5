/**
 * Connections (docs/SERVICE.md, "Operating limits"): header and body timeouts that hold against
 * clients dribbling bytes (slowloris), the keep-alive limits, and a connection cap that answers
 * a clear 503 — over real sockets.
 */
import assert from 'node:assert/strict'
import { connect, type Socket } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { parseConfig } from '../../src/server/config.js'
import { startTestService, type TestService, until } from './server-helpers.js'

/** A raw connection: what the server sent, and when it closed (ms after opening). */
interface Raw {
  readonly socket: Socket
  readonly received: () => string
  readonly closed: Promise<number>
}

function open(base: string): Promise<Raw> {
  const { hostname, port } = new URL(base)
  return new Promise((resolve, reject) => {
    const started = Date.now()
    const socket = connect(Number(port), hostname)
    let out = ''
    socket.on('data', (d) => {
      out += d.toString()
    })
    const closed = new Promise<number>((done) => socket.once('close', () => done(Date.now() - started)))
    socket.once('error', () => undefined)
    socket.once('connect', () => resolve({ socket, received: () => out, closed }))
    socket.once('error', reject)
  })
}

/** Writes `chunks` one every `everyMs` until the socket closes; returns a stop function. */
function dribble(raw: Raw, chunks: () => string, everyMs: number): () => void {
  const timer = setInterval(() => {
    if (!raw.socket.destroyed && raw.socket.writable) raw.socket.write(chunks())
  }, everyMs)
  void raw.closed.then(() => clearInterval(timer))
  return () => clearInterval(timer)
}

const REQUEST = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'

/** GET `path` on a connection of its own, closed after the answer (no pooled connection stays). */
async function rawGet(base: string, path: string): Promise<string> {
  const raw = await open(base)
  raw.socket.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
  await raw.closed
  return raw.received()
}

describe('connection timeouts', { timeout: 60_000 }, () => {
  let t: TestService
  before(async () => {
    t = await startTestService(
      'server: { headers-timeout-ms: 500, request-timeout-ms: 1000, keep-alive-timeout-ms: 300 }\nstore: { type: memory }\n',
    )
  })
  after(() => t.close())

  it('closes a client that dribbles its headers (slowloris) soon after the header timeout', async () => {
    const raw = await open(t.url)
    raw.socket.write('GET /healthz HTTP/1.1\r\n')
    let n = 0
    dribble(raw, () => `X-Slow-${n++}: y\r\n`, 50)
    const ms = await raw.closed
    assert.match(raw.received(), /^HTTP\/1\.1 408 Request Timeout/)
    assert.ok(ms < 5_000, `held ${ms} ms with a 500 ms header timeout (Node checked every 30 s: 30 s)`)
  })

  it('closes a connection that never sends a byte', async () => {
    const raw = await open(t.url)
    const ms = await raw.closed
    assert.ok(ms < 5_000, `held ${ms} ms`)
  })

  it('closes a client that dribbles its body soon after the request timeout', async () => {
    const raw = await open(t.url)
    raw.socket.write('POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{')
    dribble(raw, () => ' ', 50)
    const ms = await raw.closed
    assert.match(raw.received(), /^HTTP\/1\.1 408 Request Timeout/)
    assert.ok(ms < 6_000, `held ${ms} ms with a 1000 ms request timeout`)
  })

  it('closes an idle keep-alive connection after keep-alive-timeout-ms', async () => {
    const raw = await open(t.url)
    raw.socket.write(REQUEST)
    const ms = await raw.closed
    assert.match(raw.received(), /^HTTP\/1\.1 200 OK/)
    // Node closes it within about a second of the keep-alive timeout (6 s with its default of 5 s)
    assert.ok(ms < 4_000, `held ${ms} ms with a 300 ms keep-alive timeout`)
  })
})

describe('connection limits', { timeout: 60_000 }, () => {
  // every connection here is a raw one of the test's own: no pooled fetch connection takes a slot
  let t: TestService
  before(async () => {
    t = await startTestService('server: { max-connections: 5, max-requests-per-socket: 2 }\nstore: { type: memory }\n')
  })
  after(() => t.close())

  it('answers connections over max-connections with a 503 JSON error and closes them', async () => {
    const held = await Promise.all(Array.from({ length: 5 }, () => open(t.url)))
    for (const raw of held) raw.socket.write(REQUEST)
    await until(() => held.every((r) => r.received().includes('200 OK')), 5_000, 'the five connections to be served')
    const extra = await open(t.url)
    extra.socket.write(REQUEST)
    await extra.closed
    const answer = extra.received()
    assert.match(answer, /^HTTP\/1\.1 503 Service Unavailable\r\n/)
    assert.match(answer, /\r\nretry-after: 1\r\n/)
    assert.equal(answer.split('HTTP/1.1').length, 2, 'one answer, and the request on it was not served')
    const body = JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: string; message: string }
    assert.equal(body.error, 'too_many_connections')
    assert.match(body.message, /maximum of 5 open connections \(server\.max-connections\)/)
    // a freed slot serves again
    held[0]?.socket.destroy()
    await held[0]?.closed
    await until(async () => (await rawGet(t.url, '/healthz')).startsWith('HTTP/1.1 200'), 5_000, 'a freed slot')
    const metrics = await rawGet(t.url, '/metrics')
    assert.match(metrics, /ratelimiting_connections_refused_total 1\n/)
    assert.match(metrics, /ratelimiting_open_connections 5\n/, 'four held and this one')
    for (const raw of held) raw.socket.destroy()
    await Promise.all(held.map((r) => r.closed))
  })

  it('closes a connection after max-requests-per-socket requests', async () => {
    const raw = await open(t.url)
    raw.socket.write(REQUEST + REQUEST + REQUEST)
    await until(() => raw.received().split('HTTP/1.1 ').length > 3, 5_000, 'three answers')
    raw.socket.destroy()
    const answers = raw.received().split('HTTP/1.1 ').slice(1)
    assert.match(answers[0] as string, /^200 OK[\s\S]*\r\nConnection: keep-alive\r\n/i)
    assert.match(answers[1] as string, /^200 OK[\s\S]*\r\nConnection: close\r\n/i, 'the second answer closes the connection')
    assert.match(answers[2] as string, /^503 /, 'a third request on it is not served')
  })
})

describe('connection settings', () => {
  it('defaults to a 5 s header timeout, 10 s request timeout, 5 s keep-alive and 10,000 connections', () => {
    const { server } = parseConfig('store: { type: memory }\n', 'rl.yaml')
    assert.deepEqual(
      [server.headersTimeoutMs, server.requestTimeoutMs, server.keepAliveTimeoutMs, server.maxRequestsPerSocket, server.maxConnections],
      [5_000, 10_000, 5_000, 0, 10_000],
    )
  })

  it('refuses a header timeout longer than the request timeout', () => {
    assert.throws(
      () => parseConfig('server: { headers-timeout-ms: 2000, request-timeout-ms: 1000 }\nstore: { type: memory }\n', 'rl.yaml'),
      /server\.headers-timeout-ms: must be at most server\.request-timeout-ms \(1000\), got 2000/,
    )
  })
})
