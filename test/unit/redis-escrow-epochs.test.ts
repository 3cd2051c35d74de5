/**
 * How the Redis strategy folds its groups' epochs (one per hash slot on a Cluster) into the one
 * epoch per namespace the engine sees (src/strategies/redis/escrow-epochs.ts): losses raise it
 * once, replies that arrived before a loss showed are stale, an expired group is no loss, lost
 * writes ask for a new epoch, and each master is probed once per quarter of learnMs.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { type GroupAnswer, NamespaceEpochs } from '../../src/strategies/redis/escrow-epochs.js'

const LEARN = 4000
const GRACE = 10_000
const T = 1_800_000_000_000
const master = (group: number) => (group < 100 ? 'm1' : 'm2')

let recv = 0
const part = (group: number, epoch: number, generation: number, more: Partial<GroupAnswer> = {}): GroupAnswer => ({
  group,
  epoch: String(epoch),
  generation,
  learning: false,
  nodes: 1,
  grants: true,
  recv: ++recv,
  ...more,
})

function fold(e: NamespaceEpochs, parts: GroupAnswer[], nowMs = T) {
  return e.fold(parts, master, nowMs, GRACE, LEARN)
}

describe('NamespaceEpochs', () => {
  it('takes the first epoch seen, and groups seen later for the first time change nothing', () => {
    const e = new NamespaceEpochs()
    assert.equal(fold(e, [part(1, T, 1)]).epochMs, T)
    assert.equal(fold(e, [part(2, T + 500, 1)]).epochMs, T)
    assert.equal(fold(e, [part(1, T, 2), part(2, T + 500, 2)]).epochMs, T)
  })

  it("raises the epoch once when a group's epoch changes, and answers older replies as stale", () => {
    const e = new NamespaceEpochs()
    fold(e, [part(1, T, 1), part(2, T, 1)])
    // a reply that arrived before the loss showed, its call finishing after
    const early = part(2, T, 2)
    const lost = fold(e, [part(1, T + 9000, 1)], T + 9000)
    assert.equal(lost.epochMs, T + 9000)
    assert.equal(fold(e, [early], T + 9000).epochMs, Number.NEGATIVE_INFINITY)
    // a late reply with the old epoch of the group that lost its data: stale too
    assert.equal(fold(e, [{ ...part(1, T, 5), recv: 0 }], T + 9000).epochMs, Number.NEGATIVE_INFINITY)
    // the same master's other groups, last heard from before the loss: no second raise
    assert.equal(fold(e, [part(2, T + 9100, 1)], T + 9100).epochMs, T + 9000)
    // news after it are taken as they come
    assert.equal(fold(e, [part(1, T + 9000, 2), part(2, T + 9100, 2)], T + 9200).epochMs, T + 9000)
  })

  it('answers the parts of the call that showed a loss that arrived before it as holding nothing', () => {
    const e = new NamespaceEpochs()
    fold(e, [part(1, T, 1), part(150, T, 1)])
    const before = part(150, T, 2)
    const loss = part(1, T + 5000, 1)
    const folded = fold(e, [before, loss], T + 5000)
    assert.equal(folded.epochMs, T + 5000)
    assert.deepEqual([...folded.unknown], [0])
  })

  it('takes lost writes (the generation not above the last answered) as a loss, and asks the group for a new epoch', () => {
    const e = new NamespaceEpochs()
    fold(e, [part(1, T, 7)])
    assert.equal(e.renewOf(1), '')
    const lost = fold(e, [part(1, T, 5)], T + 100)
    assert.ok(lost.epochMs > T)
    assert.equal(e.renewOf(1), String(T))
    // the new epoch it asked for is no second loss
    assert.equal(fold(e, [part(1, T + 200, 1)], T + 200).epochMs, lost.epochMs)
    assert.equal(e.renewOf(1), '')
  })

  it('takes a new epoch of a group not heard from for the group key’s lifetime as an expiry, not a loss', () => {
    const e = new NamespaceEpochs()
    e.noteSize(60_000)
    fold(e, [part(1, T, 1)])
    const later = T + e.ttlMs(GRACE, LEARN)
    assert.equal(fold(e, [part(1, later, 1)], later).epochMs, T)
  })

  it('sizes the group key’s lifetime on the longest window, at least 10 minutes', () => {
    const e = new NamespaceEpochs()
    assert.equal(e.ttlMs(GRACE, LEARN), 600_000)
    e.noteSize(3_600_000)
    assert.equal(e.ttlMs(GRACE, LEARN), 3 * 3_600_000 + GRACE + 2 * LEARN)
  })

  it('answers learning when a part with grants learns; without grants, when every part does', () => {
    const e = new NamespaceEpochs()
    assert.equal(fold(e, [part(1, T, 1, { learning: true }), part(2, T, 1)]).learning, true)
    assert.equal(fold(e, [part(1, T, 2, { learning: true, grants: false }), part(2, T, 2)]).learning, false)
    assert.equal(fold(e, [part(1, T, 3, { learning: true, grants: false })]).learning, true)
    assert.equal(fold(e, [part(2, T, 3, { grants: false })]).learning, false)
  })

  it('keeps the largest count of processes for learnMs, as the hint of calls to other slots', () => {
    const e = new NamespaceEpochs()
    fold(e, [part(1, T, 1, { nodes: 4 })])
    fold(e, [part(2, T, 1, { nodes: 1 })], T + 100)
    assert.equal(e.hint(T + 100, LEARN), 4)
    assert.equal(e.hint(T + LEARN + 1, LEARN), 0)
  })

  it('probes one known group per master not called for a quarter of learnMs', () => {
    const e = new NamespaceEpochs()
    fold(e, [part(1, T, 1), part(150, T, 1)])
    assert.deepEqual(e.probes(new Set(), master, T + 100, LEARN), [])
    assert.deepEqual(e.probes(new Set([2]), master, T + LEARN / 4, LEARN), [150])
    assert.deepEqual(e.probes(new Set(), master, T + LEARN / 4 + 1, LEARN), [])
    assert.deepEqual(e.probes(new Set(), master, T + LEARN, LEARN).sort(), [1, 150])
  })
})
