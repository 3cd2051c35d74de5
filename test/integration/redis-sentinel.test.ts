/**
 * Redis Sentinel: the master killed under load, on a deployment of the test's own (a master, a
 * replica, three Sentinels; test/support/redis-sentinel.ts). Before each kill the replica is
 * made to miss the master's last writes (stopped, its link cut), so the failover loses writes the
 * old master acknowledged, as Sentinel may: the tests show what each mode does with them.
 *
 * - periodic mode: the engine re-pushes the cumulative counts the new master lacks; the totals
 *   end exact;
 * - synchronous mode: every decision during the failover is the onStoreError one, recovery is
 *   automatic, and the totals end exact too (each hit writes the process's cumulative count);
 * - the service: fixed window, sliding log and the counter, with /readyz probed throughout; the
 *   seed algorithms lose exactly the hits the replica missed, the counter none.
 *
 * Each test prints the time from the master's death to the first answer of the new master
 * (docs/STORES-redis.md, "Sentinel").
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import type { Redis } from 'ioredis'
import { type Decision, RateLimiting } from '../../src/index.js'
import { windowStartMs } from '../../src/core/window.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { type SentinelSet, startSentinelSet } from '../support/redis-sentinel.js'
import { call, check, startTestService, uniquePrefix } from './server-helpers.js'

const NS = 'sentinel'
const WINDOW = 60
const KEYS = Array.from({ length: 8 }, (_, i) => `user-${i}`)
// how long the replica misses the master's writes before the kill: several syncs and many hits
const DETACHED_MS = 300
// a call to a dead master fails at once (refused) or within a reconnect period: the timeout only
// has to be longer than a stall of this busy machine, or a slow call would be taken for the failover
const STORE_TIMEOUT_MS = 1000

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

function sentinelOptions(set: SentinelSet) {
  return { sentinels: set.sentinels, name: set.masterName, password: set.password, sentinelPassword: set.sentinelPassword }
}

/**
 * `loops` concurrent loops calling `step` with a pause of `pauseMs` between calls; the function
 * returned stops them and rejects with the first failure of a step.
 */
function load(loops: number, pauseMs: number, step: (loop: number, i: number) => Promise<void> | void): () => Promise<void> {
  let running = true
  const done = Promise.all(
    Array.from({ length: loops }, async (_, loop) => {
      for (let i = 0; running; i++) {
        await step(loop, i)
        await sleep(pauseMs)
      }
    }),
  ).finally(() => (running = false))
  done.catch(() => undefined) // surfaced by the stop function
  return async () => {
    running = false
    await done
  }
}

/** The stored total of `key` (current and previous windows) through `strategy`. */
async function storedTotal(strategy: RedisStrategy, key: string): Promise<number> {
  const nowMs = Date.now()
  const sizeMs = WINDOW * 1000
  const start = windowStartMs(nowMs, sizeMs)
  const cur = await strategy.getWindow(key, NS, start, sizeMs)
  const prev = await strategy.getWindow(key, NS, start - sizeMs, sizeMs)
  return cur.count + prev.count
}

const sum = (values: Iterable<number>) => [...values].reduce((a, b) => a + b, 0)

/** Runs `body` with a `defer` that registers clean-ups, run in reverse order whatever happens. */
async function withCleanups(body: (defer: (fn: () => unknown) => void) => Promise<void>): Promise<void> {
  const cleanups: Array<() => unknown> = []
  try {
    await body((fn) => cleanups.push(fn))
  } finally {
    for (const fn of cleanups.reverse())
      await Promise.resolve()
        .then(fn)
        .catch(() => undefined)
  }
}

/** The total of every key as one data node holds it, read on that node (not through the Sentinels). */
async function totalOn(set: SentinelSet, port: number): Promise<number> {
  const reader = new RedisStrategy({ url: `redis://:${set.password}@127.0.0.1:${port}` })
  try {
    let total = 0
    for (const key of KEYS) total += await storedTotal(reader, key)
    return total
  } finally {
    await reader.close()
  }
}

describe('redis sentinel: the master killed under load', () => {
  it('periodic mode: the totals end exact, the writes the new master never got re-pushed', () =>
    withCleanups(async (defer) => {
      const set = await startSentinelSet()
      defer(() => set.stop())
      const errors: Error[] = []
      // one by name (strategyOpts), one with a strategy object
      const a = RateLimiting.newInstance('sentinel-a')
      const b = RateLimiting.newInstance('sentinel-b')
      const common = {
        namespace: NS,
        windowSizes: [WINDOW],
        syncRate: 0.05,
        storeTimeoutMs: STORE_TIMEOUT_MS,
        onError: (e: Error) => errors.push(e),
      }
      a.new({ ...common, strategy: 'redis', strategyOpts: sentinelOptions(set) })
      const strategyB = new RedisStrategy(sentinelOptions(set))
      b.new({ ...common, strategy: strategyB })
      defer(async () => {
        await Promise.all([a.close(), b.close()])
        await strategyB.close()
      })
      const instances = [a, b]
      const hits = new Map<string, number>()
      const stop = load(2, 2, (loop, i) => {
        const key = KEYS[(i * 3 + loop) % KEYS.length] as string
        const rate = (instances[loop] as RateLimiting).increment(key, WINDOW, 1, NS)
        assert.equal(typeof rate, 'number', 'a periodic hit answers synchronously, store or not')
        hits.set(key, (hits.get(key) ?? 0) + 1)
      })
      defer(stop)

      await sleep(500)
      const oldMaster = await set.masterPort()
      await set.detachReplica()
      await sleep(DETACHED_MS)
      const acknowledged = await totalOn(set, oldMaster)
      const killedAtMs = await set.killMaster()
      const replicated = await totalOn(set, set.dataPorts.find((p) => p !== oldMaster) as number)
      assert.ok(replicated < acknowledged, `the new master lacks writes the old one acknowledged (${replicated} < ${acknowledged})`)

      const promoted = await set.waitForNewMaster(oldMaster)
      // the first sync of each instance that reached the new master
      const firstSyncAtMs: number[] = []
      for (const rl of instances) {
        const deadline = Date.now() + 10_000
        while (rl.stats(NS).lastSyncAtMs <= killedAtMs) {
          if (Date.now() > deadline) throw new Error('no sync reached the new master within 10 s')
          await sleep(5)
        }
        firstSyncAtMs.push(Date.now())
      }
      await sleep(300)
      await stop()
      // two full rounds: the first finds the windows the new master lacks (own below acked) and
      // pushes them again, the second reads what the other instance pushed
      for (let round = 0; round < 2; round++) for (const rl of instances) await rl.sync(NS)

      for (const [key, total] of hits) {
        for (const [index, rl] of instances.entries()) {
          const { current, previous } = rl.namespace(NS).table(WINDOW).counts(key, Date.now())
          assert.equal(current + previous, total, `instance ${index}, key ${key}`)
        }
        assert.equal(await storedTotal(strategyB, key), total, `the new master holds every hit of ${key}, once`)
      }
      assert.ok(errors.length > 0, 'the syncs failed during the failover')
      console.log(
        `# periodic: ${sum(hits.values())} hits, ${acknowledged - replicated} acknowledged by the old master and lost with it, ` +
          `re-pushed; new master named ${promoted.atMs - killedAtMs} ms after the kill, first sync on it after ` +
          `${firstSyncAtMs.map((t) => t - killedAtMs).join(' and ')} ms`,
      )
    }))

  it('synchronous mode: decisions follow onStoreError during the failover, recover by themselves, and the totals end exact', () =>
    withCleanups(async (defer) => {
      const set = await startSentinelSet()
      defer(() => set.stop())
      const policies = ['allow', 'deny'] as const
      const instances = policies.map((onStoreError) => {
        const rl = RateLimiting.newInstance(`sentinel-sync-${onStoreError}`)
        rl.new({
          namespace: NS,
          windowSizes: [WINDOW],
          syncRate: 0,
          storeTimeoutMs: STORE_TIMEOUT_MS,
          onStoreError,
          strategy: 'redis',
          strategyOpts: sentinelOptions(set),
          onError: () => undefined,
        })
        return { rl, onStoreError, limiter: rl.limiter({ namespace: NS, limits: [{ limit: 1_000_000_000, window: WINDOW }] }) }
      })
      defer(() => Promise.all(instances.map((i) => i.rl.close())).then(() => undefined))
      const observer = new RedisStrategy(sentinelOptions(set))
      defer(() => observer.close())

      type Made = { instance: number; key: string; startMs: number; endMs: number; d: Decision }
      const made: Made[] = []
      const stop = load(4, 2, async (loop, i) => {
        const instance = loop % 2
        const key = KEYS[(i * 5 + loop) % KEYS.length] as string
        const startMs = Date.now()
        const d = await (instances[instance] as (typeof instances)[number]).limiter.hit(key)
        made.push({ instance, key, startMs, endMs: Date.now(), d })
      })
      defer(stop)

      await sleep(500)
      const oldMaster = await set.masterPort()
      await set.detachReplica()
      await sleep(DETACHED_MS)
      const acknowledged = await totalOn(set, oldMaster)
      const killedAtMs = await set.killMaster()
      const replicated = await totalOn(set, set.dataPorts.find((p) => p !== oldMaster) as number)
      assert.ok(replicated < acknowledged, `the new master lacks writes the old one acknowledged (${replicated} < ${acknowledged})`)
      const promoted = await set.waitForNewMaster(oldMaster)
      // every instance answers from the new master again, then a little more load
      const recoveredAtMs: number[] = []
      for (let instance = 0; instance < instances.length; instance++) {
        const deadline = Date.now() + 10_000
        for (;;) {
          const first = made.find((m) => m.instance === instance && m.startMs > killedAtMs && m.d.reason === 'limit')
          if (first !== undefined) {
            recoveredAtMs.push(first.endMs)
            break
          }
          if (Date.now() > deadline) throw new Error(`instance ${instance} did not recover within 10 s of the promotion`)
          await sleep(5)
        }
      }
      await sleep(500)
      await stop()

      let failed = 0
      for (const m of made) {
        const policy = (instances[m.instance] as (typeof instances)[number]).onStoreError
        if (m.d.reason === 'limit') {
          assert.equal(m.d.allowed, true, 'no limit is reached')
          continue
        }
        failed++
        assert.equal(m.d.reason, 'store-error')
        assert.ok(m.d.storeError !== undefined)
        assert.equal(m.d.allowed, policy === 'allow', `onStoreError "${policy}"`)
        assert.ok(m.endMs > killedAtMs, 'no store error before the kill')
        assert.ok(m.startMs < (recoveredAtMs[m.instance] as number), 'no store error once the instance answered from the new master')
      }
      assert.ok(failed > 0, 'some decisions came during the failover')

      // every hit counts, those decided by onStoreError included: the next hit of a key writes the
      // process's cumulative count, the hits the new master never got with it
      const hits = new Map<string, number>()
      for (const m of made) hits.set(m.key, (hits.get(m.key) ?? 0) + 1)
      for (const [key, total] of hits) assert.equal(await storedTotal(observer, key), total, key)

      const firstAnswerMs = Math.min(...recoveredAtMs) - killedAtMs
      console.log(
        `# synchronous: ${made.length} decisions, ${failed} by onStoreError, ${acknowledged - replicated} hits lost with the old master and written again; new master named ${promoted.atMs - killedAtMs} ms after the kill, ` +
          `first decision it served ${firstAnswerMs} ms after (per instance: ${recoveredAtMs.map((t) => t - killedAtMs).join(', ')} ms)`,
      )
    }))

  it('the service: answers follow on-store-error, /readyz tells the truth, the seed algorithms lose only what the replica missed', () =>
    withCleanups(async (defer) => {
      const set = await startSentinelSet()
      defer(() => set.stop())
      const prefix = uniquePrefix()
      const service = await startTestService(
        [
          'rate-limiter:',
          '  use-algo: fixed-window-algo',
          '  max-requests: 1000000000',
          '  window-size: 3600',
          '  on-store-error: deny',
          `  key-prefix: "${prefix}"`,
          'policies:',
          '  log: { use-algo: sliding-window-algo }',
          '  counter: { use-algo: sliding-window-counter-algo, sync-rate: 0 }',
          '  periodic: { use-algo: sliding-window-counter-algo, sync-rate: 0.05 }',
          'store:',
          '  type: redis',
          `  sentinels: [${set.sentinels.map((s) => `"${s.host}:${s.port}"`).join(', ')}]`,
          `  master-name: ${set.masterName}`,
          `  password: "${set.password}"`,
          `  sentinel-password: "${set.sentinelPassword}"`,
          `  timeout-ms: ${STORE_TIMEOUT_MS}`,
        ].join('\n'),
      )
      defer(() => service.close())
      const POLICIES = ['default', 'log', 'counter', 'periodic'] as const
      const USERS = ['u0', 'u1', 'u2']

      type Answer = {
        policy: (typeof POLICIES)[number]
        userId: string
        startMs: number
        endMs: number
        status: number
        body: Record<string, unknown>
      }
      const answers: Answer[] = []
      const stopChecks = load(4, 2, async (loop, i) => {
        const policy = POLICIES[(i + loop) % POLICIES.length] as (typeof POLICIES)[number]
        const userId = USERS[(i * 7 + loop) % USERS.length] as string
        const startMs = Date.now()
        const res = await check(service.url, { userId, policy })
        answers.push({ policy, userId, startMs, endMs: Date.now(), status: res.status, body: res.body ?? {} })
      })
      defer(stopChecks)
      const probes: Array<{ startMs: number; endMs: number; status: number }> = []
      const stopProbes = load(1, 25, async () => {
        const startMs = Date.now()
        const res = await call(`${service.url}/readyz`)
        probes.push({ startMs, endMs: Date.now(), status: res.status })
      })
      defer(stopProbes)

      // what each data node holds for each policy and user: the seed's keys and the counter's
      const counts = async (client: Redis) => {
        const out = new Map<string, number>()
        for (const userId of USERS) {
          const fixed = await client.keys(`${prefix}:${userId}:*`)
          out.set(`default/${userId}`, sum(await Promise.all(fixed.map(async (k) => Number(await client.get(k))))))
          out.set(`log/${userId}`, await client.zcard(`${prefix}@log:log:${userId}`))
          for (const policy of ['counter', 'periodic']) {
            const windows = await client.keys(`${prefix}#counter:{${policy}:${userId}}:*`)
            out.set(`${policy}/${userId}`, sum(await Promise.all(windows.map(async (k) => Number(await client.hget(k, 't'))))))
          }
        }
        return out
      }

      await sleep(600)
      const oldMaster = await set.masterPort()
      const detachedAtMs = Date.now()
      await set.detachReplica()
      await sleep(DETACHED_MS)
      const killedAtMs = await set.killMaster()
      const replicaClient = set.dataClient(set.dataPorts.find((p) => p !== oldMaster) as number)
      await replicaClient.connect()
      const replicated = await counts(replicaClient)
      replicaClient.disconnect()
      const promoted = await set.waitForNewMaster(oldMaster)
      const deadline = Date.now() + 10_000
      let recovered: Answer | undefined
      while ((recovered = answers.find((a) => a.startMs > killedAtMs && a.policy !== 'periodic' && a.status === 200)) === undefined) {
        if (Date.now() > deadline)
          throw new Error(
            `the service did not recover within 10 s of the promotion: ${service.logs
              .slice(-6)
              .map((l) => JSON.stringify(l.err))
              .join(' | ')}`,
          )
        await sleep(5)
      }
      await sleep(500)
      await Promise.all([stopChecks(), stopProbes()])

      // every answer is the algorithm's, or on-store-error's "deny" (429, degraded) while the store fails
      let degraded = 0
      for (const a of answers) {
        if (a.status === 200) {
          assert.equal(a.body.reason, 'limit')
          assert.equal(a.body.degraded, undefined)
          continue
        }
        degraded++
        assert.equal(a.status, 429, JSON.stringify(a))
        assert.deepEqual([a.body.reason, a.body.degraded], ['store-error', true])
        assert.notEqual(a.policy, 'periodic', 'a periodic counter decides locally')
        assert.ok(
          a.endMs > killedAtMs && a.startMs < recovered.endMs,
          `store errors only between the kill and the recovery: ${JSON.stringify(a)}`,
        )
      }
      assert.ok(degraded > 0, 'some checks came during the failover')

      // /readyz: 200 before, 503 while no master answers, 200 once the service answers from the new one
      assert.ok(probes.length > 0)
      for (const p of probes) {
        if (p.endMs < detachedAtMs) assert.equal(p.status, 200, 'ready before the failover')
        if (p.startMs > killedAtMs && p.endMs < promoted.atMs) assert.equal(p.status, 503, 'unavailable while there is no master')
        if (p.startMs > recovered.endMs) assert.equal(p.status, 200, 'ready once the new master answers')
      }
      assert.ok(
        probes.some((p) => p.status === 503 && p.startMs > killedAtMs),
        '/readyz said 503 during the failover',
      )

      // the counts on the new master: the seed algorithms have what the replica had plus what the new
      // master admitted; what the old master admitted after the replica's last write is lost
      const admin = set.dataClient(promoted.port)
      await admin.connect()
      defer(async () => admin.disconnect())
      const expected = new Map<string, number>()
      const add = (id: string, n: number) => expected.set(id, (expected.get(id) ?? 0) + n)
      // (a check sent before the kill and admitted was counted by the old master; none sent after can reach it)
      let admittedByOldMaster = 0
      let replicatedSeed = 0
      for (const a of answers) {
        const id = `${a.policy}/${a.userId}`
        if (a.policy === 'default' || a.policy === 'log') {
          if (a.status === 200 && a.startMs > killedAtMs) add(id, 1)
          if (a.status === 200 && a.startMs < killedAtMs) admittedByOldMaster++
        } else add(id, 1) // the counter counts every check, those answered by on-store-error too
      }
      for (const userId of USERS)
        for (const policy of ['default', 'log']) {
          const count = replicated.get(`${policy}/${userId}`) ?? 0
          add(`${policy}/${userId}`, count)
          replicatedSeed += count
        }
      const lost = admittedByOldMaster - replicatedSeed
      // the periodic counter pushes within a sync or two
      const settleBy = Date.now() + 5_000
      let final = await counts(admin)
      while ([...expected].some(([id, n]) => final.get(id) !== n) && Date.now() < settleBy) {
        await sleep(50)
        final = await counts(admin)
      }
      assert.deepEqual(Object.fromEntries([...final].sort()), Object.fromEntries([...expected].sort()))
      assert.ok(lost > 0, 'the old master admitted checks the replica never got')

      console.log(
        `# service: ${answers.length} checks, ${degraded} answered by on-store-error, ${lost} seed-algorithm checks lost with the old master; ` +
          `new master named ${promoted.atMs - killedAtMs} ms after the kill, first check it served ${recovered.endMs - killedAtMs} ms after`,
      )
    }))

  it('a frozen master (SIGSTOP): the library and the service leave it for the new one as soon as the Sentinels name it', () =>
    withCleanups(async (defer) => {
      const set = await startSentinelSet()
      defer(() => set.stop())
      const rl = RateLimiting.newInstance('sentinel-frozen')
      rl.new({
        namespace: NS,
        windowSizes: [WINDOW],
        syncRate: 0,
        storeTimeoutMs: STORE_TIMEOUT_MS,
        onStoreError: 'deny',
        strategy: 'redis',
        strategyOpts: sentinelOptions(set),
        onError: () => undefined,
      })
      defer(() => rl.close())
      const limiter = rl.limiter({ namespace: NS, limits: [{ limit: 1_000_000_000, window: WINDOW }] })
      const service = await startTestService(
        [
          `rate-limiter: { use-algo: fixed-window-algo, max-requests: 1000000000, window-size: 3600, key-prefix: "${uniquePrefix()}" }`,
          'store:',
          '  type: redis',
          `  sentinels: [${set.sentinels.map((s) => `"${s.host}:${s.port}"`).join(', ')}]`,
          `  master-name: ${set.masterName}`,
          `  password: "${set.password}"`,
          `  sentinel-password: "${set.sentinelPassword}"`,
          `  timeout-ms: ${STORE_TIMEOUT_MS}`,
        ].join('\n'),
      )
      defer(() => service.close())

      const hits = new Map<string, number>()
      const library: Array<{ startMs: number; endMs: number; ok: boolean }> = []
      const checks: Array<{ startMs: number; endMs: number; status: number }> = []
      const stop = load(2, 5, async (loop, i) => {
        const startMs = Date.now()
        if (loop === 0) {
          const key = KEYS[i % KEYS.length] as string
          const d = await limiter.hit(key)
          hits.set(key, (hits.get(key) ?? 0) + 1)
          library.push({ startMs, endMs: Date.now(), ok: d.reason === 'limit' })
        } else {
          const res = await check(service.url, { userId: `u${i % 3}` })
          checks.push({ startMs, endMs: Date.now(), status: res.status })
        }
      })
      defer(stop)
      await sleep(300)
      const oldMaster = await set.masterPort()
      const frozenAtMs = await set.freezeMaster()
      const promoted = await set.waitForNewMaster(oldMaster)
      const recovery = async (answers: ReadonlyArray<{ startMs: number; endMs: number; ok?: boolean; status?: number }>, who: string) => {
        const deadline = Date.now() + 10_000
        for (;;) {
          const first = answers.find((a) => a.startMs > promoted.atMs && (a.ok === true || a.status === 200))
          if (first !== undefined) return first.endMs
          if (Date.now() > deadline) throw new Error(`${who} still on the frozen master 10 s after the promotion`)
          await sleep(5)
        }
      }
      const libraryAtMs = await recovery(library, 'the library')
      const serviceAtMs = await recovery(checks, 'the service')
      await sleep(300)
      await stop()
      // failed during the freeze, answered by the new master since
      assert.ok(library.some((a) => !a.ok && a.startMs > frozenAtMs))
      assert.ok(checks.some((a) => a.status === 503 && a.startMs > frozenAtMs))
      assert.ok(library.every((a) => a.ok || a.startMs < libraryAtMs))
      assert.ok(checks.every((a) => a.status === 200 || a.startMs < serviceAtMs))
      const observer = new RedisStrategy(sentinelOptions(set))
      defer(() => observer.close())
      for (const [key, total] of hits) assert.equal(await storedTotal(observer, key), total, key)
      console.log(
        `# frozen master: new master named ${promoted.atMs - frozenAtMs} ms after the freeze; first answer from it: ` +
          `library ${libraryAtMs - frozenAtMs} ms, service ${serviceAtMs - frozenAtMs} ms`,
      )
    }))
})
