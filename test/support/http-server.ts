/** Small helpers for tests that run a real HTTP server on a free loopback port. */
import { once } from 'node:events'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'

/** The server's base URL, once it listens. */
export async function listening(server: Server): Promise<string> {
  if (!server.listening) await once(server, 'listening')
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/** Closes the server and every connection it holds (keep-alive ones included). */
export function closeServer(server: Server): Promise<void> {
  server.closeAllConnections()
  return new Promise((resolve) => server.close(() => resolve()))
}
