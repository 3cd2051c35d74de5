import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { MemoryFixedWindow } from '../../src/algorithms/index.js'
import { createFakeClock } from '../../src/core/clock.js'
import { ConfigError } from '../../src/core/errors.js'

// 2023-11-14T22:13:00Z: a multiple of 60 s, so bucket boundaries are easy to read
const MINUTE = 1_699_999_980_000

function make(limit = 3, windowMs = 60_000, extra: Partial<ConstructorParameters<typeof MemoryFixedWindow>[0]> = {}) {
  const clock = createFakeClock(MINUTE)
  return {
    clock,
    fw: new MemoryFixedWindow({ limit, windowMs, clock: clock.now, ...extra }),
  }
}

describe('MemoryFixedWindow', () => {
  it('admits the limit inside one bucket and denies the next request', () => {
    const { clock, fw } = make(3)
    const answers = [fw.check('u1'), fw.check('u1'), fw.check('u1')]
    assert.deepEqual(
      answers.map((a) => [a.allowed, a.count, a.remaining]),
      [
        [true, 1, 2],
        [true, 2, 1],
        [true, 3, 0],
      ],
    )
    clock.advance(20_000)
    const denied = fw.check('u1')
    assert.equal(denied.allowed, false)
    assert.equal(denied.remaining, 0)
    assert.equal(denied.retryAfterMs, 40_000, 'retry when the bucket ends')
    assert.equal(denied.resetMs, 40_000)
  })

  it('counts denied requests, as the seed INCR does', () => {
    const { fw } = make(1)
    fw.check('u1')
    assert.equal(fw.check('u1').count, 2)
    assert.equal(fw.check('u1').count, 3)
  })

  it('does not count denied requests with countDenied false', () => {
    const { fw } = make(1, 60_000, { countDenied: false })
    fw.check('u1')
    const denied = fw.check('u1')
    assert.equal(denied.allowed, false)
    assert.equal(denied.count, 1)
  })

  it('starts a new count when the epoch-aligned bucket ends', () => {
    const { clock, fw } = make(2)
    fw.check('u1')
    fw.check('u1')
    clock.advance(59_999)
    assert.equal(fw.check('u1').allowed, false, 'last ms of the bucket')
    clock.advance(1)
    const next = fw.check('u1')
    assert.equal(next.allowed, true)
    assert.equal(next.count, 1)
    assert.equal(next.resetMs, 60_000)
  })

  it('admits twice the limit across a bucket boundary (the known trade-off)', () => {
    const { clock, fw } = make(5)
    clock.advance(59_900)
    let admitted = 0
    for (let i = 0; i < 5; i++) if (fw.check('u1').allowed) admitted++
    clock.advance(200) // 200 ms later, in the next bucket
    for (let i = 0; i < 5; i++) if (fw.check('u1').allowed) admitted++
    assert.equal(admitted, 10)
  })

  it('loses no count when the clock steps back across a bucket boundary and forward again', () => {
    // an NTP step, or a clock injected by a test: another user's request 11 ms back, in the
    // bucket before, must not empty the later bucket
    const { clock, fw } = make(5)
    let admitted = 0
    for (let round = 0; round < 4; round++) {
      clock.set(MINUTE + 10)
      for (let i = 0; i < 5; i++) if (fw.check('u1').allowed) admitted++
      clock.set(MINUTE - 1)
      fw.check('other')
    }
    assert.equal(admitted, 5, 'one bucket admits the limit')
  })

  it('counts a request the clock puts in the bucket before in that bucket, as Redis keys it', () => {
    const { clock, fw } = make(3)
    clock.set(MINUTE - 1_000)
    fw.check('u1')
    fw.check('u1')
    clock.set(MINUTE + 1_000)
    fw.check('u1')
    clock.set(MINUTE - 500)
    const back = fw.check('u1')
    assert.deepEqual([back.allowed, back.count, back.resetMs], [true, 3, 500])
    assert.equal(fw.check('u1').allowed, false, 'the bucket before holds its 3')
    clock.set(MINUTE + 2_000)
    assert.deepEqual([fw.peek('u1').count, fw.check('u1').count], [1, 2], 'the later bucket kept its own')
  })

  it('counts a cost as that many requests and never admits a cost above the limit', () => {
    const { fw } = make(10)
    assert.equal(fw.check('u1', 7).remaining, 3)
    const tooMuch = fw.check('u1', 4)
    assert.equal(tooMuch.allowed, false)
    const never = make(10).fw.check('u2', 11)
    assert.equal(never.allowed, false)
    assert.equal(never.retryAfterMs, Number.POSITIVE_INFINITY)
  })

  it('keeps users apart', () => {
    const { fw } = make(1)
    assert.equal(fw.check('a').allowed, true)
    assert.equal(fw.check('b').allowed, true)
    assert.equal(fw.check('a').allowed, false)
  })

  it('peeks without counting', () => {
    const { fw } = make(2)
    fw.check('u1')
    const p = fw.peek('u1')
    assert.deepEqual([p.allowed, p.count, p.remaining], [true, 1, 1])
    assert.equal(fw.peek('u1').count, 1)
    fw.check('u1')
    assert.equal(fw.peek('u1').allowed, false)
  })

  it('forgets a user on reset', () => {
    const { fw } = make(1)
    fw.check('u1')
    fw.reset('u1')
    assert.equal(fw.check('u1').allowed, true)
  })

  it('shares its counters with a sibling made by withLimit', () => {
    const { fw } = make(2)
    fw.check('u1')
    fw.check('u1')
    const raised = fw.withLimit(3)
    const r = raised.check('u1')
    assert.deepEqual([r.allowed, r.count, r.limit], [true, 3, 3])
  })

  it('keeps the bucket before the current one and drops every counter of an older one at once', () => {
    const { clock, fw } = make(5)
    for (let i = 0; i < 100; i++) fw.check(`user-${i}`)
    assert.equal(fw.size, 100)
    clock.advance(60_000)
    fw.check('late')
    assert.equal(fw.size, 101, 'the bucket before, for a clock that steps back')
    clock.advance(60_000)
    fw.check('later')
    assert.equal(fw.size, 2, 'late and later: the first bucket was dropped whole')
  })

  it('holds at most maxKeys users in both buckets, forgetting the bucket before first', () => {
    const { clock, fw } = make(5, 60_000, { maxKeys: 3 })
    fw.check('a')
    fw.check('b')
    clock.advance(60_000)
    fw.check('c')
    fw.check('d') // evicts a, from the bucket before
    assert.equal(fw.size, 3)
    clock.set(MINUTE)
    assert.deepEqual([fw.peek('a').count, fw.peek('b').count], [0, 1])
    clock.set(MINUTE + 60_000)
    fw.check('e') // evicts b
    fw.check('f') // the bucket before is empty: evicts c
    assert.deepEqual(
      ['c', 'd', 'e', 'f'].map((id) => fw.peek(id).count),
      [0, 1, 1, 1],
    )
  })

  it('holds at most maxKeys users, forgetting the one stored longest ago', () => {
    const { fw } = make(1, 60_000, { maxKeys: 2 })
    fw.check('a')
    fw.check('b')
    fw.check('c')
    assert.equal(fw.size, 2)
    assert.equal(fw.peek('a').count, 0)
    assert.equal(fw.peek('c').count, 1)
  })

  it('refuses bad options with a ConfigError naming the option', () => {
    assert.throws(
      () => new MemoryFixedWindow({ limit: 0, windowMs: 1000 }),
      (e: unknown) => e instanceof ConfigError && /limit/.test(e.message),
    )
    assert.throws(() => new MemoryFixedWindow({ limit: 1, windowMs: 1.5 }), /windowMs must be a positive integer, got 1.5/)
    assert.throws(() => new MemoryFixedWindow({ limit: 1, windowMs: 1000, maxKeys: 0 }), /maxKeys/)
  })

  it('refuses a bad user id or cost per request', () => {
    const { fw } = make(1)
    assert.throws(() => fw.check(42 as unknown as string), TypeError)
    assert.throws(() => fw.check('u1', 0), RangeError)
    assert.throws(() => fw.check('u1', 1.5), RangeError)
    assert.equal(fw.peek('u1').count, 0, 'a refused request counts nothing')
  })
})
