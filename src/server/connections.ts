import type { Server } from 'node:http'
import type { Socket } from 'node:net'
import { Server as TlsServer } from 'node:tls'
import type { ServerConfig } from './config.js'

/**
 * How often Node checks every connection against the header and request timeouts, ms. Node's
 * default (30 s) let a client that sends its headers a byte at a time hold a connection for up
 * to 30 s past the timeout; with this, at most this long past it.
 */
export const CONNECTIONS_CHECKING_INTERVAL_MS = 250

// A refused connection that does not close its side is destroyed after this long.
const REFUSED_LINGER_MS = 1000

/** Applies the `server` section's timeouts and keep-alive limits to `server` (at start and on reload). */
export function applyServerLimits(server: Server, config: ServerConfig): void {
  server.requestTimeout = config.requestTimeoutMs
  server.headersTimeout = config.headersTimeoutMs
  server.keepAliveTimeout = config.keepAliveTimeoutMs
  server.maxRequestsPerSocket = config.maxRequestsPerSocket
}

/** The open connections of a server, with a cap. */
export interface ConnectionGuard {
  /** Connections open now (refused ones not included). */
  open(): number
}

/**
 * Caps the connections `server` holds at `max()`: one more is answered `503` with a JSON error
 * and closed, before it can take a file descriptor for long, so a flood of idle connections
 * cannot starve the process of them (with TLS, it is closed before the handshake, without an
 * answer). Node's own `maxConnections` would close it without a word.
 */
export function guardConnections(server: Server, max: () => number, onRefused: () => void): ConnectionGuard {
  let open = 0
  // counted on the TCP connection, before any TLS handshake: a flood of handshakes is capped too
  const tls = server instanceof TlsServer
  // runs before the HTTP layer takes the socket (prepended), so a refused socket is never counted
  server.prependListener('connection', (socket: Socket) => {
    if (open >= max()) {
      onRefused()
      // an HTTP answer in clear would reach a TLS client as a handshake error anyway: just close
      if (tls) socket.destroy()
      else refuse(socket, max())
      return
    }
    open++
    socket.once('close', () => open--)
  })
  return { open: () => open }
}

function refuse(socket: Socket, max: number): void {
  const body = JSON.stringify({
    error: 'too_many_connections',
    message: `the service holds its maximum of ${max} open connections (server.max-connections); retry later`,
  })
  // ended at once: the HTTP layer still parses what the client sends, but the handler answers
  // nothing on a socket that is no longer writable
  socket.end(
    `HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  )
  socket.on('error', () => undefined)
  const linger = setTimeout(() => socket.destroy(), REFUSED_LINGER_MS)
  linger.unref()
  socket.once('close', () => clearTimeout(linger))
}
