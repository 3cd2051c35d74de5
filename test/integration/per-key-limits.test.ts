/**
 * Per-key limits: a limit given as a function of the key (plans and tiers), and one hit's
 * `{ limit }` override, in every sync mode on MemoryStrategy and on the shared Redis (a unique
 * prefix per run, deleted after). Decisions and headers show the limit applied.
 */
import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import {
  AcquireError,
  createFakeClock,
  type Decision,
  type LimitSpec,
  MemoryStrategy,
  RateLimiting,
  rateLimitHeaders,
  type Strategy,
} from '../../src/index.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { sharedRedisUrl } from '../support/redis-server.js'
import { deleteKeys, uniquePrefix } from './server-helpers.js'

const url = await sharedRedisUrl()
const redis = new Redis(url)
const prefix = uniquePrefix()
after(async () => {
  await deleteKeys(redis, prefix)
  redis.disconnect()
})

const PRO = new Set(['pro-user'])
const plan = (key: string): number => (PRO.has(key) ? 5 : 2)

let run = 0
function setup(storeName: 'memory' | 'redis' | 'none', syncRate: number, limits: LimitSpec[]) {
  run++
  const clock = createFakeClock(Math.ceil(Date.now() / 60_000) * 60_000 + 5_000)
  const strategy: Strategy | undefined =
    storeName === 'none'
      ? undefined
      : storeName === 'memory'
        ? new MemoryStrategy()
        : new RedisStrategy({ client: redis, prefix: `${prefix}:${run}` })
  const rl = RateLimiting.newInstance(`per-key-${run}`)
  rl.new({
    namespace: 'api',
    windowSizes: [1, 60],
    syncRate: strategy === undefined ? -1 : syncRate,
    clock: clock.now,
    autoSync: false,
    ...(strategy === undefined ? {} : { strategy }),
  })
  const limiter = rl.limiter({ namespace: 'api', limits })
  return { rl, limiter, clock }
}

const CELLS = [
  ['none', 'local', -1],
  ['memory', 'periodic', 0.5],
  ['memory', 'synchronous', 0],
  ['redis', 'periodic', 0.5],
  ['redis', 'synchronous', 0],
] as const

for (const [storeName, mode, syncRate] of CELLS) {
  describe(`per-key limits, ${mode}${storeName === 'none' ? '' : ` on ${storeName}`}`, { timeout: 30_000 }, () => {
    it('a function of the key gives each plan its limit, shown in the decision and the headers', async () => {
      const { rl, limiter } = setup(storeName, syncRate, [{ limit: plan, window: 60, name: 'plan' }])
      try {
        const outcomes = async (key: string) => {
          const out: boolean[] = []
          for (let i = 0; i < 6; i++) out.push((await limiter.hit(key)).allowed)
          return out
        }
        assert.deepEqual(await outcomes('free-user'), [true, true, false, false, false, false])
        assert.deepEqual(await outcomes('pro-user'), [true, true, true, true, true, false])
        const pro = await limiter.peek('pro-user')
        assert.equal(pro.limit, 5)
        assert.equal(pro.name, 'plan')
        const free = await limiter.peek('free-user')
        assert.equal(free.limit, 2)
        assert.match(rateLimitHeaders(pro, 'draft-7')['RateLimit-Policy'] ?? '', /^5;w=60$/)
        assert.match(rateLimitHeaders(free, 'draft-7')['RateLimit-Policy'] ?? '', /^2;w=60$/)
      } finally {
        await rl.close()
      }
    })

    it('a hit’s { limit } replaces the limit for that hit only', async () => {
      const { rl, limiter } = setup(storeName, syncRate, [{ limit: 2, window: 60 }])
      try {
        for (let i = 0; i < 3; i++) assert.equal((await limiter.hit('k', 1, { limit: 4 })).allowed, true, `hit ${i} under 4`)
        const d = await limiter.hit('k', 1, { limit: 4 })
        assert.deepEqual([d.allowed, d.limit, d.remaining], [true, 4, 0])
        const plain = await limiter.hit('k')
        assert.deepEqual([plain.allowed, plain.limit], [false, 2], 'the limiter’s own limit again')
        assert.equal((await limiter.peek('k', { limit: 10 })).limit, 10)
      } finally {
        await rl.close()
      }
    })

    it('with several limits, each may be a function; the most restrictive decides', async () => {
      const { rl, limiter } = setup(storeName, syncRate, [
        { limit: (key) => (PRO.has(key) ? 3 : 1), window: 1 },
        { limit: 100, window: 60 },
      ])
      try {
        assert.deepEqual(
          [(await limiter.hit('pro-user')).allowed, (await limiter.hit('pro-user')).allowed, (await limiter.hit('pro-user')).allowed],
          [true, true, true],
        )
        const d: Decision = await limiter.hit('pro-user')
        assert.equal(d.allowed, false)
        assert.deepEqual(
          d.policies?.map((p) => p.limit),
          [3, 100],
        )
        assert.equal((await limiter.hit('free-user')).allowed, true)
        assert.equal((await limiter.hit('free-user')).allowed, false)
      } finally {
        await rl.close()
      }
    })
  })
}

describe('per-key limits: what is refused and what the other features see', () => {
  it('a function answering no positive number is an error naming the limit and the key; nothing is counted', async () => {
    const { rl, limiter } = setup('none', -1, [{ limit: (key) => (key === 'bad' ? 0 : Number(key.length)), window: 60 }])
    assert.throws(() => limiter.hit('bad'), /limits\[0\]\.limit\("bad"\) must return a positive number, got 0/)
    assert.equal(limiter.counts('bad')[0]?.current, 0)
    assert.throws(() => rl.limiter({ namespace: 'api', limits: [{ limit: 'x' as never, window: 60 }] }), /positive number or a function/)
    await rl.close()
  })

  it('an override must be a positive number, and needs a limiter with one limit', async () => {
    const one = setup('none', -1, [{ limit: 2, window: 60 }])
    assert.throws(() => one.limiter.hit('k', 1, { limit: -1 }), /hit option limit must be a positive number, got -1/)
    assert.throws(() => one.limiter.hit('k', 1, null as never), /hit options must be an object/)
    const two = setup('none', -1, [
      { limit: 2, window: 1 },
      { limit: 5, window: 60 },
    ])
    assert.throws(() => two.limiter.hit('k', 1, { limit: 3 }), /needs a limiter with one limit \(this one has 2\)/)
    await one.rl.close()
    await two.rl.close()
  })

  it('acquire holds a cost above the key’s own limit as never admissible; lists report the key’s limit', async () => {
    const { rl } = setup('none', -1, [{ limit: 1, window: 60 }])
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: plan, window: 60 }], allowList: ['pro-user'] })
    await assert.rejects(limiter.acquire('free-user', 3), (err: unknown) => err instanceof AcquireError && err.code === 'NEVER_ALLOWED')
    const d = await limiter.acquire('free-user', 2)
    assert.equal(d.limit, 2)
    const listed = limiter.hit('pro-user') as Decision
    assert.deepEqual([listed.reason, listed.limit, listed.remaining], ['allowlist', 5, 5])
    await rl.close()
  })
})

describe('examples/per-key-limits.ts', () => {
  it('runs as documented: each plan its limit, a hit carrying its own', async () => {
    const { execFile } = await import('node:child_process')
    const { promisify } = await import('node:util')
    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'examples/per-key-limits.ts'], { timeout: 30_000 })
    const lines = stdout.trim().split('\n')
    assert.deepEqual(lines.slice(0, 4), [
      'bob: allowed limit=3 remaining=2',
      'bob: allowed limit=3 remaining=1',
      'bob: allowed limit=3 remaining=0',
      'bob: denied limit=3 remaining=0',
    ])
    assert.equal(lines[7], 'alice: allowed limit=10 remaining=6')
    assert.deepEqual(lines.slice(8, 10), [
      'carol (token says 1): allowed limit=1 remaining=0',
      'carol (token says 1): denied limit=1 remaining=0',
    ])
    assert.equal(lines[10], 'alice\'s headers: "plan";q=10;w=60')
  })
})
