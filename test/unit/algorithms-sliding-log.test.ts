import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { MemorySlidingLog } from '../../src/algorithms/index.js'
import { createFakeClock } from '../../src/core/clock.js'

const MINUTE = 1_699_999_980_000

function make(limit = 3, windowMs = 60_000, maxKeys?: number) {
  const clock = createFakeClock(MINUTE)
  return {
    clock,
    log: new MemorySlidingLog({
      limit,
      windowMs,
      clock: clock.now,
      ...(maxKeys ? { maxKeys } : {}),
    }),
  }
}

describe('MemorySlidingLog', () => {
  it('admits while fewer than limit requests are logged (the seed count < limit)', () => {
    const { log } = make(3)
    const answers = [log.check('u1'), log.check('u1'), log.check('u1'), log.check('u1')]
    assert.deepEqual(
      answers.map((a) => [a.allowed, a.count, a.remaining]),
      [
        [true, 1, 2],
        [true, 2, 1],
        [true, 3, 0],
        [false, 3, 0],
      ],
    )
  })

  it('does not log denied requests', () => {
    const { log } = make(1)
    log.check('u1')
    for (let i = 0; i < 5; i++) log.check('u1')
    assert.equal(log.peek('u1').count, 1)
  })

  it('prevents the boundary burst a fixed window allows', () => {
    const { clock, log } = make(5)
    clock.advance(59_900)
    let admitted = 0
    for (let i = 0; i < 5; i++) if (log.check('u1').allowed) admitted++
    clock.advance(200)
    for (let i = 0; i < 5; i++) if (log.check('u1').allowed) admitted++
    assert.equal(admitted, 5)
  })

  it('frees a slot exactly one window after the request that took it', () => {
    const { clock, log } = make(2, 10_000)
    log.check('u1') // t0
    clock.advance(4_000)
    log.check('u1') // t0 + 4 s
    clock.advance(5_999) // t0 + 9.999 s
    const denied = log.check('u1')
    assert.equal(denied.allowed, false)
    assert.equal(denied.retryAfterMs, 1, 'the oldest entry leaves at t0 + 10 s')
    clock.advance(1) // t0 + 10 s: the seed prunes score <= now - window
    assert.equal(log.check('u1').allowed, true)
  })

  it('gives the exact wait for a cost: the cost-th oldest entry must leave', () => {
    const { clock, log } = make(3, 10_000)
    log.check('u1') // t0
    clock.advance(1_000)
    log.check('u1') // t0 + 1 s
    clock.advance(1_000)
    log.check('u1') // t0 + 2 s
    const two = log.check('u1', 2)
    assert.equal(two.allowed, false)
    assert.equal(two.retryAfterMs, 9_000, 'the second oldest (t0 + 1 s) leaves at t0 + 11 s, 9 s from now')
    clock.advance(9_000)
    assert.equal(log.check('u1', 2).allowed, true)
  })

  it('never admits a cost above the limit', () => {
    const { log } = make(3)
    const r = log.check('u1', 4)
    assert.equal(r.allowed, false)
    assert.equal(r.retryAfterMs, Number.POSITIVE_INFINITY)
    assert.equal(log.peek('u1').count, 0)
  })

  it('reports resetMs as the time until the newest entry leaves, 0 when empty', () => {
    const { clock, log } = make(3, 10_000)
    assert.equal(log.peek('u1').resetMs, 0)
    log.check('u1')
    clock.advance(3_000)
    assert.equal(log.check('u1').resetMs, 10_000)
    clock.advance(2_000)
    assert.equal(log.peek('u1').resetMs, 8_000)
  })

  it('peeks without logging, and resets', () => {
    const { log } = make(1)
    assert.equal(log.peek('u1').allowed, true)
    assert.equal(log.check('u1').allowed, true)
    assert.equal(log.peek('u1').allowed, false)
    log.reset('u1')
    assert.equal(log.check('u1').allowed, true)
  })

  it('shares its logs with a sibling made by withLimit', () => {
    const { log } = make(1)
    log.check('u1')
    assert.equal(log.withLimit(2).check('u1').count, 2)
    assert.equal(log.peek('u1').count, 2)
  })

  it('logs a request at the newest time when the clock steps back, so it leaves no earlier', () => {
    const { clock, log } = make(3, 10_000)
    log.check('u1') // t0
    clock.advance(5_000)
    log.check('u1') // t0 + 5 s
    clock.set(MINUTE + 2_000) // the clock steps back 3 s
    log.check('u1') // logged at t0 + 5 s, the newest time, not t0 + 2 s
    clock.set(MINUTE + 10_000)
    assert.equal(log.peek('u1').count, 2, 'only t0 left the window')
    clock.set(MINUTE + 14_999)
    assert.equal(log.peek('u1').count, 2, 'the other two leave together')
    clock.set(MINUTE + 15_000)
    assert.equal(log.peek('u1').count, 0)
  })

  it('sweeps stale logs as new users arrive, so memory stays bounded', () => {
    const { clock, log } = make(5, 1_000)
    for (let i = 0; i < 50; i++) log.check(`old-${i}`)
    clock.advance(1_000)
    for (let i = 0; i < 50; i++) log.check(`new-${i}`)
    assert.ok(log.size <= 60, `stale logs were swept (${log.size} held)`)
  })

  it('holds at most maxKeys users, forgetting the one stored longest ago', () => {
    const { log } = make(1, 60_000, 2)
    log.check('a')
    log.check('b')
    log.check('c')
    assert.equal(log.size, 2)
    assert.equal(log.check('a').allowed, true, 'a was forgotten')
  })
})
