/**
 * Reloads: the new config applies to new requests without dropping any, an invalid one is
 * rejected while the old keeps running, switching use-algo takes effect at once, counters
 * survive a reload that only changes a limit, and the service flushes unsynced counts when a
 * reload drops a counter policy and when it shuts down.
 */
import assert from 'node:assert/strict'
import { appendFileSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { ConfigFileError } from '../../src/server/config.js'
import { startService } from '../../src/server/service.js'
import type { MemoryStrategy } from '../../src/strategies/memory.js'
import {
  type Answer,
  call,
  check,
  delay,
  deleteKeys,
  keysUnder,
  SHARED_REDIS_URL,
  startTestService,
  type TestService,
  uniquePrefix,
  until,
} from './server-helpers.js'

function memoryConfig(algo: string, limit: number, extra = ''): string {
  return `rate-limiter: { use-algo: ${algo}, max-requests: ${limit}, window-size: 60 }\nstore: { type: memory }\n${extra}`
}

/** Sends requests back to back on several keep-alive connections until stopped. */
function traffic(base: string, users: number) {
  let running = true
  const answers: Answer[] = []
  const errors: unknown[] = []
  const loops = Array.from({ length: 4 }, async (_, loop) => {
    let i = 0
    while (running) {
      try {
        answers.push(await check(base, { userId: `traffic-${loop}-${i++ % users}` }))
      } catch (err) {
        errors.push(err)
      }
    }
  })
  return {
    answers,
    errors,
    async stop() {
      running = false
      await Promise.all(loops)
    },
  }
}

describe('config reload', { timeout: 60_000 }, () => {
  it('switches use-algo for new requests under traffic, dropping none', async () => {
    const t = await startTestService(memoryConfig('sliding-window-algo', 3))
    try {
      const load = traffic(t.url, 50)
      await until(() => load.answers.length > 50, 3000, 'traffic')
      t.write(memoryConfig('fixed-window-algo', 3))
      assert.equal(await t.service.reload(), true)
      const atSwitch = load.answers.length
      await until(() => load.answers.length > atSwitch + 50, 3000, 'traffic after the reload')
      await load.stop()
      assert.deepEqual(load.errors, [], 'no request failed during the reload')
      assert.ok(
        load.answers.every((a) => a.status === 200 || a.status === 429),
        'every request was decided',
      )
      // the fixed window counts denied requests, the sliding log does not: the new algorithm decides
      for (let i = 0; i < 5; i++) await check(t.url, { userId: 'after-switch' })
      assert.equal((await check(t.url, { userId: 'after-switch' })).body?.count, 6)
      const metrics = await (await fetch(`${t.url}/metrics`)).text()
      assert.match(metrics, /ratelimiting_policy_info\{policy="default",algorithm="fixed-window-algo"/)
      assert.match(metrics, /ratelimiting_config_reloads_total\{result="success"\} 1/)
    } finally {
      await t.close()
    }
  })

  it('reloads when the config file changes', async () => {
    const t = await startTestService(memoryConfig('sliding-window-algo', 3), {
      watch: true,
      watchDebounceMs: 50,
    })
    try {
      t.write(memoryConfig('sliding-window-algo', 7))
      await until(() => t.service.config().policies.get('default')?.maxRequests === 7, 3000, 'the file change to apply')
      assert.equal((await check(t.url, { userId: 'watched' })).body?.limit, 7)
    } finally {
      await t.close()
    }
  })

  it('rejects an invalid config, logs why, and keeps the running one', async () => {
    const t = await startTestService(memoryConfig('sliding-window-algo', 3))
    try {
      await check(t.url, { userId: 'kept' })
      t.write('rate-limiter:\n  use-algo: sliding-window-algo\n  max-requests: lots\n')
      assert.equal(await t.service.reload(), false)
      const a = await check(t.url, { userId: 'kept' })
      assert.equal(a.status, 200)
      assert.equal(a.body?.limit, 3)
      assert.equal(a.body?.count, 2, 'the counters are untouched')
      const rejected = t.logs.find((l) => l.msg === 'config reload rejected; the running config stays')
      assert.ok(rejected, 'the rejection is logged')
      assert.match(
        JSON.stringify(rejected.issues),
        /ratelimiting\.yaml:3:3: rate-limiter\.max-requests: must be an integer, got \\"lots\\"/,
      )
      assert.match(await (await fetch(`${t.url}/metrics`)).text(), /ratelimiting_config_reloads_total\{result="failure"\} 1/)
    } finally {
      await t.close()
    }
  })

  it('keeps every user count when a reload only changes a limit', async () => {
    for (const algo of ['sliding-window-algo', 'fixed-window-algo', 'sliding-window-counter-algo']) {
      const t = await startTestService(memoryConfig(algo, 3))
      try {
        for (let i = 0; i < 3; i++) await check(t.url, { userId: 'steady' })
        t.write(memoryConfig(algo, 5))
        assert.equal(await t.service.reload(), true)
        const a = await check(t.url, { userId: 'steady' })
        assert.deepEqual([a.status, a.body?.count, a.body?.limit, a.body?.remaining], [200, 4, 5, 1], algo)
      } finally {
        await t.close()
      }
    }
  })

  it('flushes a counter policy that a reload removes, and every counter on shutdown', async () => {
    const yaml = (policies: string) =>
      `rate-limiter: { use-algo: sliding-window-counter-algo, max-requests: 100, window-size: 60, sync-rate: 86400 }\nstore: { type: memory }\n${policies}`
    const t = await startTestService(yaml('policies:\n  gone: { max-requests: 10 }\n'))
    const store = (await t.service.runtime().store.strategy()) as MemoryStrategy
    const windowStart = Math.floor(Date.now() / 60_000) * 60_000
    try {
      for (let i = 0; i < 3; i++) await check(t.url, { userId: 'flushed', policy: 'gone' })
      for (let i = 0; i < 2; i++) await check(t.url, { userId: 'flushed' })
      assert.equal((await store.getWindow('flushed', 'gone', windowStart, 60_000)).count, 0, 'nothing synced yet (sync-rate 1 day)')
      t.write(yaml(''))
      assert.equal(await t.service.reload(), true)
      await until(
        async () => (await store.getWindow('flushed', 'gone', windowStart, 60_000)).count === 3,
        3000,
        'the flush of the removed policy',
      )
      assert.equal((await store.getWindow('flushed', 'default', windowStart, 60_000)).count, 0, 'the kept policy still holds its hits')
    } finally {
      await t.close()
    }
    assert.equal((await store.getWindow('flushed', 'default', windowStart, 60_000)).count, 2, 'shutdown flushed the rest')
  })
})

const TOKEN = 'client-token-123'
const AUTHED = `auth: { tokens: [${TOKEN}] }\n`
const LOGIN = 'policies:\n  login: { use-algo: fixed-window-algo, max-requests: 100 }\n'
const bearer = { authorization: `Bearer ${TOKEN}` }

describe('config files that are not a config', { timeout: 60_000 }, () => {
  for (const [what, text] of [
    ['an empty file', ''],
    ['a file without a store section', 'rate-limiter: { max-requests: 5 }\n'],
  ] as const) {
    it(`serve refuses ${what}`, async () => {
      const dir = mkdtempSync(path.join(tmpdir(), 'rl-service-'))
      const file = path.join(dir, 'ratelimiting.yaml')
      writeFileSync(file, text)
      try {
        await assert.rejects(
          startService({ configPath: file, port: 0, watch: false, defaultMetrics: false, env: {} }),
          (err: unknown) => err instanceof ConfigFileError && /store: is required/.test(err.message),
        )
      } finally {
        rmSync(dir, { recursive: true, force: true })
      }
    })
  }

  it('a reload refuses an empty file, one without store, and one that turns auth off; access stays as it was', async () => {
    const t = await startTestService(`${AUTHED}${LOGIN}store: { type: memory }\n`)
    try {
      for (const text of ['', `${AUTHED}${LOGIN}`, `${LOGIN}store: { type: memory }\n`]) {
        t.write(text)
        assert.equal(await t.service.reload(), false, JSON.stringify(text))
        assert.equal((await check(t.url, { userId: 'anon' })).status, 401, 'auth is still on')
        assert.equal((await check(t.url, { userId: 'u', policy: 'login' }, bearer)).status, 200, 'the named policy is still there')
      }
      const rejections = t.logs.filter((l) => l.msg === 'config reload rejected; the running config stays')
      assert.equal(rejections.length, 3)
      assert.match(JSON.stringify(rejections[0]?.issues), /store: is required/)
      assert.match(JSON.stringify(rejections[2]?.issues), /auth: the new config has no tokens, which would turn auth off/)
      assert.match(await (await fetch(`${t.url}/metrics`)).text(), /ratelimiting_config_reloads_total\{result="failure"\} 3/)
    } finally {
      await t.close()
    }
  })

  it('applies a file written in two chunks, with a pause longer than the debounce, only once it is whole', async () => {
    // The pause (1.5 s) is longer than the quiet period a plain debounce waits for (1 s), which
    // applied the first chunk alone, and shorter than the stable-file rule's 2 x 1 s with 0.5 s
    // to spare for a late timer on a busy machine (timers fire late, never early).
    const t = await startTestService(`${AUTHED}${LOGIN}store: { type: memory }\n`, { watch: true, watchDebounceMs: 1_000 })
    try {
      // requests on the named policy throughout: the first chunk alone has no such policy
      let polling = true
      const statuses: number[] = []
      const poller = (async () => {
        for (let n = 0; polling; n++) {
          statuses.push((await check(t.url, { userId: `poll-${n}`, policy: 'login' }, bearer)).status)
          await delay(10)
        }
      })()
      // the first chunk is a valid config on its own: auth and store, a new default limit
      writeFileSync(t.file, `${AUTHED}store: { type: memory }\nrate-limiter: { max-requests: 7 }\n`)
      await delay(1_500)
      appendFileSync(t.file, LOGIN)
      await until(() => t.service.config().policies.get('default')?.maxRequests === 7, 10_000, 'the whole file to apply')
      polling = false
      await poller
      assert.ok(t.service.config().policies.has('login'), 'the second chunk applied with the first')
      assert.equal(t.logs.filter((l) => l.msg === 'config reloaded').length, 1, 'one reload, of the whole file')
      assert.ok(statuses.length > 20, `requests were sent throughout (${statuses.length})`)
      assert.deepEqual([...new Set(statuses)], [200], 'the named policy never went away')
    } finally {
      await t.close()
    }
  })
})

describe('config reload on Redis', { timeout: 60_000 }, () => {
  let redis: Redis
  let t: TestService
  const prefix = uniquePrefix()
  const yaml = (algo: string) =>
    `rate-limiter: { use-algo: ${algo}, max-requests: 10, window-size: 60, key-prefix: "${prefix}" }\nstore: { type: redis, url: "${SHARED_REDIS_URL}" }\n`
  before(async () => {
    redis = new Redis(SHARED_REDIS_URL)
    t = await startTestService(yaml('sliding-window-algo'))
  })
  after(async () => {
    await t?.close()
    await deleteKeys(redis, prefix)
    redis.disconnect()
  })

  it('switches from the sliding log to the fixed window; the old keys expire by themselves', async () => {
    await check(t.url, { userId: 'switch' })
    assert.equal(await redis.type(`${prefix}:switch`), 'zset')
    t.write(yaml('fixed-window-algo'))
    assert.equal(await t.service.reload(), true)
    const a = await check(t.url, { userId: 'switch' })
    assert.equal(a.body?.count, 1, 'the fixed window starts its own count')
    const keys = await keysUnder(redis, `${prefix}:switch`)
    assert.equal(keys.length, 2)
    const fixedKey = keys.find((k) => k !== `${prefix}:switch`) as string
    assert.equal(await redis.type(fixedKey), 'string')
    const oldTtl = await redis.pttl(`${prefix}:switch`)
    assert.ok(oldTtl > 0 && oldTtl <= 120_000, `the old ZSET keeps its expiry (${oldTtl} ms)`)
  })

  it('moves to another store on reload', async () => {
    t.write(memoryConfig('sliding-window-algo', 10))
    assert.equal(await t.service.reload(), true)
    await check(t.url, { userId: 'moved' })
    assert.equal(await redis.exists(`${prefix}:moved`), 0)
    assert.deepEqual((await call(`${t.url}/readyz`)).body, {
      status: 'ready',
      store: 'memory',
    })
  })
})
