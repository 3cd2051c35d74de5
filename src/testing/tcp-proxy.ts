/**
 * A loopback TCP proxy for fault injection in tests: sits between a client and a store and can
 * swallow the store's replies (the write lands, the reply is lost), drop everything, or cut
 * every connection.
 */
import { once } from 'node:events'
import net from 'node:net'

/** `pass`: forward both ways; `swallow-replies`: forward requests, drop replies; `blackhole`: drop both; `refuse`: close new connections. */
export type ProxyMode = 'pass' | 'swallow-replies' | 'blackhole' | 'refuse'

export interface TcpProxy {
  readonly port: number
  mode: ProxyMode
  /** Destroys every open connection (the client sees a reset); returns how many clients were cut. */
  cutConnections(): number
  close(): Promise<void>
}

/** Starts a proxy on a free loopback port in front of `targetHost:targetPort`. */
export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>()
  const clientSockets = new Set<net.Socket>()
  const proxy: TcpProxy = {
    port: 0,
    mode: 'pass',
    cutConnections() {
      const clients = clientSockets.size
      for (const s of sockets) s.destroy()
      sockets.clear()
      clientSockets.clear()
      return clients
    },
    async close() {
      proxy.cutConnections()
      server.close()
      await once(server, 'close')
    },
  }
  const server = net.createServer((client) => {
    if (proxy.mode === 'refuse') {
      client.destroy()
      return
    }
    const upstream = net.connect(targetPort, targetHost)
    sockets.add(client)
    sockets.add(upstream)
    clientSockets.add(client)
    const drop = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
      clientSockets.delete(client)
    }
    client.on('error', drop).on('close', drop)
    upstream.on('error', drop).on('close', drop)
    client.on('data', (chunk: Buffer) => {
      if (proxy.mode === 'pass' || proxy.mode === 'swallow-replies') upstream.write(chunk)
    })
    upstream.on('data', (chunk: Buffer) => {
      if (proxy.mode === 'pass') client.write(chunk)
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  if (address === null || typeof address === 'string') throw new Error('proxy has no port')
  Object.assign(proxy, { port: address.port })
  return proxy
}

/** A free TCP port on 127.0.0.1 (free when asked; bind it soon). */
export async function freePort(): Promise<number> {
  const server = net.createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  server.close()
  await once(server, 'close')
  if (address === null || typeof address === 'string') throw new Error('no port')
  return address.port
}
