/**
 * `limiter.refund()` in every sync mode, on MemoryStrategy and on the shared Redis (a unique
 * prefix per run, deleted after): a refunded hit is taken back here and in the store, in the
 * window that counted it, never below zero, and another process sees it after its next sync.
 */
import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { createFakeClock, type Decision, type Limiter, MemoryStrategy, RateLimiting, type Strategy } from '../../src/index.js'
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

const MODES = [
  ['synchronous', 0],
  ['periodic', 0.5],
] as const

let run = 0
function setup(storeName: 'memory' | 'redis', syncRate: number, opts: { onStoreError?: 'deny' } = {}) {
  run++
  // near the real time: Redis expires windows by it; 5 s into a minute
  const clock = createFakeClock(Math.ceil(Date.now() / 60_000) * 60_000 + 5_000)
  const strategy: Strategy & Partial<Pick<MemoryStrategy, 'down' | 'up'>> =
    storeName === 'memory' ? new MemoryStrategy() : new RedisStrategy({ client: redis, prefix: `${prefix}:${run}` })
  const make = (i: number) => {
    const rl = RateLimiting.newInstance(`refund-${run}-${i}`)
    rl.new({
      namespace: 'api',
      windowSizes: [60],
      syncRate,
      strategy,
      clock: clock.now,
      autoSync: false,
      onError: () => {},
      ...(opts.onStoreError === undefined ? {} : { onStoreError: opts.onStoreError }),
    })
    return { rl, limiter: rl.limiter({ namespace: 'api', limits: [{ limit: 5, window: 60 }] }) }
  }
  const a = make(0)
  const b = make(1)
  const stored = async (atMs = clock.now()) => {
    const start = Math.floor(atMs / 60_000) * 60_000
    return (await (strategy.getWindow as NonNullable<Strategy['getWindow']>).call(strategy, 'k', 'api', start, 60_000)).count
  }
  const close = async () => {
    await a.rl.close()
    await b.rl.close()
  }
  return { clock, strategy, a, b, stored, close }
}

const hit = async (limiter: Limiter, key = 'k'): Promise<Decision> => await limiter.hit(key)

for (const storeName of ['memory', 'redis'] as const) {
  for (const [mode, syncRate] of MODES) {
    describe(`refund on ${storeName}, ${mode}`, { timeout: 30_000 }, () => {
      it('gives the hit back here, in the store, and to another process after its sync', async () => {
        const { a, b, stored, close } = setup(storeName, syncRate)
        try {
          for (let i = 0; i < 5; i++) assert.equal((await hit(a.limiter)).allowed, true)
          assert.equal((await hit(a.limiter)).allowed, false, 'the 6th is over the limit')
          await a.rl.sync('api')
          const counted = await stored()
          await b.rl.fetch('api')
          assert.equal((await b.limiter.peek('k')).rate, counted, 'the other process sees the hits')
          await a.limiter.refund('k', 2)
          if (syncRate === 0) assert.equal(await stored(), counted - 2, 'synchronous: stored once refund() resolves')
          await a.rl.sync('api')
          assert.equal(await stored(), counted - 2, 'the store holds two fewer')
          await b.rl.sync('api')
          const seen = await b.limiter.peek('k')
          assert.equal(seen.rate, counted - 2, 'the other process sees the refund')
          assert.equal((await hit(a.limiter)).allowed, true, 'the refund makes room')
        } finally {
          await close()
        }
      })

      it('never takes a count below zero, and takes back only what this process counted', async () => {
        const { a, b, stored, close } = setup(storeName, syncRate)
        try {
          await hit(a.limiter)
          await hit(b.limiter)
          await a.rl.sync('api')
          await b.rl.sync('api')
          await a.limiter.refund('k', 10)
          await a.rl.sync('api')
          assert.equal(await stored(), 1, "b's hit stays")
          assert.deepEqual(a.limiter.counts('k')[0]?.current, 1)
        } finally {
          await close()
        }
      })

      it('takes back only hits counted since a reset: the reset already gave the earlier ones back', async () => {
        const { a, b, clock, stored, close } = setup(storeName, syncRate)
        try {
          const before = clock.now()
          for (let i = 0; i < 5; i++) await hit(a.limiter)
          await a.limiter.reset('k')
          clock.advance(1_000)
          for (let i = 0; i < 5; i++) await a.limiter.refund('k', 1, { at: before })
          await a.rl.sync('api')
          assert.equal(await stored(), 0, 'nothing below zero after the reset')
          const since = clock.now()
          await hit(a.limiter)
          await hit(a.limiter)
          await a.limiter.refund('k', 1, { at: since })
          await a.rl.sync('api')
          assert.equal(await stored(), 1, 'a hit counted after the reset is taken back')
          await b.rl.sync('api')
          let admitted = 0
          for (let i = 0; i < 10; i++) {
            if ((await hit(b.limiter)).allowed) admitted++
            await b.rl.sync('api')
          }
          assert.equal(admitted, 4, 'the limit of 5 holds: 1 counted, 4 more')
        } finally {
          await close()
        }
      })

      it('goes to the window that counted the hit (at), and not to a window that no longer weighs', async () => {
        const { a, clock, stored, close } = setup(storeName, syncRate)
        try {
          const at = clock.now()
          for (let i = 0; i < 4; i++) await hit(a.limiter)
          await a.rl.sync('api')
          clock.advance(60_000) // the next window: the hits are in the previous one
          await a.limiter.refund('k', 1, { at })
          await a.rl.sync('api')
          assert.equal(await stored(at), 3, 'taken from the previous window')
          assert.equal(await stored(), 0, 'the current window is untouched')
          clock.advance(60_000) // two windows later: it weighs nothing, nothing to take back
          await a.limiter.refund('k', 1, { at })
          await a.rl.sync('api')
          assert.equal(await stored(at), 3)
        } finally {
          await close()
        }
      })
    })
  }
}

describe('refund', () => {
  it('in a local namespace, and with several limits, takes the hit back from each', async () => {
    const rl = RateLimiting.newInstance('refund-local')
    rl.new({ namespace: 'api', windowSizes: [1, 60], clock: createFakeClock(1_700_000_000_000).now })
    const limiter = rl.limiter({
      namespace: 'api',
      limits: [
        { limit: 2, window: 1 },
        { limit: 10, window: 60 },
      ],
    })
    limiter.hit('k')
    limiter.hit('k')
    assert.equal((limiter.hit('k') as Decision).allowed, false)
    await limiter.refund('k')
    assert.deepEqual(
      limiter.counts('k').map((c) => c.current),
      [2, 2],
      'the denied hit counted (countDenied) and one refunded: 3 - 1 in both windows',
    )
    await rl.close()
  })

  it('in a synchronous namespace, a refund sent while the store is down is pushed by the next sync', async () => {
    const { a, strategy, stored, close } = setup('memory', 0, { onStoreError: 'deny' })
    const store = strategy as MemoryStrategy
    try {
      await hit(a.limiter)
      await hit(a.limiter)
      store.down()
      await a.limiter.refund('k') // resolves: the refund stays here and is retried
      store.up()
      await a.rl.sync('api')
      assert.equal(await stored(), 1)
    } finally {
      await close()
    }
  })

  it('does nothing for a listed key, and refuses bad input by name', async () => {
    const rl = RateLimiting.newInstance('refund-input')
    rl.new({ namespace: 'api', windowSizes: [60] })
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 2, window: 60 }], allowList: ['vip'] })
    limiter.hit('vip')
    await limiter.refund('vip')
    assert.equal(limiter.counts('vip')[0]?.current, 0)
    assert.throws(() => limiter.refund('k', -1), /refund cost must be >= 0, got -1/)
    assert.throws(() => limiter.refund('k', Number.NaN), /value must be finite/)
    assert.throws(() => limiter.refund('k', 1, { at: Number.NaN }), /refund option at must be finite epoch ms, got NaN/)
    assert.throws(() => limiter.refund(42 as never), TypeError)
    await rl.close()
  })
})
