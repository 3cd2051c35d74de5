/**
 * Escrow namespaces on real Redis, under faults: four RateLimiting instances (each with its own
 * client, as processes have) hammer one key concurrently on a redis-server of the test's own.
 * Whatever happens, no hit is admitted while the fleet's admitted hits, by the engine's sliding
 * formula, already reach the limit: with no fault (and a closed window's stored total is then
 * what was counted), across a server killed and restarted empty, while replies are lost, and
 * with a process killed holding budget (the others only under-admit).
 */
import assert from 'node:assert/strict'
import { fork } from 'node:child_process'
import { once } from 'node:events'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { after, before, describe, it } from 'node:test'
import { Cluster, Redis } from 'ioredis'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import type { Limiter } from '../../src/core/limiter.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { startTcpProxy, type TcpProxy } from '../../src/testing/tcp-proxy.js'
import { type RedisServerHandle, startRedisCluster, startRedisServer } from '../support/redis-server.js'
import { tagSlot } from '../../src/strategies/redis/key-slot.js'

const SIZE_S = 2
const SIZE = SIZE_S * 1000
const LIMIT = 60
const here = path.dirname(fileURLToPath(import.meta.url))

let server: RedisServerHandle
before(async () => {
  server = await startRedisServer()
})
after(async () => {
  await server.stop()
})

// The real clock, with the first reading of each hit kept: the time its decision was taken at.
let reading = false
let firstRead = 0
const clock = () => {
  const now = Date.now()
  if (reading) {
    reading = false
    firstRead = now
  }
  return now
}

interface Fleet {
  readonly limiters: Limiter[]
  close(): Promise<void>
}

function startFleet(port: number | readonly number[], n: number, namespace: string, batchAcrossSlots = true): Fleet {
  const instances: RateLimiting[] = []
  const clients: Array<Redis | Cluster> = []
  const limiters: Limiter[] = []
  for (let i = 0; i < n; i++) {
    const client =
      typeof port === 'number'
        ? new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, enableOfflineQueue: false })
        : new Cluster(
            port.map((p) => ({ host: '127.0.0.1', port: p })),
            { redisOptions: { maxRetriesPerRequest: 1 } },
          )
    client.on('error', () => undefined)
    clients.push(client)
    const rl = RateLimiting.newInstance(`escrow-faults-${namespace}-${i}`)
    rl.new({
      namespace,
      windowSizes: [SIZE_S],
      syncRate: 0.1,
      storeTimeoutMs: 200,
      strategy: new RedisStrategy({ client, prefix: 'rlf', ...(typeof port === 'number' ? { batchAcrossSlots } : {}) }),
      escrow: true,
      onStoreError: 'deny',
      clock,
      onError: () => undefined,
    })
    instances.push(rl)
    limiters.push(rl.limiter({ namespace, limits: [{ limit: LIMIT, window: SIZE_S }], countDenied: false }))
  }
  return {
    limiters,
    async close() {
      for (const rl of instances) await rl.close().catch(() => undefined)
      for (const c of clients) c.disconnect()
    },
  }
}

/** Hits `key` from every limiter, `concurrency` loops each, until `untilMs`; the times of the admitted hits. */
async function hammer(limiters: readonly Limiter[], key: string, untilMs: number, admitted: number[], concurrency = 4): Promise<void> {
  const loop = async (limiter: Limiter) => {
    while (Date.now() < untilMs) {
      reading = true
      const pending = limiter.hit(key)
      const at = firstRead
      const d = await pending
      if (d.allowed) admitted.push(at)
      await new Promise((resolve) => setTimeout(resolve, Math.random() * 4))
    }
  }
  await Promise.all(limiters.flatMap((l) => Array.from({ length: concurrency }, () => loop(l))))
}

/** The worst fleet-wide sliding rate at an admitted hit (the hit included), by the engine's formula. */
function worstRate(admitted: readonly number[]): number {
  const times = [...admitted].sort((a, b) => a - b)
  let worst = 0
  for (let i = 0; i < times.length; i++) {
    const t = times[i] as number
    const start = Math.floor(t / SIZE) * SIZE
    let cur = 0
    let prev = 0
    for (let j = 0; j <= i; j++) {
      const u = times[j] as number
      if (u >= start) cur++
      else if (u >= start - SIZE) prev++
    }
    // hits admitted at the same ms after this one count too (they were decided at the same time)
    for (let j = i + 1; j < times.length && times[j] === t; j++) cur++
    worst = Math.max(worst, cur + prev * ((SIZE - (t - start)) / SIZE))
  }
  return worst
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('escrow on real Redis, four instances hammering one key', () => {
  it('never admits past the limit, and a closed window holds what was counted', async (t) => {
    const fleet = startFleet(server.port, 4, 'plain')
    const admitted: number[] = []
    try {
      await hammer(fleet.limiters, 'k', Date.now() + 3 * SIZE + 500, admitted)
    } finally {
      await fleet.close()
    }
    const worst = worstRate(admitted)
    t.diagnostic(`admitted ${admitted.length}, worst fleet rate ${worst.toFixed(2)} of ${LIMIT}`)
    assert.ok(worst <= LIMIT, `worst fleet rate ${worst} > ${LIMIT}`)
    // most of the limit is used: the fleet under-admits by little
    assert.ok(admitted.length >= 2 * LIMIT, `admitted ${admitted.length}`)
    // closing syncs: the previous window's reservations went back to the hits counted there
    const prevStart = Math.floor(Date.now() / SIZE) * SIZE - SIZE
    const inPrev = admitted.filter((t) => t >= prevStart && t < prevStart + SIZE).length
    const admin = new Redis(server.port, '127.0.0.1')
    const stored = await admin.hget(`rlf:{plain:k}:${SIZE}:${prevStart}`, 't')
    admin.disconnect()
    assert.equal(Number(stored ?? 0), inPrev)
  })

  for (const [layout, batchAcrossSlots] of [
    ['one epoch key', true],
    ['an epoch key per slot', false],
  ] as const) {
    it(`admits nothing past the limit across a server killed and restarted empty (${layout})`, async (t) => {
      const fleet = startFleet(server.port, 4, `restart-${batchAcrossSlots}`, batchAcrossSlots)
      const admitted: number[] = []
      try {
        const run = hammer(fleet.limiters, 'k', Date.now() + 4 * SIZE, admitted)
        await sleep(SIZE + 700)
        await server.kill()
        await sleep(300)
        await server.start()
        await run
      } finally {
        await fleet.close()
      }
      const worst = worstRate(admitted)
      t.diagnostic(`admitted ${admitted.length}, worst fleet rate ${worst.toFixed(2)} of ${LIMIT}`)
      assert.ok(worst <= LIMIT, `worst fleet rate ${worst} > ${LIMIT}`)
      assert.ok(admitted.length >= LIMIT, `admitted ${admitted.length}`)
    })
  }

  it('admits nothing past the limit on a Cluster whose master of the key is killed and restarted empty', async (t) => {
    const cluster = await startRedisCluster(3)
    const fleet = startFleet(cluster.ports, 4, 'cluster')
    const admitted: number[] = []
    try {
      const run = hammer(fleet.limiters, 'k', Date.now() + 5 * SIZE, admitted)
      await sleep(SIZE + 700)
      const probe = new Cluster(cluster.ports.map((port) => ({ host: '127.0.0.1', port })))
      await probe.ping()
      const address = probe.slots[tagSlot('cluster:k')]?.[0] as string
      probe.disconnect()
      const victim = cluster.nodes.find((node) => address.endsWith(`:${node.port}`)) as RedisServerHandle
      await victim.kill()
      await sleep(300)
      await victim.start()
      await run
    } finally {
      await fleet.close()
      await cluster.stop()
    }
    const worst = worstRate(admitted)
    t.diagnostic(`admitted ${admitted.length}, worst fleet rate ${worst.toFixed(2)} of ${LIMIT}`)
    assert.ok(worst <= LIMIT, `worst fleet rate ${worst} > ${LIMIT}`)
    assert.ok(admitted.length >= LIMIT, `admitted ${admitted.length}`)
  })

  it('admits nothing past the limit while replies are lost', async (t) => {
    const proxy: TcpProxy = await startTcpProxy(server.port)
    const fleet = startFleet(proxy.port, 4, 'lost')
    const admitted: number[] = []
    try {
      const run = hammer(fleet.limiters, 'k', Date.now() + 4 * SIZE, admitted)
      for (let i = 0; i < 3; i++) {
        await sleep(600)
        proxy.mode = 'swallow-replies'
        await sleep(250)
        proxy.mode = 'pass'
      }
      await run
    } finally {
      await fleet.close()
      await proxy.close()
    }
    const worst = worstRate(admitted)
    t.diagnostic(`admitted ${admitted.length}, worst fleet rate ${worst.toFixed(2)} of ${LIMIT}`)
    assert.ok(worst <= LIMIT, `worst fleet rate ${worst} > ${LIMIT}`)
    assert.ok(admitted.length >= LIMIT, `admitted ${admitted.length}`)
  })

  it('a process killed holding budget leaves the others under the limit', async (t) => {
    const namespace = 'killed'
    const child = fork(path.join(here, '../support/redis-escrow-worker.ts'), [], {
      execArgv: ['--import', 'tsx'],
      env: { ...process.env, RL_PORT: String(server.port), RL_NAMESPACE: namespace, RL_WINDOW: String(SIZE_S), RL_LIMIT: String(LIMIT) },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    })
    const fleet = startFleet(server.port, 3, namespace)
    const admitted: number[] = []
    try {
      // the worker takes a grant (its hits plus a share), reports its admitted hits, and is killed
      const [report] = (await once(child, 'message')) as [{ admitted: number[] }]
      child.kill('SIGKILL')
      await once(child, 'exit')
      admitted.push(...report.admitted)
      assert.ok(report.admitted.length > 0)
      await hammer(fleet.limiters, 'k', Date.now() + 2 * SIZE, admitted)
    } finally {
      child.kill('SIGKILL')
      await fleet.close()
    }
    const worst = worstRate(admitted)
    t.diagnostic(`admitted ${admitted.length}, worst fleet rate ${worst.toFixed(2)} of ${LIMIT}`)
    assert.ok(worst <= LIMIT, `worst fleet rate ${worst} > ${LIMIT}`)
  })
})
