/**
 * The default key of our middleware, the client IP, through the real frameworks: a client that
 * rotates its IPv6 address inside its subnet stays one client (before: 20 of 20 requests passed
 * a limit of 5), an IPv4-mapped address is its IPv4 address, and `ipv6Subnet` is checked.
 */
import assert from 'node:assert/strict'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { after, describe, it } from 'node:test'
import express from 'express'
import Fastify from 'fastify'
import { Hono } from 'hono'
import { createExpressMiddleware, type ExpressMiddlewareOptions } from '../../src/adapters/express.js'
import { createFastifyHook, fastifyRateLimiting } from '../../src/adapters/fastify.js'
import { createHonoMiddleware, ipKey } from '../../src/adapters/hono.js'
import { ConfigError } from '../../src/index.js'

// one client's /64 (2001:db8:1:2::/64), written in varied forms
const ROTATING = Array.from({ length: 20 }, (_, i) =>
  i % 3 === 0 ? `2001:db8:1:2::${(i + 1).toString(16)}` : i % 3 === 1 ? `2001:DB8:1:2:0:0:0:${i + 1}` : `2001:db8:1:2:${i}::${i}`,
)

const closers: Array<() => Promise<void>> = []
after(async () => {
  for (const close of closers) await close()
})

/** An Express app behind a proxy on loopback: req.ip is X-Forwarded-For. Returns a function sending as `address`. */
async function expressApp(options: Omit<ExpressMiddlewareOptions, 'limit'> = {}): Promise<(address: string) => Promise<number>> {
  const mw = createExpressMiddleware({ limit: 5, windowMs: 60_000, ...options })
  const app = express()
  app.set('trust proxy', 'loopback')
  app.use(mw)
  app.get('/', (_req, res) => {
    res.send('ok')
  })
  const server = app.listen(0, '127.0.0.1')
  await once(server, 'listening')
  closers.push(async () => {
    server.closeAllConnections()
    server.close()
    await mw.close()
  })
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
  return async (address) => {
    const res = await fetch(url, { headers: { 'x-forwarded-for': address } })
    await res.arrayBuffer()
    return res.status
  }
}

async function allowedOf(send: (address: string) => Promise<number>, addresses: readonly string[]): Promise<number> {
  let allowed = 0
  for (const address of addresses) if ((await send(address)) === 200) allowed++
  return allowed
}

describe('the default key groups IPv6 clients by subnet', () => {
  it('Express: a client rotating addresses in its /64 gets the limit once; another /56 has its own', async () => {
    const send = await expressApp()
    assert.equal(await allowedOf(send, ROTATING), 5)
    assert.equal(await send('2001:db8:1:ff::1'), 429, 'the same /56')
    assert.equal(await send('2001:db8:1:100::1'), 200, 'the next /56')
    assert.equal(await allowedOf(send, ['192.0.2.1', '::ffff:192.0.2.1', '::ffff:c000:201', '192.0.2.1', '192.0.2.1', '192.0.2.1']), 5)
    assert.equal(await send('192.0.2.2'), 200, 'IPv4 addresses are each their own client')
  })

  it('Express: ipv6Subnet sets the prefix; false counts every address apart', async () => {
    const by64 = await expressApp({ ipv6Subnet: 64 })
    assert.equal(await allowedOf(by64, ROTATING), 5)
    assert.equal(await by64('2001:db8:1:3::1'), 200, 'another /64 of the same /56')
    const off = await expressApp({ ipv6Subnet: false })
    assert.equal(await allowedOf(off, ROTATING), 20)
  })

  it('Fastify plugin and hook: the same grouping, zone ids and IPv4-mapped addresses included', async () => {
    const app = Fastify()
    await app.register(fastifyRateLimiting, { limit: 5, windowMs: 60_000 })
    app.get('/', async () => 'ok')
    app.get('/by64', { onRequest: createFastifyHook({ limit: 1, windowMs: 60_000, ipv6Subnet: 64 }) }, async () => 'ok')
    const send = async (remoteAddress: string, url = '/') => (await app.inject({ url, remoteAddress })).statusCode
    closers.push(() => app.close())
    let allowed = 0
    for (const address of ROTATING) if ((await send(address)) === 200) allowed++
    assert.equal(allowed, 5)
    assert.equal(await send('fe80::1%eth0'), 200)
    assert.equal(await send('fe80::2:3%eth1'), 200, 'one link-local /56, whatever the zone')
    assert.equal(await send('::ffff:198.51.100.7'), 200)
    assert.equal(await send('198.51.100.7'), 200, 'counted with ::ffff:198.51.100.7')
    // the hook on /by64 counts apart from the plugin's limit: 1 per /64
    assert.equal(await send('2001:db8:7:1::1', '/by64'), 200)
    assert.equal(await send('2001:db8:7:1::2', '/by64'), 429)
    assert.equal(await send('2001:db8:7:2::1', '/by64'), 200, 'another /64')
  })

  it('Hono (no default key): ipKey groups the address a key function reads', async () => {
    const mw = createHonoMiddleware({ limit: 5, windowMs: 60_000, key: (c) => ipKey(c.req.header('x-forwarded-for') ?? 'unknown') })
    closers.push(() => mw.close())
    const app = new Hono()
    app.use('*', mw)
    app.get('/', (c) => c.text('ok'))
    let allowed = 0
    for (const address of ROTATING) if ((await app.request('/', { headers: { 'x-forwarded-for': address } })).status === 200) allowed++
    assert.equal(allowed, 5)
  })

  it('refuses an ipv6Subnet out of 32..128, and one next to a key of your own, naming it', () => {
    for (const ipv6Subnet of [31, 129, 56.5, '56', true, null])
      assert.throws(
        () => createExpressMiddleware({ limit: 1, ipv6Subnet: ipv6Subnet as number }),
        (err: unknown) =>
          err instanceof ConfigError &&
          err.message ===
            `createExpressMiddleware: ipv6Subnet must be a prefix length from 32 to 128 (bits of an IPv6 address), or false, got ${typeof ipv6Subnet === 'string' ? '"56"' : String(ipv6Subnet)}`,
        String(ipv6Subnet),
      )
    for (const ipv6Subnet of [32, 128, false] as const) void createFastifyHook({ limit: 1, ipv6Subnet }).close()
    assert.throws(
      () => createFastifyHook({ limit: 1, ipv6Subnet: 64, key: () => 'k' }),
      /createFastifyHook: ipv6Subnet groups the default key \(the client IP\) and is ignored with key; group the address in your key with ipKey\(address, 64\)/,
    )
    assert.throws(
      () => createHonoMiddleware({ limit: 1, ipv6Subnet: 48, key: () => 'k' }),
      /createHonoMiddleware: ipv6Subnet groups the default key/,
    )
  })
})
