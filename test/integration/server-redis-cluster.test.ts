/**
 * The seed algorithms and the service on a Redis Cluster: a one-node cluster of our own (all 16384
 * slots on one node still enforces CROSSSLOT), reached through an ioredis `Cluster`.
 */
import assert from 'node:assert/strict'
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { Cluster, Redis } from 'ioredis'
import { RedisFixedWindow, RedisSlidingLog } from '../../src/algorithms/index.js'
import { call, check, freePort, startTestService, until } from './server-helpers.js'

describe('seed algorithms on a Redis Cluster', { timeout: 30_000 }, () => {
  let dir: string
  let node: ChildProcess
  let port: number
  let cluster: Cluster
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'rl-cluster-'))
    // the cluster bus listens on port + 10000: pick a port whose bus port is free too
    for (;;) {
      port = await freePort()
      if (port + 10_000 < 65_536) break
    }
    node = spawn(
      'redis-server',
      [
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        // a node that never met another announces an empty address in CLUSTER SLOTS
        '--cluster-announce-ip',
        '127.0.0.1',
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        path.join(dir, 'nodes.conf'),
        '--save',
        '',
        '--appendonly',
        'no',
        '--dir',
        dir,
      ],
      { stdio: 'ignore' },
    )
    const admin = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => 50 })
    admin.on('error', () => undefined) // refused until the server listens
    await until(
      async () => {
        try {
          await admin.connect().catch(() => undefined)
          return (await admin.ping()) === 'PONG'
        } catch {
          return false
        }
      },
      5000,
      'redis-server --cluster-enabled to start',
    )
    await admin.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383')
    await until(async () => String(await admin.call('CLUSTER', 'INFO')).includes('cluster_state:ok'), 5000, 'cluster_state:ok')
    admin.disconnect()
    cluster = new Cluster([{ host: '127.0.0.1', port }])
  })
  after(async () => {
    cluster?.disconnect()
    node?.kill('SIGKILL')
    rmSync(dir, { recursive: true, force: true })
  })

  it('runs both scripts, each in the one slot of its one key, without a hash tag', async () => {
    const fw = new RedisFixedWindow({ client: cluster, limit: 2, windowMs: 60_000 })
    const log = new RedisSlidingLog({ client: cluster, limit: 2, windowMs: 60_000 })
    for (const user of ['a', 'b{x}', 'c}d']) {
      const decisions = [await fw.check(user), await fw.check(user), await fw.check(user)].map((d) => d.allowed)
      assert.deepEqual(decisions, [true, true, false], `fixed window, ${user}`)
      const logged = [await log.check(user), await log.check(user), await log.check(user)].map((d) => d.allowed)
      assert.deepEqual(logged, [true, true, false], `sliding log, ${user}`)
    }
    assert.equal(await cluster.type('rlaas:rate_limit:a'), 'zset')
    assert.equal(await cluster.type(fw.key('a')), 'string')
  })

  it('starts within the store timeout when no cluster node answers, and answers 503', async () => {
    const dead = await freePort()
    const started = Date.now()
    const t = await startTestService(`store: { type: redis, nodes: ["127.0.0.1:${dead}"], timeout-ms: 300 }\n`)
    try {
      assert.ok(Date.now() - started < 3_000, `started in ${Date.now() - started} ms`)
      assert.equal((await check(t.url, { userId: 'nobody' })).status, 503)
      assert.equal((await call(`${t.url}/readyz`)).status, 503)
    } finally {
      await t.close()
    }
  })

  it('serves from the cluster named in store.nodes', async () => {
    const t = await startTestService(`
rate-limiter: { use-algo: sliding-window-algo, max-requests: 1, window-size: 60, key-prefix: svc }
policies:
  fixed: { use-algo: fixed-window-algo }
store: { type: redis, nodes: ["127.0.0.1:${port}"] }
`)
    try {
      assert.deepEqual([(await check(t.url, { userId: 'n1' })).status, (await check(t.url, { userId: 'n1' })).status], [200, 429])
      assert.deepEqual(
        [(await check(t.url, { userId: 'n1', policy: 'fixed' })).status, (await check(t.url, { userId: 'n1', policy: 'fixed' })).status],
        [200, 429],
      )
      assert.equal(await cluster.type('svc:n1'), 'zset')
      const direct = new Redis(port, '127.0.0.1')
      const fixedKeys = await direct.keys('svc@fixed:fixed:n1:*')
      direct.disconnect()
      assert.equal(fixedKeys.length, 1, 'the named policy has its own key')
      assert.equal(await cluster.type(fixedKeys[0] as string), 'string')
    } finally {
      await t.close()
    }
  })
})
