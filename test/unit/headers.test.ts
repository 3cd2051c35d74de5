import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { describe, it } from 'node:test'
import { createFakeClock, type Decision, partitionKeyParam, RateLimiting, rateLimitHeaders } from '../../src/index.js'

const MINUTE = 1_699_999_980_000

function decisions() {
  const clock = createFakeClock(MINUTE + 15_300) // 44.7 s left in the minute
  const rl = RateLimiting.newInstance('headers')
  rl.new({ namespace: 'api', windowSizes: [1, 60], clock: clock.now })
  const one = rl.limiter({ namespace: 'api', limits: [{ limit: 3, window: 60 }] })
  const two = rl.limiter({
    namespace: 'api',
    limits: [
      { limit: 10, window: 1, name: 'burst' },
      { limit: 100, window: 60, name: 'minute' },
    ],
  })
  return { clock, one, two }
}

describe('rateLimitHeaders', () => {
  it('writes draft-8/10 RateLimit and RateLimit-Policy as structured field lists', () => {
    const { one } = decisions()
    const d = one.hit('k') as Decision
    assert.deepEqual(rateLimitHeaders(d, 'draft-8'), {
      'RateLimit-Policy': '"3-in-60s";q=3;w=60',
      RateLimit: '"3-in-60s";r=2;t=45',
    })
    assert.deepEqual(rateLimitHeaders(d, 'draft-10'), rateLimitHeaders(d, 'draft-8'))
  })

  it('lists every limit in draft-8 and adds the partition key as express-rate-limit does', () => {
    const { two } = decisions()
    const d = two.hit('k') as Decision
    const pk = partitionKeyParam('k')
    assert.equal(pk, Buffer.from(createHash('sha256').update('k').digest('hex').slice(0, 12)).toString('base64'))
    assert.deepEqual(rateLimitHeaders(d, 'draft-8', { partitionKey: 'k' }), {
      'RateLimit-Policy': `"burst";q=10;w=1;pk=:${pk}:, "minute";q=100;w=60;pk=:${pk}:`,
      RateLimit: '"burst";r=9;t=1, "minute";r=99;t=45',
    })
  })

  it('writes draft-7 and draft-6 the way express-rate-limit does', () => {
    const { one } = decisions()
    const d = one.hit('k') as Decision
    assert.deepEqual(rateLimitHeaders(d, 'draft-7'), { 'RateLimit-Policy': '3;w=60', RateLimit: 'limit=3, remaining=2, reset=45' })
    assert.deepEqual(rateLimitHeaders(d, 'draft-6'), {
      'RateLimit-Policy': '3;w=60',
      'RateLimit-Limit': '3',
      'RateLimit-Remaining': '2',
      'RateLimit-Reset': '45',
    })
  })

  it("writes Kong's per-window X-RateLimit headers and the most restrictive trio", () => {
    const { two } = decisions()
    const d = two.hit('k', 5) as Decision
    assert.deepEqual(rateLimitHeaders(d, 'kong'), {
      'X-RateLimit-Limit-Second': '10',
      'X-RateLimit-Remaining-Second': '5',
      'X-RateLimit-Limit-Minute': '100',
      'X-RateLimit-Remaining-Minute': '95',
      'RateLimit-Limit': '10',
      'RateLimit-Remaining': '5',
      'RateLimit-Reset': '1',
    })
  })

  it('adds Retry-After in whole seconds when denied, never earlier than t', () => {
    const { one } = decisions()
    for (let i = 0; i < 3; i++) one.hit('k')
    const d = one.hit('k') as Decision
    assert.equal(d.allowed, false)
    const h = rateLimitHeaders(d, 'draft-8')
    const retry = Math.ceil(d.retryAfterMs / 1000)
    assert.equal(h['Retry-After'], String(retry))
    assert.equal(h.RateLimit, `"3-in-60s";r=0;t=${retry}`)
    assert.equal(rateLimitHeaders(d, 'draft-6')['Retry-After'], String(retry))
  })

  it('keeps t equal to Retry-After when a denial clears before the window ends', () => {
    const clock = createFakeClock(MINUTE + 50_000)
    const rl = RateLimiting.newInstance('early')
    rl.new({ windowSizes: [60], clock: clock.now })
    const limiter = rl.limiter({ limits: [{ limit: 10, window: 60 }], countDenied: false })
    for (let i = 0; i < 10; i++) limiter.hit('k')
    clock.set(MINUTE + 60_000 + 2_000) // previous 10 at weight 58/60: quota returns ~8 s in
    const d = limiter.hit('k') as Decision
    assert.equal(d.allowed, false)
    assert.ok(d.retryAfterMs < d.resetMs)
    const h = rateLimitHeaders(d, 'draft-8')
    const retry = String(Math.ceil(d.retryAfterMs / 1000))
    assert.equal(h['Retry-After'], retry)
    assert.equal(h.RateLimit, `"10-in-60s";r=0;t=${retry}`)
  })

  it('when denied, gives each limit its own t: the wait of those that hold the hit back, the reset of one with room', () => {
    // 2 a second and 100 a minute, 13 s into the minute: the 3rd hit is denied by the second's
    const clock = createFakeClock(MINUTE + 13_000)
    const rl = RateLimiting.newInstance('headers-denied')
    rl.new({ windowSizes: [1, 60], clock: clock.now })
    const limiter = rl.limiter({
      limits: [
        { limit: 2, window: 1, name: 'second' },
        { limit: 100, window: 60, name: 'minute' },
      ],
    })
    limiter.hit('k')
    limiter.hit('k')
    const d = limiter.hit('k') as Decision
    assert.equal(d.allowed, false)
    assert.equal(rateLimitHeaders(d, 'draft-8').RateLimit, '"second";r=0;t=2, "minute";r=97;t=47')
  })

  it('escapes policy names as structured field strings', () => {
    const clock = createFakeClock(MINUTE)
    const rl = RateLimiting.newInstance('names')
    rl.new({ windowSizes: [60], clock: clock.now })
    const d = rl.limiter({ limits: [{ limit: 1, window: 60, name: 'say "hi"\\' }] }).hit('k') as Decision
    assert.equal(rateLimitHeaders(d).RateLimit, '"say \\"hi\\"\\\\";r=0;t=60')
  })

  it('writes w in whole seconds for windows that are not (a 1.5 s window is w=2, 50 ms is w=1)', () => {
    const rl = RateLimiting.newInstance('headers-ms')
    rl.new({ windowSizes: [1.5, 0.05] })
    const d = rl
      .limiter({
        limits: [
          { limit: 5, window: 1.5, name: 'slow' },
          { limit: 2, window: 0.05, name: 'fast' },
        ],
      })
      .hit('k') as Decision
    assert.equal(rateLimitHeaders(d, 'draft-8')['RateLimit-Policy'], '"slow";q=5;w=2, "fast";q=2;w=1')
    assert.equal(rateLimitHeaders(d, 'draft-7')['RateLimit-Policy'], '5;w=2, 2;w=1')
  })

  it('refuses an unknown mode', () => {
    const { one } = decisions()
    assert.throws(() => rateLimitHeaders(one.hit('k') as Decision, 'draft-99' as never), /header mode must be/)
  })
})
