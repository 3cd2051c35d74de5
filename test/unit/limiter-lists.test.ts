import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ConfigError, createFakeClock, type Decision, type LimiterOptions, MemoryStrategy, RateLimiting } from '../../src/index.js'

const MINUTE = 1_699_999_980_000

type Mode = 'local' | 'periodic' | 'synchronous'
const SYNC_RATES: Record<Mode, number> = { local: -1, periodic: 0.1, synchronous: 0 }

function setup(mode: Mode, lists: Pick<LimiterOptions, 'denyList' | 'allowList'>, limits = [{ limit: 2, window: 60 }]) {
  const clock = createFakeClock(MINUTE)
  const store = new MemoryStrategy()
  const rl = RateLimiting.newInstance(`lists-${mode}`)
  rl.new({
    namespace: 'api',
    windowSizes: [1, 60],
    clock: clock.now,
    syncRate: SYNC_RATES[mode],
    autoSync: false,
    ...(mode === 'local' ? {} : { strategy: store }),
  })
  const limiter = rl.limiter({ namespace: 'api', limits, ...lists })
  const hit = async (key: string, cost = 1): Promise<Decision> => await limiter.hit(key, cost)
  return { clock, rl, store, limiter, hit }
}

const LISTS = {
  denyList: ['bad-key', '10.0.0.0/8', '2001:db8::/32', '192.0.2.7'],
  allowList: ['good-key', '10.1.0.0/16', '192.168.0.0/16', '2001:db8:1::/48', '2606:4700::/32', 'fd00::1'],
}

for (const mode of ['local', 'periodic', 'synchronous'] as const) {
  describe(`deny and allow lists, ${mode} mode`, () => {
    it('denies a deny-listed key with reason denylist, remaining 0 and retryAfterMs Infinity, counting nothing', async () => {
      const { hit, limiter, store } = setup(mode, LISTS)
      for (const key of ['bad-key', '10.9.9.9', '2001:db8:ffff::1', '192.0.2.7', '::ffff:10.2.3.4']) {
        const d = await hit(key)
        assert.equal(d.allowed, false, key)
        assert.equal(d.reason, 'denylist', key)
        assert.equal(d.remaining, 0, key)
        assert.equal(d.rate, 0, key)
        assert.equal(d.retryAfterMs, Number.POSITIVE_INFINITY, key)
        assert.deepEqual(
          limiter.counts(key).map((c) => [c.current, c.previous]),
          [[0, 0]],
          `${key} counted nothing`,
        )
      }
      assert.equal(store.calls.pushDiffs + store.calls.getWindow + store.calls.getCounters, 0, 'no store call')
    })

    it('allows an allow-listed key beyond the limit with reason allowlist and remaining the whole limit, counting nothing', async () => {
      const { hit, limiter, store } = setup(mode, LISTS)
      for (const key of ['good-key', '192.168.4.4', '2606:4700:0:1::9', 'fd00:0:0::1', '::ffff:192.168.1.1']) {
        for (let i = 0; i < 5; i++) {
          const d = await hit(key)
          assert.deepEqual([d.allowed, d.reason, d.remaining, d.rate, d.retryAfterMs], [true, 'allowlist', 2, 0, 0], key)
        }
        assert.deepEqual(
          limiter.counts(key).map((c) => c.current),
          [0],
          key,
        )
      }
      assert.equal(store.calls.pushDiffs + store.calls.getWindow + store.calls.getCounters, 0, 'no store call')
    })

    it('lets deny win when both lists match (10.1.0.0/16 is allowed, inside the denied 10.0.0.0/8)', async () => {
      const { hit } = setup(mode, LISTS)
      assert.equal((await hit('10.1.2.3')).reason, 'denylist')
      const both = setup(mode, { denyList: ['k'], allowList: ['k'] })
      assert.equal((await both.hit('k')).reason, 'denylist')
    })

    it('decides an unlisted key by the limit, reason limit, allowed or not', async () => {
      const { hit } = setup(mode, LISTS)
      const a = await hit('11.0.0.1')
      const b = await hit('11.0.0.1')
      const c = await hit('11.0.0.1')
      assert.deepEqual(
        [a, b, c].map((d) => [d.allowed, d.reason]),
        [
          [true, 'limit'],
          [true, 'limit'],
          [false, 'limit'],
        ],
      )
    })

    it('answers peek and allow() as hit does for listed keys', async () => {
      const { limiter } = setup(mode, LISTS)
      const p = await limiter.peek('bad-key')
      assert.deepEqual([p.allowed, p.reason], [false, 'denylist'])
      assert.equal((await limiter.peek('good-key')).reason, 'allowlist')
      assert.equal(await limiter.allow('bad-key'), false)
      for (let i = 0; i < 4; i++) assert.equal(await limiter.allow('good-key'), true)
      assert.equal((await limiter.peek('nobody')).reason, 'limit')
    })
  })
}

describe('deny and allow lists: shape and validation', () => {
  it('gives every limit of a several-limit limiter in policies, the deciding one first-class', async () => {
    const { hit } = setup('local', LISTS, [
      { limit: 5, window: 1 },
      { limit: 100, window: 60 },
    ])
    const allowed = await hit('good-key')
    assert.equal(allowed.limit, 5, 'fewest hits left decides')
    assert.equal(allowed.remaining, 5)
    assert.deepEqual(
      allowed.policies?.map((s) => s.remaining),
      [5, 100],
    )
    const denied = await hit('bad-key')
    assert.equal(denied.window, 60, 'all deny for ever: the larger window decides')
    assert.ok(denied.policies?.every((s) => s.retryAfterMs === Number.POSITIVE_INFINITY))
  })

  it('sets reason limit on the one-limit and several-limit paths and store-error when the store decided', async () => {
    assert.equal((await setup('local', {}).hit('k')).reason, 'limit')
    const several = setup('local', {}, [
      { limit: 5, window: 1 },
      { limit: 100, window: 60 },
    ])
    assert.equal((await several.hit('k')).reason, 'limit')
    const clock = createFakeClock(MINUTE)
    const store = new MemoryStrategy()
    const rl = RateLimiting.newInstance('lists-store-error')
    rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0, strategy: store, clock: clock.now, onStoreError: 'deny', onError: () => {} })
    const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 2, window: 60 }], denyList: ['bad'] })
    store.down()
    const d = await limiter.hit('k')
    assert.deepEqual([d.allowed, d.reason], [false, 'store-error'])
    assert.equal((await limiter.hit('bad')).reason, 'denylist', 'a listed key needs no store')
  })

  it('makes no list check at all when the lists are empty', async () => {
    const { hit } = setup('local', { denyList: [], allowList: [] })
    assert.equal((await hit('anything')).reason, 'limit')
  })

  it('takes an entry with a slash whose left side is no IP address as an exact key', async () => {
    const { hit } = setup('local', { denyList: ['tenant/42'] })
    assert.equal((await hit('tenant/42')).reason, 'denylist')
    assert.equal((await hit('tenant/4')).reason, 'limit')
  })

  it('rejects a malformed CIDR range with a ConfigError naming the option, the index and the entry', () => {
    const cases: Array<[LimiterOptions['denyList'], LimiterOptions['allowList'], RegExp]> = [
      [['ok', '10.0.0.0/33'], undefined, /denyList\[1\] "10\.0\.0\.0\/33": the prefix length must be a whole number from 0 to 32/],
      [undefined, ['2001:db8::/129'], /allowList\[0\] "2001:db8::\/129": .*0 to 128/],
      [['300.1.2.3/8'], undefined, /denyList\[0\] "300\.1\.2\.3\/8": "300\.1\.2\.3" is not a valid IPv4 or IPv6 address/],
      [['10.0.0/8'], undefined, /denyList\[0\] "10\.0\.0\/8"/],
      [['10.0.0.0/x'], undefined, /denyList\[0\] .*prefix length/],
      [[''], undefined, /denyList\[0\] "": must be a non-empty string/],
      [[42 as unknown as string], undefined, /denyList\[0\] 42: must be a non-empty string/],
      ['10.0.0.0/8' as unknown as string[], undefined, /denyList must be an array/],
    ]
    for (const [denyList, allowList, message] of cases) {
      const rl = RateLimiting.newInstance('lists-bad')
      rl.new({ namespace: 'api', windowSizes: [60] })
      assert.throws(
        () =>
          rl.limiter({
            namespace: 'api',
            limits: [{ limit: 1, window: 60 }],
            ...(denyList === undefined ? {} : { denyList }),
            ...(allowList === undefined ? {} : { allowList }),
          }),
        (err: unknown) => err instanceof ConfigError && err.code === 'INVALID_OPTION' && message.test(err.message),
        String(message),
      )
    }
  })
})
