/**
 * The block half of the strategy contract (`DiffBatch.blocks`, `readBlocks`), run by
 * {@link runStrategyContract} for a store that says `supportsBlocks`. docs/STORES.md, "Writing a store".
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { it } from 'node:test'
import { MAX_BLOCK_MS } from '../core/blocks.js'
import type { BlockWrite, CounterRow, DiffBatch, Strategy, WindowPush, WindowRef } from '../core/strategy.js'
import { windowStartMs } from '../core/window.js'

const SIZE = 60_000 // ms

interface Batch {
  readonly nodeId?: string
  readonly nowMs?: number
  readonly windows?: WindowPush[]
  readonly refresh?: WindowRef[]
  readonly blocks?: BlockWrite[]
  readonly readBlocks?: boolean
}

const NO_BLOCKS = 'the store does not keep blocks (supportsBlocks is not true): blocking is refused on its synced namespaces'

/**
 * Registers the block tests; `strategy()` is the suite's store, made by then. Each is skipped,
 * saying why, for a store without `supportsBlocks`.
 */
export function runBlockContract(strategy: () => Strategy): void {
  let ns = ''
  let nowMs = 0
  let start = 0
  let seq = 0

  const fresh = () => {
    ns = `blocks-${randomUUID().slice(0, 8)}`
    nowMs = Date.now()
    start = windowStartMs(nowMs, SIZE)
  }
  const send = (b: Batch): Promise<CounterRow[]> => {
    const batch: DiffBatch = {
      namespace: ns,
      nodeId: b.nodeId ?? 'n1',
      seq: ++seq,
      nowMs: b.nowMs ?? nowMs,
      windows: b.windows ?? [],
      refresh: b.refresh ?? [],
      ...(b.blocks !== undefined ? { blocks: b.blocks } : {}),
      ...(b.readBlocks !== undefined ? { readBlocks: b.readBlocks } : {}),
    }
    return strategy().pushDiffs(batch)
  }
  const ref = (key: string, windowStart = start): WindowRef => ({ key, windowStartMs: windowStart, windowSizeMs: SIZE })
  // a key's block as a reader sees it: one refresh of its current window with readBlocks
  const blockOf = async (key: string, opts: { nodeId?: string; nowMs?: number; namespace?: string } = {}): Promise<number> => {
    const saved = ns
    if (opts.namespace !== undefined) ns = opts.namespace
    try {
      const rows = await send({ nodeId: opts.nodeId ?? 'reader', nowMs: opts.nowMs, refresh: [ref(key)], readBlocks: true })
      assert.equal(rows.length, 1)
      const until = rows[0]?.blockedUntilMs
      assert.equal(typeof until, 'number', 'a row read with readBlocks carries blockedUntilMs')
      return until as number
    } finally {
      ns = saved
    }
  }

  it('blocks: a block written by one node is read by another, on a written and a read row', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    const until = nowMs + 60_000
    const written = await send({ blocks: [{ key: 'k', untilMs: until }] })
    assert.deepEqual(written, [], 'a batch of blocks alone answers no row')
    assert.equal(await blockOf('k', { nodeId: 'n2' }), until)
    const rows = await send({
      nodeId: 'n2',
      windows: [{ key: 'k', windowStartMs: start, windowSizeMs: SIZE, count: 1, diff: 1 }],
      refresh: [ref('k', start - SIZE)],
      readBlocks: true,
    })
    assert.deepEqual(
      rows.map((r) => r.blockedUntilMs),
      [until, until],
    )
  })

  it('blocks: a key without a block, and a batch without readBlocks, read as before', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    assert.equal(await blockOf('free'), 0)
    await send({ blocks: [{ key: 'k', untilMs: nowMs + 60_000 }] })
    const rows = await send({ refresh: [ref('k')] })
    assert.equal(rows.length, 1)
    assert.ok(rows[0]?.blockedUntilMs === undefined || rows[0]?.blockedUntilMs === nowMs + 60_000)
    assert.equal(rows[0]?.count, 0, 'a block is not a count')
  })

  it('blocks: the later end is kept; an earlier one never shortens a block', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    await send({ nodeId: 'n1', blocks: [{ key: 'k', untilMs: nowMs + 90_000 }] })
    await send({ nodeId: 'n2', blocks: [{ key: 'k', untilMs: nowMs + 30_000 }] })
    assert.equal(await blockOf('k'), nowMs + 90_000)
    await send({ nodeId: 'n2', blocks: [{ key: 'k', untilMs: nowMs + 120_000 }] })
    assert.equal(await blockOf('k'), nowMs + 120_000)
  })

  it('blocks: the longest block the engine makes (MAX_BLOCK_MS from now) is kept to the ms', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    const until = nowMs + MAX_BLOCK_MS
    await send({ blocks: [{ key: 'k', untilMs: until }] })
    assert.equal(await blockOf('k'), until)
    assert.equal(await blockOf('k', { nowMs: nowMs + 365 * 86_400_000 }), until, 'and still holds a year later')
  })

  it('blocks: untilMs 0 lifts a block, for every node', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    await send({ nodeId: 'n1', blocks: [{ key: 'k', untilMs: nowMs + 90_000 }] })
    await send({ nodeId: 'n2', blocks: [{ key: 'k', untilMs: 0 }] })
    assert.equal(await blockOf('k'), 0)
    // and a block after the lift holds again, however short
    await send({ nodeId: 'n1', blocks: [{ key: 'k', untilMs: nowMs + 10_000 }] })
    assert.equal(await blockOf('k'), nowMs + 10_000)
  })

  it('blocks: a block that has ended by the batch time reads as 0', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    await send({ blocks: [{ key: 'k', untilMs: nowMs + 5_000 }] })
    assert.equal(await blockOf('k', { nowMs: nowMs + 4_999 }), nowMs + 5_000)
    assert.equal(await blockOf('k', { nowMs: nowMs + 5_000 }), 0)
    assert.equal(await blockOf('k', { nowMs: nowMs + 60_000 }), 0)
  })

  it('blocks: keys and namespaces are kept apart, keys of any shape', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    const keys = ['a b', '{tag}x', 'ключ-🔑', 'x:y:z', 'k'.repeat(300), '', '\ud800', '\ufffd']
    await send({ blocks: keys.map((key, i) => ({ key, untilMs: nowMs + 10_000 + i })) })
    for (const [i, key] of keys.entries()) assert.equal(await blockOf(key), nowMs + 10_000 + i, `key ${JSON.stringify(key)}`)
    assert.equal(await blockOf('a'), 0)
    assert.equal(await blockOf('a b', { namespace: `${ns}-other` }), 0)
  })

  it('blocks: written before the rows of the same batch are read, with the windows written as usual', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    const rows = await send({
      windows: [{ key: 'k', windowStartMs: start, windowSizeMs: SIZE, count: 3, diff: 3 }],
      blocks: [{ key: 'k', untilMs: nowMs + 15_000 }],
      readBlocks: true,
    })
    assert.equal(rows.length, 1)
    assert.deepEqual(
      { count: rows[0]?.count, own: rows[0]?.own, blockedUntilMs: rows[0]?.blockedUntilMs },
      {
        count: 3,
        own: 3,
        blockedUntilMs: nowMs + 15_000,
      },
    )
  })

  it('blocks: resetKey leaves a block alone (lifting one is a write of untilMs 0)', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    await send({ blocks: [{ key: 'k', untilMs: nowMs + 15_000 }] })
    await strategy().resetKey(ns, 'k', [SIZE], nowMs)
    assert.equal(await blockOf('k'), nowMs + 15_000)
  })

  it('blocks: 500 keys blocked in one batch, read back in one', async (t) => {
    if (strategy().supportsBlocks !== true) return t.skip(NO_BLOCKS)
    fresh()
    const keys = Array.from({ length: 500 }, (_, i) => `ip-${i}`)
    await send({ blocks: keys.map((key) => ({ key, untilMs: nowMs + 20_000 })) })
    const rows = await send({ refresh: keys.map((k) => ref(k)), readBlocks: true, nodeId: 'n9' })
    assert.equal(rows.length, 500)
    assert.ok(rows.every((r) => r.blockedUntilMs === nowMs + 20_000))
  })
}
