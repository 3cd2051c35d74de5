/**
 * The gRPC listener under attack, end to end on loopback: grpc.max-connections caps the
 * connections (one more gets GOAWAY and is closed, HTTP unaffected), grpc.idle-timeout-ms closes a
 * connection without a call (before the HTTP/2 preface, or after its last call), envoy.max-descriptors
 * refuses a request before it is decoded, and grpc.max-stream-resets closes a connection whose client
 * resets streams as fast as it opens them (HTTP/2 rapid reset). Real sockets, a real service.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the client is made from Envoy's .proto files at run time: its messages have no static types */
import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import http2 from 'node:http2'
import net from 'node:net'
import { networkInterfaces, tmpdir } from 'node:os'
import path from 'node:path'
import { describe, it } from 'node:test'
import * as grpc from '@grpc/grpc-js'
import { loadSync } from '@grpc/proto-loader'
import { rlsClient } from '../support/envoy-client.js'
import { root, startTestService, type TestService, until } from './server-helpers.js'

const DOMAIN = 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 1000000 }\n'
const METHOD_PATH = '/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit'

const definition = loadSync('envoy/service/ratelimit/v3/rls.proto', {
  includeDirs: [path.join(root, 'proto')],
  keepCase: true,
  enums: String,
  longs: Number,
  defaults: false,
})
const healthPkg = (
  grpc.loadPackageDefinition(
    loadSync('health/v1/health.proto', {
      includeDirs: [path.join(root, 'node_modules/grpc-health-check/proto')],
      keepCase: true,
      enums: String,
    }),
  ) as any
).grpc.health.v1
const encodeRequest = (definition['envoy.service.ratelimit.v3.RateLimitService'] as any).ShouldRateLimit.requestSerialize as (
  r: object,
) => Buffer

interface Gateway {
  readonly svc: TestService
  readonly grpcPort: number
  metric(name: string, labels?: string): Promise<number>
  close(): Promise<void>
}

/** A service with a `grpc` section of `grpcExtra` keys and `envoy` keys `envoyExtra`, on free ports. */
async function startGateway(grpcExtra: string, envoyExtra = '', host = '127.0.0.1'): Promise<Gateway> {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-grpc-limits-'))
  writeFileSync(path.join(dir, 'edge.yaml'), DOMAIN)
  const yaml = (grpcKeys: string, envoyKeys: string) =>
    `store: { type: memory }\ngrpc: { host: "${host}", port: 0${grpcKeys} }\nenvoy: { domains: ${path.join(dir, 'edge.yaml')}${envoyKeys} }\n`
  let svc: TestService
  try {
    svc = await startTestService(yaml(grpcExtra, envoyExtra), { grpcPort: 0 })
  } catch (err) {
    rmSync(dir, { recursive: true, force: true })
    throw err
  }
  return {
    svc,
    grpcPort: svc.service.grpc?.port as number,
    async metric(name, labels = '') {
      const text = await (await fetch(`${svc.url}/metrics`)).text()
      const head = labels === '' ? `${name} ` : `${name}{${labels}} `
      const line = text.split('\n').find((l) => l.startsWith(head))
      return line === undefined ? Number.NaN : Number(line.slice(head.length))
    },
    async close() {
      try {
        await svc.close()
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    },
  }
}

/** A raw TCP connection to the gRPC port and what the server sends on it. */
interface Raw {
  readonly socket: net.Socket
  readonly received: () => Buffer
  /** Resolves with ms since the connection opened when the server has closed it (the socket's 'close'), within `timeoutMs`; rejects past it. */
  closedWithin(timeoutMs: number): Promise<number>
}

async function rawConnect(port: number, host = '127.0.0.1'): Promise<Raw> {
  const socket = net.connect(port, host)
  const chunks: Buffer[] = []
  socket.on('data', (c: Buffer) => chunks.push(c))
  socket.on('error', () => undefined)
  const opened = Date.now()
  let closedAt: number | undefined
  socket.once('close', () => (closedAt = Date.now()))
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve())
    socket.once('error', reject)
  })
  return {
    socket,
    received: () => Buffer.concat(chunks),
    async closedWithin(timeoutMs) {
      await until(() => closedAt !== undefined, timeoutMs, 'the server to close the connection')
      return (closedAt as number) - opened
    },
  }
}

/** The HTTP/2 frames in `bytes`: type, flags, stream and payload. */
function framesOf(bytes: Buffer): Array<{ type: number; flags: number; stream: number; payload: Buffer }> {
  const out = []
  let at = 0
  while (at + 9 <= bytes.length) {
    const length = bytes.readUIntBE(at, 3)
    if (at + 9 + length > bytes.length) break
    out.push({
      type: bytes[at + 3] as number,
      flags: bytes[at + 4] as number,
      stream: bytes.readUInt32BE(at + 5) & 0x7fffffff,
      payload: bytes.subarray(at + 9, at + 9 + length),
    })
    at += 9 + length
  }
  return out
}

const GOAWAY = 7
function goawayOf(bytes: Buffer): { code: number; debug: string } | undefined {
  const f = framesOf(bytes).find((x) => x.type === GOAWAY)
  return f === undefined ? undefined : { code: f.payload.readUInt32BE(4), debug: f.payload.subarray(8).toString('utf8') }
}

function frame(type: number, flags: number, stream: number, payload: Buffer): Buffer {
  const out = Buffer.alloc(9 + payload.length)
  out.writeUIntBE(payload.length, 0, 3)
  out[3] = type
  out[4] = flags
  out.writeUInt32BE(stream, 5)
  payload.copy(out, 9)
  return out
}

const PREFACE = Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1'), frame(4, 0, 0, Buffer.alloc(0))])

/** An HPACK block of a ShouldRateLimit call: static-table indices and literals without indexing, no Huffman. */
function callHeaders(authority: string): Buffer {
  const literal = (s: string) => Buffer.concat([Buffer.from([s.length]), Buffer.from(s, 'latin1')])
  return Buffer.concat([
    Buffer.from([0x83, 0x86, 0x04]), // :method POST, :scheme http, :path (name 4) …
    literal(METHOD_PATH),
    Buffer.from([0x01]), // :authority
    literal(authority),
    Buffer.from([0x0f, 0x10]), // content-type (name 31)
    literal('application/grpc'),
    Buffer.from([0x00]),
    literal('te'),
    literal('trailers'),
  ])
}

/** One ShouldRateLimit call carrying `message` as it is (any bytes) on `session`: grpc-status and grpc-message. */
function rawCall(session: http2.ClientHttp2Session, message: Buffer): Promise<{ status: number; message: string }> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ':method': 'POST', ':path': METHOD_PATH, 'content-type': 'application/grpc', te: 'trailers' })
    let headers: http2.IncomingHttpHeaders = {}
    req.on('response', (h) => (headers = h))
    req.on('trailers', (t) => (headers = { ...headers, ...t }))
    req.on('data', () => undefined)
    req.on('error', reject)
    req.on('close', () =>
      resolve({ status: Number(headers['grpc-status']), message: decodeURIComponent(String(headers['grpc-message'] ?? '')) }),
    )
    const body = Buffer.alloc(5 + message.length)
    body.writeUInt32BE(message.length, 1)
    message.copy(body, 5)
    req.end(body)
  })
}

const descriptors = (n: number, prefix = 'd') =>
  Array.from({ length: n }, (_, i) => ({ entries: [{ key: 'remote_address', value: `${prefix}-${i}` }] }))

/** A RateLimitRequest of `n` descriptors whose own bytes are not a descriptor (a varint cut short): well formed at the top. */
function undecodableDescriptors(n: number): Buffer {
  const domain = Buffer.from([0x0a, 4, ...Buffer.from('edge')])
  const bad = Buffer.from([0x12, 1, 0xff]) // field 2, length 1: 0xff starts a varint that never ends
  return Buffer.concat([domain, ...Array.from({ length: n }, () => bad)])
}

describe('the gRPC listener under attack', () => {
  it(
    'grpc.max-connections: one over the cap gets GOAWAY naming it and is closed at once; HTTP is unaffected; a call succeeds once some close',
    { timeout: 30_000 },
    async () => {
      const gw = await startGateway(', max-connections: 50')
      const held: Raw[] = []
      try {
        for (let i = 0; i < 50; i++) held.push(await rawConnect(gw.grpcPort))
        await until(async () => (await gw.metric('ratelimiting_grpc_open_connections')) === 50, 5000, '50 open gRPC connections')
        const over = await rawConnect(gw.grpcPort)
        const closedAfterMs = await over.closedWithin(2000)
        assert.ok(closedAfterMs < 1000, `the refused connection closed after ${closedAfterMs} ms`)
        const goaway = goawayOf(over.received())
        assert.equal(goaway?.code, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM)
        assert.match(goaway?.debug ?? '', /maximum of 50 open gRPC connections \(grpc\.max-connections\)/)
        // the HTTP port is another matter
        assert.equal((await fetch(`${gw.svc.url}/healthz`)).status, 200)
        assert.equal(await gw.metric('ratelimiting_grpc_connections_refused_total'), 1)
        assert.equal(await gw.metric('ratelimiting_connections_refused_total'), 0, "HTTP's own counter")
        assert.equal(held.filter((r) => r.socket.destroyed).length, 0, 'the 50 held are still open')

        for (const r of held.splice(0, 10)) r.socket.destroy()
        await until(async () => (await gw.metric('ratelimiting_grpc_open_connections')) === 40, 5000, '40 open gRPC connections')
        const client = rlsClient(gw.grpcPort)
        try {
          const answer = await client.call({ domain: 'edge', descriptors: descriptors(1) })
          assert.equal(answer.overall_code, 'OK')
        } finally {
          client.close()
        }
      } finally {
        for (const r of held) r.socket.destroy()
        await gw.close()
      }
    },
  )

  it('a reload applies a changed grpc.max-connections to the running listener', { timeout: 30_000 }, async () => {
    const gw = await startGateway(', max-connections: 3')
    const held: Raw[] = []
    try {
      for (let i = 0; i < 3; i++) held.push(await rawConnect(gw.grpcPort))
      await until(async () => (await gw.metric('ratelimiting_grpc_open_connections')) === 3, 5000, '3 open gRPC connections')
      const refused = await rawConnect(gw.grpcPort)
      await refused.closedWithin(2000)
      gw.svc.write(readConfig(gw).replace('max-connections: 3', 'max-connections: 5'))
      assert.equal(await gw.svc.service.reload(), true)
      held.push(await rawConnect(gw.grpcPort))
      await until(async () => (await gw.metric('ratelimiting_grpc_open_connections')) === 4, 5000, 'a fourth connection held')
      assert.equal(gw.svc.logs.filter((l) => String(l.msg).includes('need a restart')).length, 0, 'no restart asked for')
    } finally {
      for (const r of held) r.socket.destroy()
      await gw.close()
    }
  })

  it(
    'grpc.idle-timeout-ms: a connection that sends nothing, and one idle after its last call, are closed; one with calls is not',
    { timeout: 30_000 },
    async () => {
      const gw = await startGateway(', idle-timeout-ms: 300')
      try {
        const silent = await rawConnect(gw.grpcPort)
        // a session that completes HTTP/2, makes one call, then makes none
        const session = http2.connect(`http://127.0.0.1:${gw.grpcPort}`)
        session.on('error', () => undefined)
        const sessionClosed = new Promise<number>((resolve) => session.once('close', () => resolve(Date.now())))
        const first = await rawCall(session, encodeRequest({ domain: 'edge', descriptors: descriptors(1) }))
        assert.equal(first.status, grpc.status.OK)
        const lastCallAt = Date.now()
        // a session that calls every 100 ms for 1.2 s: never idle for 300 ms
        const busy = http2.connect(`http://127.0.0.1:${gw.grpcPort}`)
        busy.on('error', () => undefined)
        for (let i = 0; i < 12; i++) {
          assert.equal((await rawCall(busy, encodeRequest({ domain: 'edge', descriptors: descriptors(1, 'busy') }))).status, grpc.status.OK)
          await new Promise((r) => setTimeout(r, 100))
        }
        assert.equal(busy.closed || busy.destroyed, false, 'the busy session is still open')
        busy.close()

        const silentMs = await silent.closedWithin(3000)
        assert.ok(silentMs >= 250 && silentMs < 300 + 1500, `the silent connection closed after ${silentMs} ms`)
        const idleMs =
          (await Promise.race([
            sessionClosed,
            new Promise<number>((_, reject) => setTimeout(() => reject(new Error('idle session still open')), 3000)),
          ])) - lastCallAt
        assert.ok(idleMs >= 250 && idleMs < 300 + 1500, `the idle session closed ${idleMs} ms after its call`)
        assert.ok((await gw.metric('ratelimiting_grpc_connections_closed_total', 'reason="idle"')) >= 2)
      } finally {
        await gw.close()
      }
    },
  )

  it(
    'envoy.max-descriptors refuses a request before decoding it, with the message of validate(); a reload moves it',
    { timeout: 60_000 },
    async () => {
      const gw = await startGateway('', ', max-descriptors: 8')
      const session = http2.connect(`http://127.0.0.1:${gw.grpcPort}`)
      session.on('error', () => undefined)
      try {
        const nine = await rawCall(session, encodeRequest({ domain: 'edge', descriptors: descriptors(9) }))
        assert.deepEqual(nine, {
          status: grpc.status.INVALID_ARGUMENT,
          message: 'at most 8 descriptors per request (envoy.max-descriptors), got 9',
        })
        // POST /json goes through validate(): the same words
        const json = await fetch(`${gw.svc.url}/json`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ domain: 'edge', descriptors: descriptors(9) }),
        })
        assert.equal(((await json.json()) as { message: string }).message, nine.message)
        const eight = await rawCall(session, encodeRequest({ domain: 'edge', descriptors: descriptors(8) }))
        assert.equal(eight.status, grpc.status.OK)

        // refused before decoding: nine descriptors no decoder could read are refused for their number
        assert.deepEqual(await rawCall(session, undecodableDescriptors(9)), {
          status: grpc.status.INVALID_ARGUMENT,
          message: 'at most 8 descriptors per request (envoy.max-descriptors), got 9',
        })
        // within the maximum they are decoded, and fail as before
        assert.deepEqual(await rawCall(session, undecodableDescriptors(8)), {
          status: grpc.status.INTERNAL,
          message: 'Error deserializing request',
        })
        // malformed at the top level (a descriptor's length past the end), after few or many descriptors: as before
        const cut = Buffer.from([0x12, 0x7f, 0x0a])
        assert.deepEqual(await rawCall(session, cut), { status: grpc.status.INTERNAL, message: 'Error deserializing request' })
        assert.deepEqual(await rawCall(session, Buffer.concat([encodeRequest({ domain: 'edge', descriptors: descriptors(20) }), cut])), {
          status: grpc.status.INTERNAL,
          message: 'Error deserializing request',
        })
        // a domain cut short by the end: protobufjs takes what is there, and so does the count
        const shortDomain = Buffer.concat([encodeRequest({ descriptors: descriptors(20) }), Buffer.from([0x0a, 0x7f, 0x65])])
        assert.deepEqual(await rawCall(session, shortDomain), {
          status: grpc.status.INVALID_ARGUMENT,
          message: 'at most 8 descriptors per request (envoy.max-descriptors), got 20',
        })

        // 140,000 descriptors in one 3.9 MB message: refused, and fast
        const big = encodeRequest({ domain: 'edge', descriptors: descriptors(140_000) })
        const started = Date.now()
        assert.deepEqual(await rawCall(session, big), {
          status: grpc.status.INVALID_ARGUMENT,
          message: 'at most 8 descriptors per request (envoy.max-descriptors), got 140000',
        })
        assert.ok(Date.now() - started < 5000)

        // the maximum in force is the reloaded one
        gw.svc.write(readConfig(gw).replace('max-descriptors: 8', 'max-descriptors: 16'))
        assert.equal(await gw.svc.service.reload(), true)
        assert.equal((await rawCall(session, encodeRequest({ domain: 'edge', descriptors: descriptors(9) }))).status, grpc.status.OK)
        assert.equal((await rawCall(session, undecodableDescriptors(9))).status, grpc.status.INTERNAL, 'decoded now')
      } finally {
        session.destroy()
        await gw.close()
      }
    },
  )

  it(
    'grpc.max-stream-resets (100 by default): a client resetting every stream it opens gets GOAWAY ENHANCE_YOUR_CALM and is closed; calls and a few cancels are not',
    { timeout: 30_000 },
    async () => {
      const gw = await startGateway('')
      const session = http2.connect(`http://127.0.0.1:${gw.grpcPort}`)
      session.on('error', () => undefined)
      try {
        // a client: 100 calls, 10 of them cancelled as soon as sent (a deadline, Envoy's timeout)
        const request = encodeRequest({ domain: 'edge', descriptors: descriptors(1, 'calls') })
        for (let i = 0; i < 100; i++) {
          if (i % 10 === 0) {
            const req = session.request({ ':method': 'POST', ':path': METHOD_PATH, 'content-type': 'application/grpc', te: 'trailers' })
            req.on('error', () => undefined)
            const body = Buffer.alloc(5 + request.length)
            body.writeUInt32BE(request.length, 1)
            request.copy(body, 5)
            req.end(body)
            await new Promise<void>((resolve) => {
              // the request sent, then reset
              setImmediate(() => {
                req.close(http2.constants.NGHTTP2_CANCEL)
                req.once('close', () => resolve())
              })
            })
          } else assert.equal((await rawCall(session, request)).status, grpc.status.OK)
        }
        assert.equal(session.closed || session.destroyed, false, 'the calling session is open')

        // the attack: 300 streams, each HEADERS then RST_STREAM at once, in one write (nghttp2's own
        // limit, a GOAWAY past 1,000 resets, leaves the connection open)
        const attacker = await rawConnect(gw.grpcPort)
        const headers = callHeaders(`127.0.0.1:${gw.grpcPort}`)
        const cancel = Buffer.alloc(4)
        cancel.writeUInt32BE(http2.constants.NGHTTP2_CANCEL)
        const pairs: Buffer[] = []
        for (let id = 1; id < 600; id += 2) pairs.push(frame(1, 0x4, id, headers), frame(3, 0, id, cancel))
        attacker.socket.write(Buffer.concat([PREFACE, ...pairs]))
        await attacker.closedWithin(3000)
        assert.equal(goawayOf(attacker.received())?.code, http2.constants.NGHTTP2_ENHANCE_YOUR_CALM)
        assert.equal(await gw.metric('ratelimiting_grpc_connections_closed_total', 'reason="resets"'), 1)

        assert.equal((await rawCall(session, request)).status, grpc.status.OK, 'the calling session still answers')
      } finally {
        session.destroy()
        await gw.close()
      }
    },
  )

  it('closes promptly with connections open that never sent a byte, and stops listening', { timeout: 30_000 }, async () => {
    const gw = await startGateway('')
    const silent = await rawConnect(gw.grpcPort)
    const client = rlsClient(gw.grpcPort)
    try {
      assert.equal((await client.call({ domain: 'edge', descriptors: descriptors(1) })).overall_code, 'OK')
      const started = Date.now()
      await gw.close()
      assert.ok(Date.now() - started < 3000, `closed in ${Date.now() - started} ms (shutdown-timeout-ms is 10 s)`)
      await silent.closedWithin(1000)
      await assert.rejects(rawConnect(gw.grpcPort), /ECONNREFUSED/)
    } finally {
      client.close()
      silent.socket.destroy()
    }
  })

  it('keeps grpc.max-concurrent-streams in the SETTINGS it sends, and grpc.health.v1', { timeout: 30_000 }, async () => {
    const gw = await startGateway(', max-concurrent-streams: 7')
    const raw = await rawConnect(gw.grpcPort)
    const health = new healthPkg.Health(`127.0.0.1:${gw.grpcPort}`, grpc.credentials.createInsecure())
    try {
      raw.socket.write(PREFACE)
      const SETTINGS_MAX_CONCURRENT_STREAMS = 3
      const advertised = () => {
        const settings = framesOf(raw.received()).find((f) => f.type === 4 && (f.flags & 1) === 0)
        for (let at = 0; settings !== undefined && at + 6 <= settings.payload.length; at += 6)
          if (settings.payload.readUInt16BE(at) === SETTINGS_MAX_CONCURRENT_STREAMS) return settings.payload.readUInt32BE(at + 2)
        return undefined
      }
      await until(() => advertised() !== undefined, 3000, "the server's SETTINGS")
      assert.equal(advertised(), 7)
      const status = await new Promise<any>((resolve, reject) =>
        health.Check({ service: 'envoy.service.ratelimit.v3.RateLimitService' }, (err: Error | null, r: any) =>
          err ? reject(err) : resolve(r),
        ),
      )
      assert.equal(status.status, 'SERVING')
    } finally {
      health.close()
      raw.socket.destroy()
      await gw.close()
    }
  })

  const ipv6 = Object.values(networkInterfaces()).some((list) => list?.some((a) => a.family === 'IPv6' && a.internal))
  it('listens on an IPv6 host', { skip: ipv6 ? false : 'no IPv6 loopback here', timeout: 30_000 }, async () => {
    const gw = await startGateway(', max-connections: 10', '', '::1')
    const session = http2.connect(`http://[::1]:${gw.grpcPort}`)
    session.on('error', () => undefined)
    try {
      assert.equal((await rawCall(session, encodeRequest({ domain: 'edge', descriptors: descriptors(1) }))).status, grpc.status.OK)
    } finally {
      session.destroy()
      await gw.close()
    }
  })
})

function readConfig(gw: Gateway): string {
  return readFileSync(gw.svc.file, 'utf8')
}
