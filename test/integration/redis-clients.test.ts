/**
 * Every Redis client the library takes (src/strategies/redis/client-adapter.ts), on real
 * servers: the strategy contract on the shared single node (127.0.0.1:6379) and on the shared
 * cluster (scripts/redis-cluster.sh) through iovalkey, node-redis 5 and node-redis 6 (ioredis
 * runs them in redis-strategy.test.ts); the fault suite through each of them on servers of the
 * test's own (ioredis: redis-faults.test.ts); then, through node-redis, the service's algorithms
 * (batched on a single node, per master on a cluster), the simple API, NOSCRIPT, lost replies,
 * and the errors that say what is wrong.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Cluster as ValkeyCluster, Redis as Valkey } from 'iovalkey'
import { createClient as createClient6, createCluster as createCluster6, RESP_TYPES } from 'redis'
import { createClient as createClient5, createCluster as createCluster5 } from 'redis-5'
import { RedisFixedWindow, RedisSlidingLog } from '../../src/algorithms/index.js'
import { createFakeClock } from '../../src/core/clock.js'
import { ConfigError, StoreError } from '../../src/core/errors.js'
import { RateLimiting } from '../../src/core/rate-limiting.js'
import { windowStartMs } from '../../src/core/window.js'
import { perMinute } from '../../src/simple/index.js'
import { keySlot } from '../../src/strategies/redis/key-slot.js'
import { RedisStrategy, redisAdapter, type SupportedRedisClient } from '../../src/strategies/redis/index.js'
import { evalScript, type LuaScript, luaScript, redisError } from '../../src/strategies/redis/scripts.js'
import { runFaultSuite } from '../../src/testing/fault-suite.js'
import { createFleet } from '../../src/testing/fleet.js'
import { runStrategyContract } from '../../src/testing/strategy-contract.js'
import { startTcpProxy } from '../../src/testing/tcp-proxy.js'
import {
  rawCommand,
  type RedisServerHandle,
  sharedClusterPorts,
  sharedRedisUrl,
  startRedisCluster,
  startRedisServer,
} from '../support/redis-server.js'

// Every key this file writes on the shared servers starts with this prefix, deleted at the end.
const runPrefix = `rltest-clients-${randomUUID().slice(0, 8)}`
const singleUrl = await sharedRedisUrl()
const clusterPorts = await sharedClusterPorts()
const rootNodes = clusterPorts.map((port) => ({ url: `redis://127.0.0.1:${port}` }))

/** A client of the test, and how to close it. */
interface Made {
  readonly client: SupportedRedisClient
  close(): Promise<void>
}

// what every client this file makes must do at the end, whatever failed
const closers: Array<() => Promise<void>> = []
after(async () => {
  for (const close of closers.reverse()) await close().catch(() => undefined)
})

function track(made: Made): Made {
  closers.push(() => made.close())
  return made
}

// node-redis emits 'error' on every dropped connection and throws without a listener; a short
// reconnect delay keeps the fault suite's restarts quick
const reconnectStrategy = (retries: number): number => Math.min(20 * (retries + 1), 200)

type CreateClient = typeof createClient6
type CreateCluster = typeof createCluster6

// node-redis 5 ignores a connection lost during its CLIENT SETINFO handshake and then stays
// "ready" on the dead socket, every command hanging (the fault suite's cut connections show it;
// node-redis 6 reconnects): docs/STORES-redis.md, "Clients", says to turn that handshake off
async function nodeRedis(create: CreateClient | typeof createClient5, url: string): Promise<Made> {
  const disableClientInfo = create === createClient5
  const client = (create as CreateClient)({ url, disableClientInfo, socket: { reconnectStrategy, connectTimeout: 2000 } })
  client.on('error', () => undefined)
  await client.connect()
  return track({ client, close: async () => client.destroy() })
}

async function nodeRedisCluster(create: CreateCluster | typeof createCluster5, ports: readonly number[] = clusterPorts): Promise<Made> {
  const disableClientInfo = create === createCluster5
  const nodes = ports.map((port) => ({ url: `redis://127.0.0.1:${port}` }))
  const cluster = (create as CreateCluster)({ rootNodes: nodes, defaults: { disableClientInfo, socket: { reconnectStrategy } } })
  cluster.on('error', () => undefined)
  await cluster.connect()
  return track({ client: cluster, close: async () => cluster.destroy() })
}

function valkey(url: string): Made {
  const client = new Valkey(url, { maxRetriesPerRequest: 1 })
  client.on('error', () => undefined)
  return track({ client, close: async () => client.disconnect() })
}

function valkeyCluster(ports: readonly number[] = clusterPorts): Made {
  const client = new ValkeyCluster(ports.map((port) => ({ host: '127.0.0.1', port })))
  client.on('error', () => undefined)
  return track({ client, close: async () => client.disconnect() })
}

/** Deletes the keys under `prefix` on the shared single node and on every cluster master. */
async function deleteKeys(prefix: string): Promise<void> {
  const ports = [Number(new URL(singleUrl).port || 6379), ...clusterPorts]
  for (const port of ports) {
    const admin = new Valkey(port, '127.0.0.1')
    const names = await admin.keys(`${prefix}*`)
    // one UNLINK per name: names of different slots cannot share a command on a cluster node
    for (const name of names) await admin.unlink(name)
    admin.disconnect()
  }
}
after(() => deleteKeys(runPrefix))

const singles: Array<[string, (url: string) => Promise<Made> | Made]> = [
  ['iovalkey', valkey],
  ['node-redis 5', (url) => nodeRedis(createClient5, url)],
  ['node-redis 6', (url) => nodeRedis(createClient6, url)],
]
const clusters: Array<[string, (ports?: readonly number[]) => Promise<Made> | Made]> = [
  ['iovalkey Cluster', (ports) => valkeyCluster(ports)],
  ['node-redis 5 createCluster', (ports) => nodeRedisCluster(createCluster5, ports)],
  ['node-redis 6 createCluster', (ports) => nodeRedisCluster(createCluster6, ports)],
]

for (const [name, make] of singles) {
  const prefix = `${runPrefix}-${name.replace(/\W/g, '')}`
  runStrategyContract({
    name: `redis through ${name} (single node)`,
    make: async () => new RedisStrategy({ client: (await make(singleUrl)).client, prefix }),
  })
}
for (const [name, make] of clusters) {
  const prefix = `${runPrefix}-${name.replace(/\W/g, '')}`
  runStrategyContract({ name: `redis through ${name}`, make: async () => new RedisStrategy({ client: (await make()).client, prefix }) })
}

for (const [name, make] of singles) {
  runFaultSuite({
    name: `redis through ${name}`,
    losesData: true,
    async start() {
      const server = await startRedisServer()
      return { port: server.port, kill: () => server.kill(), start: () => server.start(), stop: () => server.stop() }
    },
    strategy: async (port) => new RedisStrategy({ client: (await make(`redis://127.0.0.1:${port}`)).client }),
  })
}

describe('cluster clients: a restarted node', () => {
  it('loses no hit: every cluster client brings the fleet back to the exact totals', { timeout: 90_000 }, async () => {
    const cluster = await startRedisCluster(3)
    closers.push(() => cluster.stop())
    const SIZE = 60
    const clock = createFakeClock(windowStartMs(Date.now(), SIZE * 1000) + 5_000)
    // more keys than masters, so that every node holds some
    const keys = Array.from({ length: 24 }, (_, i) => `user-${i}`)
    const fleets = await Promise.all(
      clusters.map(async ([name, make]) => {
        const fleet = createFleet(name.replace(/\W/g, ''), SIZE, keys)
        for (let i = 0; i < 2; i++) {
          const rl = RateLimiting.newInstance(`clients-cluster-${name}-${i}`)
          const strategy = new RedisStrategy({ client: (await make(cluster.ports)).client })
          rl.new({
            namespace: name.replace(/\W/g, ''),
            windowSizes: [SIZE],
            syncRate: 1,
            autoSync: false,
            storeTimeoutMs: 500,
            clock: clock.now,
            strategy,
            onError: () => undefined,
          })
          closers.push(() => rl.close().catch(() => undefined))
          fleet.instances.push(rl)
        }
        return { name, fleet }
      }),
    )
    // syncs until one round succeeds everywhere, then two more: a lost window is found, pushed again, read back
    const settle = async () => {
      const deadline = Date.now() + 30_000
      for (const { name, fleet } of fleets) {
        while (!(await fleet.syncAll()).every((r) => r.status === 'fulfilled')) {
          assert.ok(Date.now() < deadline, `${name}: the cluster did not come back`)
          await new Promise((resolve) => setTimeout(resolve, 100))
        }
        await fleet.syncAll()
        await fleet.syncAll()
      }
    }
    for (const { fleet } of fleets) fleet.hitRound(0)
    await settle()
    for (const { name, fleet } of fleets) fleet.assertAgreement(`${name}, healthy`)

    const victim = cluster.nodes[1] as RedisServerHandle
    await victim.kill()
    for (const { fleet } of fleets) fleet.hitRound(1)
    await Promise.all(fleets.map(({ fleet }) => fleet.syncAll()))
    await victim.start()
    await cluster.waitOk()
    for (const { fleet } of fleets) fleet.hitRound(2)
    await settle()
    for (const { name, fleet } of fleets) fleet.assertAgreement(`${name}, after the restart`)
  })
})

const T0 = 1_800_000_000_000
const clock = (): number => T0

describe('the algorithms through node-redis', () => {
  for (const [name, create] of [
    ['node-redis 5', createClient5],
    ['node-redis 6', createClient6],
  ] as const) {
    it(`decides the fixed window and the sliding log on one node through ${name}, the checks of one turn batched`, async () => {
      const { client } = await nodeRedis(create, singleUrl)
      const prefix = `${runPrefix}-algo`
      const fixed = new RedisFixedWindow({ client, limit: 5, windowMs: 60_000, prefix, clock, scope: name.replace(/\W/g, '') })
      const log = new RedisSlidingLog({ client, limit: 5, windowMs: 60_000, prefix, clock, scope: name.replace(/\W/g, '') })
      // 20 checks in one turn: batched calls of up to 16, each answered as it would be alone
      const fixedAnswers = await Promise.all(Array.from({ length: 20 }, () => fixed.check('u1')))
      assert.deepEqual(
        fixedAnswers.map((r) => r.allowed),
        Array.from({ length: 20 }, (_, i) => i < 5),
      )
      assert.deepEqual(
        fixedAnswers.map((r) => r.count),
        Array.from({ length: 20 }, (_, i) => i + 1),
      )
      const logAnswers = await Promise.all(Array.from({ length: 8 }, () => log.check('u1')))
      assert.deepEqual(
        logAnswers.map((r) => r.allowed),
        Array.from({ length: 8 }, (_, i) => i < 5),
      )
      assert.equal((await log.peek('u1')).count, 5)
      assert.equal((await log.check('u1', 6)).retryAfterMs, Number.POSITIVE_INFINITY)
      await fixed.reset('u1')
      await log.reset('u1')
      assert.equal((await fixed.check('u1')).count, 1)
      assert.equal((await log.peek('u1')).count, 0)
    })
  }

  it('decides both algorithms on the cluster through node-redis createCluster, one call per check', async () => {
    const { client } = await nodeRedisCluster(createCluster6)
    const prefix = `${runPrefix}-algo-cluster`
    const fixed = new RedisFixedWindow({ client, limit: 3, windowMs: 60_000, prefix, clock })
    const log = new RedisSlidingLog({ client, limit: 3, windowMs: 60_000, prefix, clock })
    const users = Array.from({ length: 12 }, (_, i) => `user-${i}`)
    for (const algorithm of [fixed, log]) {
      const answers = await Promise.all(
        users.flatMap((u) => [algorithm.check(u), algorithm.check(u), algorithm.check(u), algorithm.check(u)]),
      )
      assert.deepEqual(
        answers.map((r) => r.allowed),
        users.flatMap(() => [true, true, true, false]),
      )
    }
  })

  it("keeps a read behind the writes made after it when a cluster node has seen the writes' script but not the read's", async () => {
    const made = await nodeRedisCluster(createCluster6)
    const adapter = redisAdapter(made.client)
    const cluster = made.client as ReturnType<CreateCluster>
    // scripts no node has cached yet: a comment of their own makes their SHA new
    const tag = randomUUID()
    const write = luaScript(`-- ${tag}\nreturn redis.call('INCR', KEYS[1])`)
    const read = luaScript(`-- ${tag}\nreturn tonumber(redis.call('GET', KEYS[1]) or '0')`)
    const owner = (key: string) => cluster.slots[keySlot(key)]?.master.address
    const keys = Array.from({ length: 64 }, (_, i) => `${runPrefix}:cluster-order-${i}`)
    const onA = keys[0] as string
    const onB = keys.find((key) => owner(key) !== owner(onA))
    assert.ok(onB !== undefined && owner(onA) !== undefined, 'two masters own the test keys')
    const call = (script: LuaScript, key: string) => evalScript(adapter, script, 1, [key], Number)
    // the client's first write goes to A and its first read to B: A holds the write's script only
    assert.equal(await call(write, onA), 1)
    assert.equal(await call(read, onB), 0)
    // on A, a read then two writes, sent in one turn: the read must not count the writes
    assert.deepEqual(await Promise.all([call(read, onA), call(write, onA), call(write, onA)]), [1, 2, 3])
  })
})

describe('node-redis with a type mapping of its own', () => {
  it('reads replies as strings when the client maps bulk strings to Buffers', async () => {
    const { client } = await nodeRedis(createClient6, singleUrl)
    const buffers = (client as ReturnType<CreateClient>).withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer })
    const rl = RateLimiting.newInstance('clients-type-mapping')
    rl.new({ namespace: 'ns', windowSizes: [60], syncRate: 0, strategy: new RedisStrategy({ client: buffers, prefix: `${runPrefix}-tm` }) })
    const limiter = rl.limiter({ namespace: 'ns', limits: [{ limit: 2, window: 60 }] })
    const log = new RedisSlidingLog({ client: buffers, limit: 1, windowMs: 60_000, prefix: `${runPrefix}-tm`, clock })
    try {
      assert.deepEqual(
        [(await limiter.hit('k')).allowed, (await limiter.hit('k')).allowed, (await limiter.hit('k')).allowed],
        [true, true, false],
      )
      assert.deepEqual([(await log.check('u')).allowed, (await log.check('u')).allowed], [true, false])
    } finally {
      await rl.close()
    }
  })
})

describe('the simple API through node-redis', () => {
  it('shares one limit between two limiters on one store', async () => {
    const { client } = await nodeRedis(createClient6, singleUrl)
    const name = `${runPrefix}-simple`
    const a = perMinute(3, { store: new RedisStrategy({ client, prefix: runPrefix }), name })
    const b = perMinute(3, { store: new RedisStrategy({ client, prefix: runPrefix }), name })
    try {
      assert.deepEqual([await a.allow('k'), await b.allow('k'), await a.allow('k'), await b.allow('k')], [true, true, true, false])
      assert.equal(await a.allow('other'), true)
    } finally {
      await a.close()
      await b.close()
    }
  })
})

describe('node-redis on a server of its own', () => {
  let server: Awaited<ReturnType<typeof startRedisServer>>
  before(async () => {
    server = await startRedisServer()
  })
  after(() => server?.stop())

  async function commandCalls(command: string): Promise<number> {
    const info = await rawCommand(server.port, `INFO commandstats`)
    return Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(info ?? '')?.[1] ?? 0)
  }

  it('sends a script by EVAL first, then by EVALSHA, and again by EVAL after SCRIPT FLUSH', async () => {
    const { client } = await nodeRedis(createClient6, server.url)
    const rl = RateLimiting.newInstance('clients-noscript')
    rl.new({ namespace: 'ns', windowSizes: [60], syncRate: 0, strategy: new RedisStrategy({ client }) })
    const limiter = rl.limiter({ namespace: 'ns', limits: [{ limit: 100, window: 60 }] })
    try {
      for (let i = 0; i < 3; i++) await limiter.hit('k')
      assert.equal(await commandCalls('eval'), 1)
      assert.equal(await commandCalls('evalsha'), 2)
      await rawCommand(server.port, 'SCRIPT FLUSH')
      assert.equal((await limiter.hit('k')).rate, 4)
      assert.equal(await commandCalls('eval'), 2, 'NOSCRIPT, then EVAL')
      assert.equal((await limiter.hit('k')).rate, 5)
    } finally {
      await rl.close()
    }
  })

  it('fails a push whose reply belongs to another command, and reconnects', async () => {
    const proxy = await startTcpProxy(server.port)
    try {
      const { client } = await nodeRedis(createClient6, `redis://127.0.0.1:${proxy.port}`)
      const strategy = new RedisStrategy({ client })
      const nowMs = Date.now()
      const push = (seq: number) =>
        strategy.pushDiffs({
          namespace: 'desync',
          nodeId: 'n1',
          seq,
          nowMs,
          windows: [{ key: 'k', windowStartMs: windowStartMs(nowMs, 60_000), windowSizeMs: 60_000, count: seq, diff: 1 }],
          refresh: [],
        })
      await push(1)
      proxy.mode = 'swallow-replies'
      const lost = push(2)
      await new Promise((resolve) => setTimeout(resolve, 100))
      proxy.mode = 'pass'
      // the swallowed call gets the next call's reply: caught by the nonce, the connection renewed
      // (the next call then gets the reply of the QUIT that renews it)
      const next = push(3)
      await assert.rejects(lost, (err: unknown) => err instanceof StoreError && err.code === 'STORE_REPLY_LOST')
      await assert.rejects(next, (err: unknown) => err instanceof StoreError)
      let rows: Awaited<ReturnType<typeof push>> | undefined
      for (let attempt = 0; attempt < 50 && rows === undefined; attempt++) {
        rows = await push(4).catch(async () => {
          await new Promise((resolve) => setTimeout(resolve, 20))
          return undefined
        })
      }
      assert.equal(rows?.[0]?.count, 4, 'a new connection, and replies matched again')
    } finally {
      await proxy.close()
    }
  })
})

describe('node-redis errors', () => {
  it('says a node-redis client or cluster that is not connected must be connected first', async () => {
    const client = createClient6({ url: singleUrl })
    const cluster = createCluster5({ rootNodes })
    for (const [what, c] of [
      ['node-redis', client],
      ['node-redis cluster', cluster],
    ] as const) {
      const strategy = new RedisStrategy({ client: c })
      const nowMs = Date.now()
      await assert.rejects(
        strategy.pushDiffs({
          namespace: 'x',
          nodeId: 'n',
          seq: 1,
          nowMs,
          windows: [],
          refresh: [{ key: 'k', windowStartMs: 0, windowSizeMs: 1000 }],
        }),
        (err: unknown) =>
          err instanceof StoreError &&
          err.code === 'STORE_UNAVAILABLE' &&
          err.message.includes(`the ${what} client is not connected: call await client.connect()`),
      )
    }
    const fixed = new RedisFixedWindow({ client, limit: 1, windowMs: 1000 })
    await assert.rejects(fixed.check('u'), (err: unknown) => err instanceof StoreError && /not connected/.test(err.message))
  })

  it('tells an error reply (STORE_ERROR) from a lost connection (STORE_UNAVAILABLE)', async () => {
    const { client } = await nodeRedis(createClient6, singleUrl)
    const wrongType = luaScript(`return redis.call('HSET', KEYS[1], 'f', 'v') + redis.call('INCR', KEYS[1])`)
    const key = `${runPrefix}:wrongtype`
    const refused = await evalScript(redisAdapter(client), wrongType, 1, [key], () => undefined, redisError)
    assert.equal(refused?.code, 'STORE_ERROR')
    const closed = createClient6({ url: singleUrl })
    const down = await evalScript(redisAdapter(closed), wrongType, 1, [key], () => undefined, redisError)
    assert.equal(down?.code, 'STORE_UNAVAILABLE')
  })

  it('refuses what is no client, and a node-redis keyPrefix, naming them', () => {
    const bad: Array<[unknown, RegExp]> = [
      [{}, /client must be an ioredis Redis or Cluster .*node-redis client \(createClient\).*got an object with none of/],
      [{ sendCommand() {} }, /got an object with only sendCommand/],
      [createClient6({ url: singleUrl, keyPrefix: 'app:' } as Parameters<CreateClient>[0]), /keyPrefix "app:"/],
    ]
    for (const [client, message] of bad) {
      assert.throws(
        () => new RedisStrategy({ client: client as SupportedRedisClient }),
        (err: unknown) => err instanceof ConfigError && message.test(err.message),
      )
      assert.throws(
        () => new RedisFixedWindow({ client: client as SupportedRedisClient, limit: 1, windowMs: 1000 }),
        (err: unknown) => err instanceof ConfigError && message.test(err.message),
      )
    }
    const cluster = createCluster6({ rootNodes })
    assert.throws(
      () => new RedisStrategy({ client: cluster, batchAcrossSlots: true }),
      (err: unknown) => err instanceof ConfigError && /batchAcrossSlots cannot be used with a cluster client/.test(err.message),
    )
  })
})
