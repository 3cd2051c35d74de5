/**
 * The escrow contract (`Strategy.escrow`, docs/ARCHITECTURE.md "Escrow"): one suite every store
 * that serves escrow namespaces runs against a real server, with node:test, at the Strategy
 * level. MemoryStrategy is the reference and passes it.
 *
 *   import { runEscrowContract } from 'ratelimiting/testing'
 *   runEscrowContract('redis', () => new RedisStrategy({ client }))
 *
 * What it checks: the grant (`own' = own + max(0, min(target − own, room))`, nothing when `own'`
 * would stay below `minimum`) and its share `floor((room − max(0, minimum − own)) / (4 · nodes))`,
 * the previous window weighted by the sliding formula, seq-idempotence of grants and writes,
 * writes then reads answered in order, returns, the epoch and its learning period, the processes
 * counted within `learnMs`, the fields of a GrantRow, namespaces kept apart, many grants in one
 * batch, and whole numbers answered as whole numbers.
 *
 * Each test works in a namespace of its own. Times are real epoch times, placed in the current
 * window at a quarter of a 60 s window (the previous window weighs exactly 0.75 there), so that
 * stores with absolute expiry keep what the tests write.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import type { CounterRow, EscrowBatch, EscrowReply, GrantRequest, GrantRow, Strategy, WindowPush, WindowRef } from '../core/strategy.js'
import { windowStartMs } from '../core/window.js'
import { readWindow } from './read-window.js'

/** Options of {@link runEscrowContract}. */
export interface EscrowContractOptions {
  /** Run once after the suite (after the strategy is closed), e.g. to close a client the test opened. */
  readonly teardown?: () => Promise<void>
}

const SIZE = 60_000 // ms
const LEARN = 4_000 // ms: learnMs of every call

type Call = Partial<Pick<EscrowBatch, 'windows' | 'refresh' | 'grants' | 'learnMs'>> & { readonly namespace?: string }

/** Registers the escrow contract tests for one strategy. */
export function runEscrowContract(
  name: string,
  makeStrategy: () => Strategy | Promise<Strategy>,
  options: EscrowContractOptions = {},
): void {
  describe(`escrow contract: ${name}`, () => {
    let s: Strategy
    let ns = ''
    // T: the time most calls are made at; CUR/PREV: the current and previous window starts at T
    let T = 0
    let CUR = 0
    let PREV = 0

    before(async () => {
      s = await makeStrategy()
    })
    after(async () => {
      await s.close()
      await options.teardown?.()
    })

    const call = (nodeId: string, seq: number, nowMs: number, c: Call = {}): Promise<EscrowReply> => {
      const escrow = s.escrow
      assert.ok(typeof escrow === 'function', `${s.name} has no escrow method`)
      return escrow.call(s, {
        namespace: c.namespace ?? ns,
        nodeId,
        seq,
        nowMs,
        learnMs: c.learnMs ?? LEARN,
        windows: c.windows ?? [],
        refresh: c.refresh ?? [],
        grants: c.grants ?? [],
      })
    }
    const grant = (key: string, minimum: number, limit: number, target = limit, start = CUR): GrantRequest => ({
      key,
      windowStartMs: start,
      windowSizeMs: SIZE,
      target,
      limit,
      minimum,
    })
    const write = (key: string, count: number, start = CUR): WindowPush => ({
      key,
      windowStartMs: start,
      windowSizeMs: SIZE,
      count,
      diff: 0,
    })
    const ref = (key: string, start = CUR): WindowRef => ({ key, windowStartMs: start, windowSizeMs: SIZE })
    // a key-window as a reader sees it, through pushDiffs (no escrow call: the callers stay as they are)
    const stored = async (key: string, nodeId = 'reader', start = CUR, namespace = ns): Promise<[count: number, own: number]> => {
      const row = await readWindow(s, { namespace, key, windowStartMs: start, windowSizeMs: SIZE, nodeId, nowMs: T })
      return [row.count, row.own]
    }
    const only = (reply: EscrowReply): GrantRow => {
      assert.equal(reply.grants.length, 1)
      return reply.grants[0] as GrantRow
    }
    const counts = (row: CounterRow): [count: number, own: number] => [row.count, row.own]
    const grantOf = (row: GrantRow) => ({
      count: row.count,
      own: row.own,
      previousCount: row.previousCount,
      previousOwn: row.previousOwn,
      nodes: row.nodes,
    })

    // A fresh namespace whose epoch began LEARN + 1 s before T: grants at T are past its learning
    // period, and the call that began it is no longer a caller at T.
    const fresh = async (): Promise<void> => {
      ns = `escrow-${randomUUID().slice(0, 8)}`
      CUR = windowStartMs(Date.now(), SIZE)
      PREV = CUR - SIZE
      T = CUR + SIZE / 4
      const reply = await call('opener', 1, T - LEARN - 1000)
      assert.equal(reply.learning, true)
    }

    it('says it serves escrow: an escrow method', () => {
      assert.equal(typeof s.escrow, 'function')
    })

    it("answers an empty call with the namespace's epoch, learning and callers, and no rows", async () => {
      ns = `escrow-${randomUUID().slice(0, 8)}`
      const t0 = windowStartMs(Date.now(), SIZE) + 1000
      const reply = await call('n1', 1, t0)
      assert.deepEqual(reply, { epochMs: t0, learning: true, nodes: 1, rows: [], grants: [] })
    })

    it('keeps the epoch across calls, nodes and time, and learns for learnMs after it begins', async () => {
      ns = `escrow-${randomUUID().slice(0, 8)}`
      const t0 = windowStartMs(Date.now(), SIZE) + 1000
      assert.equal((await call('n1', 1, t0)).epochMs, t0)
      const mid = await call('n2', 1, t0 + LEARN - 1)
      assert.deepEqual([mid.epochMs, mid.learning], [t0, true])
      const end = await call('n1', 2, t0 + LEARN)
      assert.deepEqual([end.epochMs, end.learning], [t0, false])
      const later = await call('n3', 1, t0 + 3 * LEARN)
      assert.deepEqual([later.epochMs, later.learning], [t0, false])
      // learning is measured with each call's learnMs
      const longer = await call('n3', 2, t0 + 3 * LEARN, { learnMs: 4 * LEARN })
      assert.deepEqual([longer.epochMs, longer.learning], [t0, true])
    })

    it('answers grants unchanged while learning, writes meanwhile, and grants once the learning is over', async () => {
      ns = `escrow-${randomUUID().slice(0, 8)}`
      CUR = windowStartMs(Date.now(), SIZE)
      const t0 = CUR + 1000
      // the first call begins the epoch: its write lands, its grant is answered unchanged
      const first = await call('n1', 1, t0, { windows: [write('w', 3)], grants: [grant('k', 1, 100)] })
      assert.equal(first.learning, true)
      assert.deepEqual(counts(first.rows[0] as CounterRow), [3, 3])
      assert.deepEqual(grantOf(only(first)), { count: 0, own: 0, previousCount: 0, previousOwn: 0, nodes: 0 })
      await call('n2', 1, t0 + 1, { windows: [write('k', 5)] })
      const learning = await call('n1', 2, t0 + LEARN - 1, { grants: [grant('k', 1, 100)] })
      assert.equal(learning.learning, true)
      // n1 holds nothing in k: only n2 is counted in the window
      assert.deepEqual(grantOf(only(learning)), { count: 5, own: 0, previousCount: 0, previousOwn: 0, nodes: 1 })
      assert.deepEqual(await stored('k', 'n1'), [5, 0])
      const granted = await call('n1', 3, t0 + LEARN, { grants: [grant('k', 1, 100)] })
      assert.equal(granted.learning, false)
      // room 95, 2 callers (n1, n2): 1 + floor(94 / 8) = 12
      assert.deepEqual(grantOf(only(granted)), { count: 17, own: 12, previousCount: 0, previousOwn: 0, nodes: 2 })
    })

    it('grants the hits that ask plus a quarter of what is left, split over the callers, up to the target', async () => {
      await fresh()
      // alone: room 100, 1 + floor(99 / 4) = 25
      assert.deepEqual(grantOf(only(await call('n1', 1, T, { grants: [grant('a', 1, 100)] }))), {
        count: 25,
        own: 25,
        previousCount: 0,
        previousOwn: 0,
        nodes: 1,
      })
      // spent: asks for 26; room 75, need 1: 26 + floor(74 / 4) = 44
      assert.deepEqual(counts(only(await call('n1', 2, T, { grants: [grant('a', 26, 100)] }))), [44, 44])
      // the target caps it: 25 wanted, 10 held
      assert.deepEqual(counts(only(await call('n1', 3, T, { grants: [grant('b', 1, 100, 10)] }))), [10, 10])
      // a target below what is held lowers nothing
      assert.deepEqual(counts(only(await call('n1', 4, T, { grants: [grant('a', 1, 100, 5)] }))), [44, 44])
      // a second caller within learnMs halves the share: room 100, 2 + floor(98 / 8) = 14
      await call('n2', 1, T - 10)
      assert.deepEqual(counts(only(await call('n1', 5, T, { grants: [grant('c', 2, 100)] }))), [14, 14])
      assert.deepEqual(await stored('c'), [14, 0])
    })

    it('sizes the room with every reservation, the previous window weighted by the sliding formula', async () => {
      await fresh()
      // previous window: n1 holds 8, n2 40; current: n3 holds 10
      await call('n1', 1, T - 3, { windows: [write('k', 8, PREV)] })
      await call('n2', 1, T - 2, { windows: [write('k', 40, PREV)] })
      await call('n3', 1, T - 1, { windows: [write('k', 10)] })
      // rate = 10 + 48 × 0.75 = 46, room 54, 3 callers: 1 + floor(53 / 12) = 5
      const row = only(await call('n1', 2, T, { grants: [grant('k', 1, 100)] }))
      assert.deepEqual(grantOf(row), { count: 15, own: 5, previousCount: 48, previousOwn: 8, nodes: 2 })
      assert.equal(row.key, 'k')
      assert.equal(row.windowStartMs, CUR)
      assert.equal(row.windowSizeMs, SIZE)
    })

    it('never raises a reservation past what the limit allows, and raises nothing when the minimum does not fit', async () => {
      await fresh()
      await call('n2', 1, T - 1, { windows: [write('k', 7), write('p', 5, PREV)] })
      // room 3, need 3: exactly the room, no share
      assert.deepEqual(counts(only(await call('n1', 1, T, { grants: [grant('k', 3, 10)] }))), [10, 3])
      // full: one more hit does not fit, nothing is raised
      assert.deepEqual(counts(only(await call('n1', 2, T, { grants: [grant('k', 4, 10)] }))), [10, 3])
      // p: rate 5 × 0.75 = 3.75, room 6.25: 6 fits (and no share: floor(0.25 / 8) = 0), 7 does not
      assert.deepEqual(counts(only(await call('n1', 3, T, { grants: [grant('p', 7, 10)] }))), [0, 0])
      assert.deepEqual(counts(only(await call('n1', 4, T, { grants: [grant('p', 6, 10)] }))), [6, 6])
      assert.deepEqual(counts(only(await call('n3', 1, T, { grants: [grant('p', 1, 10)] }))), [6, 0])
      // a minimum that cannot be reached raises nothing, not even what fits
      assert.deepEqual(counts(only(await call('n3', 2, T, { grants: [grant('q', 11, 10)] }))), [0, 0])
      assert.deepEqual(await stored('k'), [10, 0])
      assert.deepEqual(await stored('p'), [6, 0])
    })

    it('grants as many of the hits that ask together (wanted) as fit, then a share of the rest', async () => {
      await fresh()
      await call('n2', 1, T - 1, { windows: [write('k', 80)] })
      // room 20, 2 callers: wanted 50 does not fit, so as many as fit (20): no room left for a share
      assert.deepEqual(counts(only(await call('n1', 1, T, { grants: [{ ...grant('k', 1, 100), wanted: 50 }] }))), [100, 20])
      // room 100 on a fresh key: all 10 wanted fit, then floor(90 / 8) = 11 more
      assert.deepEqual(counts(only(await call('n1', 2, T, { grants: [{ ...grant('w', 1, 100), wanted: 10 }] }))), [21, 21])
      // p: rate 3.75 (5 × 0.75), room 6.25: of 9 wanted, 6 (whole hits) fit
      await call('n2', 2, T - 1, { windows: [write('p', 5, PREV)] })
      assert.deepEqual(counts(only(await call('n1', 3, T, { grants: [{ ...grant('p', 1, 10), wanted: 9 }] }))), [6, 6])
      // the minimum still decides: it does not fit, nothing is raised
      assert.deepEqual(counts(only(await call('n3', 1, T, { grants: [{ ...grant('p', 5, 10), wanted: 9 }] }))), [6, 0])
    })

    it('says a grant that cannot reach its minimum was refused, and with countRefused counts the hits that asked', async () => {
      await fresh()
      await call('n2', 1, T - 1, { windows: [write('k', 10)] })
      // granted: no refused flag
      const granted = only(await call('n1', 1, T, { grants: [grant('j', 1, 10)] }))
      assert.notEqual(granted.refused, true)
      // refused without countRefused: nothing raised
      const plain = only(await call('n1', 2, T, { grants: [grant('k', 1, 10)] }))
      assert.equal(plain.refused, true)
      assert.deepEqual(counts(plain), [10, 0])
      // refused with countRefused: raised to wanted (the denied hits count), past the limit
      const penalty = only(await call('n1', 3, T, { grants: [{ ...grant('k', 1, 10), wanted: 3, countRefused: true }] }))
      assert.equal(penalty.refused, true)
      assert.deepEqual(counts(penalty), [13, 3])
      // retried (same seq): applied once, and not refused again (nothing was decided)
      const retried = only(await call('n1', 3, T, { grants: [{ ...grant('k', 1, 10), wanted: 3, countRefused: true }] }))
      assert.notEqual(retried.refused, true)
      assert.deepEqual(counts(retried), [13, 3])
      assert.deepEqual(await stored('k'), [13, 0])
      // while learning nothing is decided: not refused, nothing counted
      const learning = only(await call('n1', 1, T, { namespace: `${ns}-new`, grants: [{ ...grant('k', 1, 10), countRefused: true }] }))
      assert.notEqual(learning.refused, true)
      assert.deepEqual(counts(learning), [0, 0])
    })

    it('counts only the callers of the last learnMs (the asking one included) in the share', async () => {
      await fresh()
      await call('gone', 1, T - LEARN - 1)
      await call('edge', 1, T - LEARN + 10)
      const reply = await call('n1', 1, T, { grants: [grant('k', 1, 100)] })
      assert.equal(reply.nodes, 2)
      // 1 + floor(99 / 8) = 13
      assert.deepEqual(counts(only(reply)), [13, 13])
      // every call counts its caller, with or without grants; a caller is one however often it calls
      await call('n2', 1, T + 1, { windows: [write('x', 1)] })
      await call('n2', 2, T + 2)
      assert.equal((await call('n1', 2, T + 3)).nodes, 3)
      assert.equal((await call('n1', 3, T + LEARN + 1)).nodes, 2, '"edge" is out, n2 (last at T + 2) is in')
    })

    it('applies a retried or older grant once: the same batch again, or an older seq, changes nothing and is answered', async () => {
      await fresh()
      const batch = { grants: [grant('k', 1, 100)] }
      assert.deepEqual(counts(only(await call('n1', 5, T, batch))), [25, 25])
      assert.deepEqual(counts(only(await call('n1', 5, T, batch))), [25, 25], 'the same batch again')
      assert.deepEqual(counts(only(await call('n1', 4, T, { grants: [grant('k', 30, 100)] }))), [25, 25], 'an older seq')
      // a grant older than the last write of the register is not applied over it
      await call('n1', 7, T, { windows: [write('k', 2)] })
      assert.deepEqual(counts(only(await call('n1', 6, T, { grants: [grant('k', 3, 100)] }))), [2, 2])
      assert.deepEqual(await stored('k', 'n1'), [2, 2])
      // a refused grant is a write of its seq too: delivered again once there is room, it still raises nothing
      await call('n2', 1, T, { windows: [write('j', 10)] })
      const refused = { grants: [grant('j', 1, 10)] }
      assert.deepEqual(counts(only(await call('n1', 8, T, refused))), [10, 0])
      await call('n2', 2, T, { windows: [write('j', 0)] })
      assert.deepEqual(counts(only(await call('n1', 8, T, refused))), [0, 0])
      assert.deepEqual(await stored('j'), [0, 0])
    })

    it('ignores a write older than the register and answers it in its place', async () => {
      await fresh()
      await call('n2', 1, T, { windows: [write('k', 10)] })
      // 2 callers: 1 + floor(89 / 8) = 12
      assert.deepEqual(counts(only(await call('n1', 5, T, { grants: [grant('k', 1, 100)] }))), [22, 12])
      // a return sent before the grant (seq 4) that arrives after it
      const late = await call('n1', 4, T, { windows: [write('k', 3)] })
      assert.deepEqual(counts(late.rows[0] as CounterRow), [13, 3])
      assert.deepEqual(await stored('k', 'n1'), [22, 12])
    })

    it('answers one row per write, then per read, in the order of the batch', async () => {
      await fresh()
      await call('n2', 1, T, { windows: [write('b', 4)] })
      const reply = await call('n1', 1, T, {
        windows: [write('a', 3), write('b', 5), write('a', 2, PREV)],
        refresh: [ref('none'), ref('b'), ref('a', PREV)],
      })
      assert.deepEqual(
        reply.rows.map((r) => [r.key, r.windowStartMs - CUR, r.windowSizeMs, r.count, r.own]),
        [
          ['a', 0, SIZE, 3, 3],
          ['b', 0, SIZE, 9, 5],
          ['a', -SIZE, SIZE, 2, 2],
          ['none', 0, SIZE, 0, 0],
          ['b', 0, SIZE, 9, 5],
          ['a', -SIZE, SIZE, 2, 2],
        ],
      )
      assert.deepEqual(reply.grants, [])
    })

    it("applies a batch's writes before its grants: a return in the batch makes room for its grant", async () => {
      await fresh()
      await call('n2', 1, T - 1, { windows: [write('k', 10)] })
      await call('n1', 1, T - 1, { windows: [write('k', 80, PREV)] })
      // 10 + 80 × 0.75 = 70: nothing for 40; after the return of the previous window to 20: 10 + 15 = 25, room 75
      assert.deepEqual(counts(only(await call('n1', 2, T, { grants: [grant('k', 40, 100)] }))), [10, 0])
      const reply = await call('n1', 3, T, { windows: [write('k', 20, PREV)], grants: [grant('k', 40, 100)] })
      assert.deepEqual(counts(reply.rows[0] as CounterRow), [20, 20])
      // need 40, room 75, 2 callers: 40 + floor(35 / 8) = 44
      assert.deepEqual(grantOf(only(reply)), { count: 54, own: 44, previousCount: 20, previousOwn: 20, nodes: 2 })
    })

    it('takes returns: a register written lower frees room for the others', async () => {
      await fresh()
      assert.deepEqual(counts(only(await call('n1', 1, T, { grants: [grant('k', 1, 10)] }))), [3, 3])
      assert.deepEqual(counts(only(await call('n2', 1, T, { grants: [grant('k', 7, 10)] }))), [10, 7])
      assert.deepEqual(counts(only(await call('n2', 2, T, { grants: [grant('k', 8, 10)] }))), [10, 7], 'full')
      // n1 spent 1 of its 3 and gives the rest back
      const back = await call('n1', 2, T, { windows: [write('k', 1)] })
      assert.deepEqual(counts(back.rows[0] as CounterRow), [8, 1])
      assert.deepEqual(counts(only(await call('n2', 3, T, { grants: [grant('k', 9, 10)] }))), [10, 9])
    })

    it('reads a reset key-window from zero, and counts only the nodes that hold reservations in it', async () => {
      await fresh()
      await call('n2', 1, T, { windows: [write('k', 30)] })
      await s.resetKey(ns, 'k', [SIZE], T)
      // room 100 again; callers n2 and n1: 1 + floor(99 / 8) = 13
      assert.deepEqual(grantOf(only(await call('n1', 1, T, { grants: [grant('k', 1, 100)] }))), {
        count: 13,
        own: 13,
        previousCount: 0,
        previousOwn: 0,
        nodes: 2,
      })
    })

    it('keeps namespaces apart: epochs, callers and reservations', async () => {
      await fresh()
      const other = `${ns}-other`
      await call('n2', 1, T, { windows: [write('k', 50)] })
      const first = await call('n1', 1, T, { namespace: other, grants: [grant('k', 1, 100)] })
      // the other namespace's epoch begins now: it learns, and counts one caller
      assert.deepEqual([first.epochMs, first.learning, first.nodes], [T, true, 1])
      assert.deepEqual(counts(only(first)), [0, 0])
      const later = await call('n1', 2, T + LEARN, { namespace: other, grants: [grant('k', 1, 100)] })
      assert.deepEqual([later.epochMs, later.learning, later.nodes], [T, false, 1])
      assert.deepEqual(counts(only(later)), [25, 25])
      assert.equal((await call('n3', 1, T + 1)).epochMs, T - LEARN - 1000)
      assert.deepEqual(await stored('k'), [50, 0])
      assert.deepEqual(await stored('k', 'n1', CUR, other), [25, 25])
    })

    it('grants many keys and window sizes in one batch, one row each, in order', async () => {
      await fresh()
      await call('n2', 1, T - 1, { windows: Array.from({ length: 150 }, (_, i) => write(`key-${i}`, i % 40)) })
      const grants = Array.from({ length: 200 }, (_, i) => grant(`key-${i}`, 1 + (i % 3), 100))
      const small = { key: 'key-0', windowStartMs: windowStartMs(T, 1000), windowSizeMs: 1000, target: 3, limit: 3, minimum: 1 }
      const reply = await call('n1', 1, T, { grants: [...grants, small] })
      assert.equal(reply.grants.length, 201)
      for (const [i, row] of reply.grants.slice(0, 200).entries()) {
        const others = i < 150 ? i % 40 : 0
        const minimum = 1 + (i % 3)
        const own = minimum + Math.floor((100 - others - minimum) / 8)
        assert.deepEqual([row.key, row.windowStartMs, row.count, row.own, row.nodes], [`key-${i}`, CUR, others + own, own, i < 150 ? 2 : 1])
      }
      const last = reply.grants[200] as GrantRow
      assert.deepEqual([last.key, last.windowSizeMs, last.count, last.own], ['key-0', 1000, 1, 1])
    })

    it('answers whole numbers as whole numbers (JavaScript numbers, no decimal residue)', async () => {
      await fresh()
      await call('n2', 1, T - 1, { windows: [write('k', 7, PREV), write('k', 3)] })
      // rate 3 + 5.25, room 91.75: 1 + floor(90.75 / 8) = 12
      const reply = await call('n1', 1, T, { grants: [grant('k', 1, 100)] })
      const row = only(reply)
      for (const value of [reply.epochMs, reply.nodes, row.count, row.own, row.previousCount, row.previousOwn, row.nodes]) {
        assert.equal(typeof value, 'number')
        assert.ok(Number.isInteger(value), `${value} is a whole number`)
      }
      assert.deepEqual(grantOf(row), { count: 15, own: 12, previousCount: 7, previousOwn: 0, nodes: 2 })
      assert.equal(typeof reply.learning, 'boolean')
    })
  })
}
