import { lookup } from 'node:dns/promises'
import { constants as h2, type Http2Session, type ServerHttp2Stream } from 'node:http2'
import net from 'node:net'
import type { Server as TlsServer, TLSSocket } from 'node:tls'
import type * as Grpc from '@grpc/grpc-js'
import type { Logger } from 'pino'
import type { GrpcConfig } from '../config-gateway.js'
import { StoreStartError } from '../stores.js'
import type { GatewayMetrics } from './gateway-metrics.js'

// The gRPC listener's sockets: the service listens with node:net and hands each accepted
// connection to @grpc/grpc-js (Server#createConnectionInjector, grpc-js 1.11), so that
//  - grpc.max-connections is applied before grpc-js or node:http2 spend anything on a connection;
//  - a connection with no call in progress for grpc.idle-timeout-ms is closed, whether it never
//    sent the HTTP/2 preface, or sent no call since its last;
//  - a connection whose client resets more than grpc.max-stream-resets streams before they were
//    answered, and more than half of its streams, is closed (HTTP/2 rapid reset, CVE-2023-44487).
// nghttp2 has a rapid-reset limit of its own (a GOAWAY after about 1,000 resets), but node:http2
// keeps the connection open after it, and goes on reading what a client that ignores the GOAWAY
// sends. Here the connection is closed.

// A refused connection that does not close its side is destroyed after this long.
const REFUSED_LINGER_MS = 250
// A connection the service closes gracefully (idle, shutdown) is destroyed this long after its
// GOAWAY at the latest: a client that does not close its side holds no descriptor for long.
export const CLOSE_GRACE_MS = 1000
// Log lines about closed connections: at most one per this long, with the count of those left out.
const LOG_EVERY_MS = 1000

/** The `grpc` limits in force: read again at each connection, idle check and reset, so a reload applies. */
export type GrpcConnectionLimits = Pick<GrpcConfig, 'maxConnections' | 'idleTimeoutMs' | 'maxStreamResets'>

/** What {@link listenGrpc} needs. */
export interface GrpcConnectionsOptions {
  readonly host: string
  /** 0 picks a free port. */
  readonly port: number
  readonly limits: () => GrpcConnectionLimits
  /** The server the connections are handed to (its services added). */
  readonly server: Grpc.Server
  readonly credentials: Grpc.ServerCredentials
  /**
   * gRPC over TLS: each accepted connection is handed to this (unlistening) server, and its
   * decrypted socket to grpc-js once the handshake is done. Its secure context is the one in
   * force (`setSecureContext` on reload).
   */
  readonly tls?: TlsServer
  readonly metrics: GatewayMetrics
  readonly logger: Logger
}

/** The listening sockets and the connections they accepted. */
export interface GrpcConnections {
  /** The port listened on (the same on every address of the host). */
  readonly port: number
  /** Connections open now (refused ones not included). */
  open(): number
  /**
   * Stops accepting connections. Those without a call in progress are sent GOAWAY and closed
   * (destroyed {@link CLOSE_GRACE_MS} later at the latest), the others once their last call ends.
   */
  drain(): void
  /** Destroys every connection now. */
  destroyAll(): void
  /** Resolves once the listening sockets are closed and every connection is gone. */
  closed(): Promise<void>
}

interface Connection {
  readonly socket: net.Socket
  session: Http2Session | undefined
  /** Streams open now. */
  active: number
  /** Streams opened, and those the client reset before they were answered. */
  streams: number
  resets: number
  /** Since when (Date.now()) no stream has been open. */
  idleSince: number
  timer: NodeJS.Timeout | undefined
  /** GOAWAY sent or being torn down: nothing more is counted. */
  closing: boolean
  readonly onAborted: () => void
  readonly onStreamClose: () => void
}

/** SETTINGS (the server's connection preface) and GOAWAY with `code` and `debug` as its debug data. */
export function goawayFrames(code: number, debug: string): Buffer {
  const data = Buffer.from(debug, 'utf8')
  const out = Buffer.alloc(9 + 9 + 8 + data.length)
  out[3] = 0x4 // SETTINGS, empty, stream 0
  out.writeUIntBE(8 + data.length, 9, 3)
  out[12] = 0x7 // GOAWAY, stream 0
  out.writeUInt32BE(0, 18) // last stream id: none was processed
  out.writeUInt32BE(code, 22)
  data.copy(out, 26)
  return out
}

function refuse(socket: net.Socket, max: number): void {
  socket.on('error', () => undefined)
  // the client's preface is read and dropped, so its close is seen
  socket.resume()
  socket.end(
    goawayFrames(
      h2.NGHTTP2_ENHANCE_YOUR_CALM,
      `the service holds its maximum of ${max} open gRPC connections (grpc.max-connections); retry later`,
    ),
  )
  const linger = setTimeout(() => socket.destroy(), REFUSED_LINGER_MS)
  linger.unref()
  socket.once('close', () => clearTimeout(linger))
}

/** The addresses `host` names: itself when an IP address, else every address it resolves to, as grpc-js binds. */
async function addressesOf(host: string): Promise<string[]> {
  if (net.isIP(host) !== 0) return [host]
  return [...new Set((await lookup(host, { all: true })).map((a) => a.address))]
}

function listen(server: net.Server, port: number, address: string): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject)
    server.listen({ port, host: address }, () => {
      server.off('error', reject)
      resolve((server.address() as net.AddressInfo).port)
    })
  })
}

/**
 * Finds the node:http2 server behind a connection injector, to see its sessions: grpc-js keeps
 * its HTTP/2 servers in a private map (1.10 and later), the injector's added last. Undefined when
 * a grpc-js version keeps it elsewhere.
 */
function http2ServerOf(server: Grpc.Server, before: ReadonlySet<unknown>): NodeJS.EventEmitter | undefined {
  const servers = (server as unknown as { http2Servers?: unknown }).http2Servers
  if (!(servers instanceof Map)) return undefined
  for (const key of servers.keys())
    if (!before.has(key) && typeof (key as NodeJS.EventEmitter).on === 'function') return key as NodeJS.EventEmitter
  return undefined
}

/**
 * Listens on every address of `host` and hands each connection within `grpc.max-connections` to
 * `server`. Throws a StoreStartError when no address can be listened on.
 */
export async function listenGrpc(options: GrpcConnectionsOptions): Promise<GrpcConnections> {
  const { server, metrics, logger, limits } = options
  const address = `${options.host.includes(':') ? `[${options.host}]` : options.host}:${options.port}`
  const servers0 = (server as unknown as { http2Servers?: unknown }).http2Servers
  const before = new Set(servers0 instanceof Map ? servers0.keys() : [])
  const injector = server.createConnectionInjector(options.credentials)
  const http2Server = http2ServerOf(server, before)
  if (http2Server === undefined)
    logger.warn(
      'this @grpc/grpc-js keeps its HTTP/2 sessions out of reach: grpc.idle-timeout-ms and grpc.max-stream-resets are not applied (grpc.max-connections is)',
    )

  const connections = new Set<Connection>()
  let closing = false
  // the connection being handed to grpc-js: node:http2 makes its session synchronously
  let injecting: Connection | undefined
  let lastLog = 0
  let unlogged = 0
  let warnedUnseen = false
  const logClosed = (conn: Connection, reason: string) => {
    const now = Date.now()
    if (now - lastLog < LOG_EVERY_MS) {
      unlogged++
      return
    }
    lastLog = now
    logger.warn(
      { peer: `${conn.socket.remoteAddress}:${conn.socket.remotePort}`, streams: conn.streams, resets: conn.resets, suppressed: unlogged },
      reason,
    )
    unlogged = 0
  }

  // graceful: GOAWAY, the session ends once its streams have; destroyed CLOSE_GRACE_MS later at the latest
  const retire = (conn: Connection) => {
    if (conn.closing) return
    conn.closing = true
    clearTimeout(conn.timer)
    const session = conn.session
    if (session === undefined) conn.socket.end()
    else if (!session.destroyed && !session.closed) session.close()
    const grace = setTimeout(() => conn.socket.destroy(), CLOSE_GRACE_MS)
    grace.unref()
    conn.socket.once('close', () => clearTimeout(grace))
  }

  const tooManyResets = (conn: Connection) => {
    conn.closing = true
    clearTimeout(conn.timer)
    metrics.grpcConnectionClosed('resets')
    logClosed(conn, 'gRPC connection closed: its client reset too many streams (grpc.max-stream-resets)')
    // GOAWAY ENHANCE_YOUR_CALM, and the socket closed at once: what it still sends is not read.
    // (node:http2 sends the code only with an error, which goes to the server's 'sessionError'.)
    conn.session?.destroy(new Error('too many streams reset'), h2.NGHTTP2_ENHANCE_YOUR_CALM)
    setImmediate(() => conn.socket.destroy())
  }

  const onIdleCheck = (conn: Connection) => {
    if (conn.closing) return
    const idleMs = limits().idleTimeoutMs
    const idleFor = Date.now() - conn.idleSince
    if (conn.active === 0 && idleFor >= idleMs) {
      metrics.grpcConnectionClosed('idle')
      retire(conn)
      return
    }
    conn.timer = setTimeout(onIdleCheck, conn.active === 0 ? idleMs - idleFor : idleMs, conn)
    conn.timer.unref()
  }

  const onStream = (conn: Connection, stream: ServerHttp2Stream) => {
    conn.streams++
    if (stream.destroyed) {
      // reset in the same read as its HEADERS, before this event
      if (stream.aborted) conn.onAborted()
      return
    }
    conn.active++
    stream.on('aborted', conn.onAborted)
    stream.on('close', conn.onStreamClose)
  }

  http2Server?.on('session', (session: Http2Session) => {
    const conn = injecting
    if (conn === undefined) return
    conn.session = session
    session.on('stream', (stream: ServerHttp2Stream) => onStream(conn, stream))
  })

  // the connections in their TLS handshake, by their TCP socket
  const handshaking = new Map<net.Socket, Connection>()
  const inject = (conn: Connection, socket: net.Socket) => {
    injecting = conn
    try {
      injector.injectConnection(socket)
    } finally {
      injecting = undefined
    }
    if (http2Server !== undefined && conn.session === undefined && !socket.destroyed) {
      // its streams cannot be seen: never closed as idle (grpc.max-connections still counts it)
      clearTimeout(conn.timer)
      if (!warnedUnseen)
        logger.warn(
          'a gRPC connection got its HTTP/2 session out of sight: grpc.idle-timeout-ms and grpc.max-stream-resets do not apply to it',
        )
      warnedUnseen = true
    }
  }
  const tlsServer = options.tls
  tlsServer?.on('secureConnection', (secure: TLSSocket) => {
    // node:tls keeps the TCP socket it wrapped as _parent (Node 20; checked by the TLS tests)
    const raw = (secure as unknown as { _parent?: net.Socket })._parent
    const conn = raw === undefined ? undefined : handshaking.get(raw)
    if (conn === undefined || conn.closing || closing) {
      secure.destroy()
      return
    }
    handshaking.delete(conn.socket)
    secure.on('error', () => undefined)
    inject(conn, secure)
  })
  // a failed handshake (no client certificate, an unknown CA): node:tls destroys the socket

  const onConnection = (socket: net.Socket) => {
    if (closing) {
      socket.destroy()
      return
    }
    const max = limits().maxConnections
    if (connections.size >= max) {
      metrics.grpcConnectionRefused()
      refuse(socket, max)
      return
    }
    const conn: Connection = {
      socket,
      session: undefined,
      active: 0,
      streams: 0,
      resets: 0,
      idleSince: Date.now(),
      timer: undefined,
      closing: false,
      onAborted: () => {
        if (conn.closing) return
        conn.resets++
        if (conn.resets > limits().maxStreamResets && conn.resets * 2 > conn.streams) tooManyResets(conn)
      },
      onStreamClose: () => {
        if (--conn.active === 0) {
          conn.idleSince = Date.now()
          if (closing) retire(conn)
        }
      },
    }
    connections.add(conn)
    // a reset or a write after the session let go of the socket must not be an uncaught 'error'
    socket.on('error', () => undefined)
    socket.once('close', () => {
      connections.delete(conn)
      clearTimeout(conn.timer)
    })
    if (http2Server !== undefined) {
      conn.timer = setTimeout(onIdleCheck, limits().idleTimeoutMs, conn)
      conn.timer.unref()
    }
    if (tlsServer === undefined) {
      inject(conn, socket)
      return
    }
    // counted and timed from the TCP connection: a handshake that never ends is closed as idle
    handshaking.set(socket, conn)
    socket.once('close', () => handshaking.delete(socket))
    tlsServer.emit('connection', socket)
  }

  let addresses: string[]
  try {
    addresses = await addressesOf(options.host)
  } catch (err) {
    throw new StoreStartError(`the gRPC listener cannot listen on ${address}: ${(err as Error).message}`, { cause: err })
  }
  const listeners: net.Server[] = []
  let port = options.port
  let firstError: Error | undefined
  for (const a of addresses) {
    const listener = net.createServer({ noDelay: true }, onConnection)
    try {
      port = await listen(listener, port, a)
      listeners.push(listener)
    } catch (err) {
      firstError ??= err as Error
    }
  }
  if (listeners.length === 0) {
    injector.destroy()
    throw new StoreStartError(`the gRPC listener cannot listen on ${address}: ${firstError?.message ?? 'no address'}`, {
      cause: firstError,
    })
  }
  let lastAcceptError = 0
  for (const listener of listeners)
    listener.on('error', (err) => {
      // accept failures (EMFILE when the process is out of descriptors): logged, the listener goes on
      const now = Date.now()
      if (now - lastAcceptError < LOG_EVERY_MS) return
      lastAcceptError = now
      logger.error({ err }, 'the gRPC listener failed to accept a connection')
    })

  const stopped = Promise.all(listeners.map((l) => new Promise<void>((resolve) => l.once('close', () => resolve()))))
  return {
    port,
    open: () => connections.size,
    drain() {
      if (closing) return
      closing = true
      for (const listener of listeners) listener.close()
      for (const conn of connections) if (conn.active === 0) retire(conn)
    },
    destroyAll() {
      for (const conn of connections) conn.socket.destroy()
    },
    async closed() {
      await stopped
    },
  }
}
