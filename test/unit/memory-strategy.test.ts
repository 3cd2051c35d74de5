import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { MemoryStrategy } from '../../src/strategies/memory.js'
import { runStrategyContract } from '../../src/testing/strategy-contract.js'

runStrategyContract({ name: 'memory', make: () => new MemoryStrategy() })

// The totals MemoryStrategy answers follow each node's count as it changes: they must equal the
// sum of the node counts as stored (in the order the nodes first wrote), whether the counts are
// whole numbers (followed) or decimals (summed again), and after a reset.
describe('MemoryStrategy totals', () => {
  const W = { windowStartMs: 60_000, windowSizeMs: 60_000 }
  const push = (store: MemoryStrategy, nodeId: string, seq: number, count: number, key = 'k') =>
    store.pushDiffs({ namespace: 'ns', nodeId, seq, nowMs: 61_000, windows: [{ key, ...W, count, diff: 0 }], refresh: [] })
  const read = async (store: MemoryStrategy, nodeId = 'a', key = 'k') =>
    (await store.getWindow(key, 'ns', W.windowStartMs, W.windowSizeMs, nodeId)).count

  test('whole counts: each node write moves the total by its change, a refused write by nothing', async () => {
    const store = new MemoryStrategy()
    await push(store, 'a', 1, 5)
    await push(store, 'b', 1, 7)
    assert.equal(await read(store), 12)
    await push(store, 'a', 2, 9)
    assert.equal(await read(store), 16)
    // an older seq is refused: answered in its place, nothing stored
    const [refused] = await push(store, 'a', 1, 100)
    assert.deepEqual([refused?.count, refused?.own], [107, 100])
    assert.equal(await read(store), 16)
    await push(store, 'b', 2, 0)
    assert.equal(await read(store), 9)
  })

  test('decimal counts: the total is the stored counts summed in order, as exact as summing them', async () => {
    const store = new MemoryStrategy()
    await push(store, 'a', 1, 0.1)
    await push(store, 'b', 1, 0.2)
    assert.equal(await read(store), 0.1 + 0.2)
    await push(store, 'a', 2, 3)
    assert.equal(await read(store), 3 + 0.2)
    await push(store, 'b', 2, 4)
    // whole again: followed exactly from here
    assert.equal(await read(store), 7)
    await push(store, 'c', 1, 2 ** 53)
    assert.equal(await read(store), 3 + 4 + 2 ** 53)
  })

  test('a reset zeroes the total; later writes count from there; windows are per key', async () => {
    const store = new MemoryStrategy()
    await push(store, 'a', 1, 5)
    await push(store, 'a', 2, 2, 'other')
    await store.resetKey('ns', 'k', [W.windowSizeMs], 61_000)
    assert.equal(await read(store), 0)
    await push(store, 'a', 3, 8)
    assert.equal(await read(store), 3)
    assert.equal(await read(store, 'a', 'other'), 2)
    assert.equal(store.size, 2)
    await store.purge('ns', [W.windowSizeMs], 10 ** 13)
    assert.equal(store.size, 0)
  })
})
