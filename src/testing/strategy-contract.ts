/**
 * The strategy contract: one suite every store runs against a real server, with node:test.
 *
 *   import { runStrategyContract } from 'ratelimiting/testing'
 *   runStrategyContract({ name: 'redis', make: () => new RedisStrategy({ client }) })
 *
 * Each test works in a namespace of its own, so the suite can share a server with other runs.
 * Times are real epoch times (stores with absolute expiry would drop data stamped in the past).
 * The store is read through `pushDiffs` alone (a refresh-only batch), so the suite needs nothing
 * beyond the required methods; `getWindow` and `purge`, optional, are tested when offered.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import type { CounterRow, DiffBatch, Strategy, WindowPush, WindowRef } from '../core/strategy.js'
import { MAX_WINDOW_MS, windowStartMs } from '../core/window.js'
import { runBlockContract } from './block-contract.js'
import { readWindow } from './read-window.js'

/** What {@link runStrategyContract} needs. */
export interface StrategyContractOptions {
  /** Shown in test names. */
  readonly name: string
  /** A strategy connected to the server under test. */
  readonly make: () => Strategy | Promise<Strategy>
  /** Run once after the suite, e.g. to close a client the test opened. */
  readonly teardown?: () => Promise<void>
}

const SIZE = 60_000 // ms

function push(ns: string, nodeId: string, seq: number, nowMs: number, windows: WindowPush[], refresh: WindowRef[] = []): DiffBatch {
  return { namespace: ns, nodeId, seq, nowMs, windows, refresh }
}

function win(key: string, windowStartMs: number, count: number, windowSizeMs = SIZE): WindowPush {
  return { key, windowStartMs, windowSizeMs, count, diff: count }
}

function find(rows: readonly CounterRow[], key: string, windowStartMs: number, windowSizeMs = SIZE): CounterRow {
  const row = rows.find((r) => r.key === key && r.windowStartMs === windowStartMs && r.windowSizeMs === windowSizeMs)
  assert.ok(row, `no row for ${key} @ ${windowStartMs}/${windowSizeMs}`)
  return row
}

async function collect(rows: AsyncIterable<CounterRow>): Promise<CounterRow[]> {
  const out: CounterRow[] = []
  for await (const row of rows) out.push(row)
  return out
}

/** Registers the contract tests for one strategy. */
export function runStrategyContract(options: StrategyContractOptions): void {
  describe(`strategy contract: ${options.name}`, () => {
    let s: Strategy
    let ns: string
    let nowMs: number
    let start: number

    before(async () => {
      s = await options.make()
    })
    after(async () => {
      await s.close()
      await options.teardown?.()
    })

    const fresh = () => {
      ns = `contract-${randomUUID().slice(0, 8)}`
      nowMs = Date.now()
      start = windowStartMs(nowMs, SIZE)
    }

    // Reads one key-window as `nodeId` through the engine's own call: a refresh-only push.
    const read = (key: string, namespace: string, windowStart: number, windowSize: number, nodeId = 'reader') =>
      readWindow(s, { namespace, key, windowStartMs: windowStart, windowSizeMs: windowSize, nodeId, nowMs })

    it('has a name and says whether it holds decimals', () => {
      assert.equal(typeof s.name, 'string')
      assert.ok(s.name.length > 0)
      assert.equal(typeof s.supportsDecimals, 'boolean')
    })

    it('answers a row for every key-window written or refreshed, zeros for unknown ones', async () => {
      fresh()
      const rows = await s.pushDiffs(
        push(
          ns,
          'n1',
          1,
          nowMs,
          [win('a', start, 3)],
          [
            { key: 'b', windowStartMs: start, windowSizeMs: SIZE },
            { key: 'a', windowStartMs: start - SIZE, windowSizeMs: SIZE },
          ],
        ),
      )
      assert.equal(rows.length, 3)
      assert.deepEqual({ count: find(rows, 'a', start).count, own: find(rows, 'a', start).own }, { count: 3, own: 3 })
      assert.deepEqual({ count: find(rows, 'b', start).count, own: find(rows, 'b', start).own }, { count: 0, own: 0 })
      assert.equal(find(rows, 'a', start - SIZE).count, 0)
    })

    it("stores a node's cumulative count, not a sum of pushes", async () => {
      fresh()
      await s.pushDiffs(push(ns, 'n1', 1, nowMs, [win('k', start, 3)]))
      const rows = await s.pushDiffs(push(ns, 'n1', 2, nowMs, [win('k', start, 5)]))
      assert.equal(find(rows, 'k', start).count, 5)
      assert.equal(find(rows, 'k', start).own, 5)
    })

    it('does not count a retried batch twice', async () => {
      fresh()
      const batch = push(ns, 'n1', 7, nowMs, [win('k', start, 4)])
      await s.pushDiffs(batch)
      const rows = await s.pushDiffs(batch)
      assert.equal(find(rows, 'k', start).count, 4)
    })

    it('ignores a write older than the one it holds (reordered batches), and answers it in its place', async () => {
      // Concurrent synchronous hits of one process can reach the store in any order (a pool of
      // connections): each is answered as if applied in its place in the node's sequence (its
      // own count, the others' as stored), and only the newest write is kept.
      fresh()
      await s.pushDiffs(push(ns, 'n2', 1, nowMs, [win('k', start, 10)]))
      await s.pushDiffs(push(ns, 'n1', 9, nowMs, [win('k', start, 6)]))
      const rows = await s.pushDiffs(push(ns, 'n1', 8, nowMs, [win('k', start, 5)]))
      assert.deepEqual({ count: find(rows, 'k', start).count, own: find(rows, 'k', start).own }, { count: 15, own: 5 })
      const stored = await read('k', ns, start, SIZE, 'n1')
      assert.deepEqual({ count: stored.count, own: stored.own }, { count: 16, own: 6 }, 'the older write changed nothing')
    })

    it('lets a node lower its own count with a newer batch', async () => {
      fresh()
      await s.pushDiffs(push(ns, 'n1', 1, nowMs, [win('k', start, 6)]))
      const rows = await s.pushDiffs(push(ns, 'n1', 2, nowMs, [win('k', start, 2)]))
      assert.equal(find(rows, 'k', start).count, 2)
    })

    it('sums the nodes and reports each its own share', async () => {
      fresh()
      await s.pushDiffs(push(ns, 'n1', 1, nowMs, [win('k', start, 3)]))
      await s.pushDiffs(push(ns, 'n2', 1, nowMs, [win('k', start, 4)]))
      const rows = await s.pushDiffs(push(ns, 'n3', 1, nowMs, [], [{ key: 'k', windowStartMs: start, windowSizeMs: SIZE }]))
      assert.deepEqual({ count: find(rows, 'k', start).count, own: find(rows, 'k', start).own }, { count: 7, own: 0 })
      const w = await read('k', ns, start, SIZE, 'n2')
      assert.deepEqual(
        { key: w.key, windowStartMs: w.windowStartMs, windowSizeMs: w.windowSizeMs, count: w.count, own: w.own },
        {
          key: 'k',
          windowStartMs: start,
          windowSizeMs: SIZE,
          count: 7,
          own: 4,
        },
      )
    })

    it('reads a window it does not hold as zero', async () => {
      fresh()
      const w = await read('nobody', ns, start, SIZE, 'n1')
      assert.equal(w.count, 0)
      assert.equal(w.own, 0)
    })

    it('keeps window sizes, windows, keys and namespaces apart', async () => {
      fresh()
      const other = `${ns}-other`
      await s.pushDiffs(
        push(ns, 'n1', 1, nowMs, [
          win('k', start, 1),
          win('k', start - SIZE, 2),
          win('k', windowStartMs(nowMs, 1000), 3, 1000),
          win('j', start, 4),
        ]),
      )
      await s.pushDiffs(push(other, 'n1', 1, nowMs, [win('k', start, 5)]))
      assert.equal((await read('k', ns, start, SIZE)).count, 1)
      assert.equal((await read('k', ns, start - SIZE, SIZE)).count, 2)
      assert.equal((await read('k', ns, windowStartMs(nowMs, 1000), 1000)).count, 3)
      assert.equal((await read('j', ns, start, SIZE)).count, 4)
      assert.equal((await read('k', other, start, SIZE)).count, 5)
    })

    it('yields the current and previous windows of a namespace from getCounters, and nothing else', async () => {
      fresh()
      await s.pushDiffs(
        push(ns, 'n1', 1, nowMs, [
          win('a', start, 1),
          win('a', start - SIZE, 2),
          win('b', start, 3),
          win('c', windowStartMs(nowMs, 1000), 9, 1000),
        ]),
      )
      await s.pushDiffs(push(`${ns}-other`, 'n1', 1, nowMs, [win('a', start, 7)]))
      await s.pushDiffs(push(ns, 'n2', 1, nowMs, [win('b', start, 4)]))
      const rows = await collect(s.getCounters(ns, [SIZE], nowMs, 'n2'))
      const seen = rows.map((r) => `${r.key}@${r.windowStartMs - start}:${r.count}/${r.own}`).sort()
      assert.deepEqual(seen, [`a@${-SIZE}:2/0`, 'a@0:1/0', 'b@0:7/4'])
    })

    it('resets a key: its current and previous windows count from zero, for every node', async () => {
      fresh()
      await s.pushDiffs(push(ns, 'n1', 1, nowMs, [win('k', start, 5), win('k', start - SIZE, 8)]))
      await s.pushDiffs(push(ns, 'n2', 1, nowMs, [win('k', start, 2)]))
      await s.resetKey(ns, 'k', [SIZE], nowMs)
      assert.equal((await read('k', ns, start, SIZE)).count, 0)
      assert.equal((await read('k', ns, start - SIZE, SIZE)).count, 0)
      // n1 counts on from its cumulative 5: one more hit is one hit after the reset
      const rows = await s.pushDiffs(push(ns, 'n1', 2, nowMs, [win('k', start, 6)]))
      assert.equal(find(rows, 'k', start).count, 1)
    })

    it('holds keys of any shape: spaces, braces, unicode, colons, 300 characters', async () => {
      fresh()
      const keys = ['a b', '{tag}x', 'ключ-🔑', 'x:y:z', 'k'.repeat(300), '', '%s\n\t']
      const rows = await s.pushDiffs(
        push(
          ns,
          'n1',
          1,
          nowMs,
          keys.map((k, i) => win(k, start, i + 1)),
        ),
      )
      for (const [i, k] of keys.entries()) assert.equal(find(rows, k, start).count, i + 1, `key ${JSON.stringify(k)}`)
      const stored = await collect(s.getCounters(ns, [SIZE], nowMs, 'n1'))
      assert.deepEqual(stored.map((r) => r.key).sort(), [...keys].sort())
    })

    it('keeps keys apart that differ only in lone UTF-16 surrogates', async () => {
      // JSON.parse('"\\ud800"') gives a lone surrogate; encoders that write it as U+FFFD would
      // make these four keys one counter
      fresh()
      const keys = ['\ud800', '\udfff', '\ufffd', 'a\ud800b']
      await s.pushDiffs(
        push(
          ns,
          'n1',
          1,
          nowMs,
          keys.map((k, i) => win(k, start, i + 1)),
        ),
      )
      for (const [i, k] of keys.entries()) assert.equal((await read(k, ns, start, SIZE)).count, i + 1, `key ${JSON.stringify(k)}`)
      const stored = await collect(s.getCounters(ns, [SIZE], nowMs, 'n1'))
      assert.deepEqual(stored.map((r) => r.key).sort(), [...keys].sort())
    })

    it('holds windows of a few ms and windows of 2^54 ms', async () => {
      fresh()
      const tiny = 50
      const huge = MAX_WINDOW_MS
      const tinyStart = windowStartMs(nowMs, tiny)
      const hugeStart = windowStartMs(nowMs, huge) // 0: the previous window starts before the epoch
      await s.pushDiffs(
        push(ns, 'n1', 1, nowMs, [
          win('t', tinyStart, 1, tiny),
          win('t', tinyStart - tiny, 2, tiny),
          win('t', hugeStart, 3, huge),
          win('t', hugeStart - huge, 4, huge),
        ]),
      )
      assert.equal((await read('t', ns, tinyStart, tiny)).count, 1)
      assert.equal((await read('t', ns, tinyStart - tiny, tiny)).count, 2)
      assert.equal((await read('t', ns, hugeStart, huge)).count, 3)
      assert.equal((await read('t', ns, hugeStart - huge, huge)).count, 4)
      const rows = await collect(s.getCounters(ns, [tiny, huge], nowMs, 'n1'))
      const seen = rows.map((r) => `${r.windowSizeMs}@${r.windowStartMs}:${r.count}`).sort()
      assert.deepEqual(
        seen,
        [`${tiny}@${tinyStart}:1`, `${tiny}@${tinyStart - tiny}:2`, `${huge}@${hugeStart}:3`, `${huge}@${hugeStart - huge}:4`].sort(),
      )
    })

    it('takes a batch of 1,000 key-windows in one call', async () => {
      fresh()
      const windows = Array.from({ length: 1000 }, (_, i) => win(`key-${i}`, start, i + 1))
      const rows = await s.pushDiffs(push(ns, 'n1', 1, nowMs, windows))
      assert.equal(rows.length, 1000)
      assert.equal(find(rows, 'key-999', start).count, 1000)
    })

    it('holds decimal counts exactly when it says it can, and refuses them otherwise', async () => {
      fresh()
      const batch = push(ns, 'n1', 1, nowMs, [win('d', start, 0.75)])
      if (s.supportsDecimals) {
        const rows = await s.pushDiffs(batch)
        assert.equal(find(rows, 'd', start).count, 0.75)
      } else {
        await assert.rejects(s.pushDiffs(batch))
      }
    })

    it('reads one key-window with getWindow, when it offers one, as pushDiffs reads it', async (t) => {
      if (s.getWindow === undefined) return t.skip('the store offers no getWindow (optional)')
      fresh()
      await s.pushDiffs(push(ns, 'n1', 1, nowMs, [win('k', start, 3)]))
      await s.pushDiffs(push(ns, 'n2', 1, nowMs, [win('k', start, 4)]))
      const w = await s.getWindow('k', ns, start, SIZE, 'n2')
      assert.deepEqual(
        { key: w.key, windowStartMs: w.windowStartMs, windowSizeMs: w.windowSizeMs, count: w.count, own: w.own },
        { key: 'k', windowStartMs: start, windowSizeMs: SIZE, count: 7, own: 4 },
      )
      assert.equal((await s.getWindow('nobody', ns, start, SIZE)).count, 0)
    })

    it('purges windows no rate can read any more, and keeps the rest, when it offers purge', async (t) => {
      if (s.purge === undefined) return t.skip('the store offers no purge (optional): it expires windows itself')
      fresh()
      await s.pushDiffs(push(ns, 'n1', 1, nowMs, [win('old', start, 1)]))
      await s.purge(ns, [SIZE], nowMs)
      assert.equal((await read('old', ns, start, SIZE)).count, 1, 'a current window survives a purge')
      const later = nowMs + 3 * SIZE + 24 * 3600 * 1000
      await s.purge(ns, [SIZE], later)
      const left = await collect(s.getCounters(ns, [SIZE], nowMs))
      assert.deepEqual(left, [], 'expired windows are gone after a purge')
    })

    it('says whether it keeps blocks', () => {
      assert.ok(s.supportsBlocks === undefined || typeof s.supportsBlocks === 'boolean')
    })
    describe('blocks', () => runBlockContract(() => s))
  })
}
