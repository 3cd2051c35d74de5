/**
 * The top-keys sketches of GET /v1/top: Space-Saving finds the heavy keys of a skewed trace
 * within its error bounds, holds a fixed number of keys under a flood, and the ring of
 * sub-windows forgets what is older than its window (a clock the test moves).
 */
import v8 from 'node:v8'
import { runInNewContext } from 'node:vm'
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { SlidingTopKeys, SpaceSaving, TopKeys } from '../../src/server/top-keys.js'

// a seeded generator (mulberry32), so a failure replays
function random(seed: number): () => number {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

// Zipf(s) over `keys` keys by inverse transform on the cumulative weights
function zipf(keys: number, s: number, rand: () => number): () => string {
  const cumulative = new Float64Array(keys)
  let sum = 0
  for (let i = 0; i < keys; i++) cumulative[i] = sum += 1 / (i + 1) ** s
  return () => {
    const x = rand() * sum
    let lo = 0
    let hi = keys - 1
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if ((cumulative[mid] as number) < x) lo = mid + 1
      else hi = mid
    }
    return `user-${lo}`
  }
}

function exactTop(counts: Map<string, number>, n: number): string[] {
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .slice(0, n)
    .map(([k]) => k)
}

describe('SpaceSaving', () => {
  it('counts exactly while it holds every key', () => {
    const s = new SpaceSaving(4)
    for (const k of ['a', 'b', 'a', 'c', 'a', 'b']) s.add(k)
    assert.deepEqual(s.get('a'), { count: 3, error: 0 })
    assert.deepEqual(s.get('b'), { count: 2, error: 0 })
    assert.deepEqual(s.get('c'), { count: 1, error: 0 })
    assert.equal(s.full, false)
    assert.equal(s.min, 1)
  })

  it('hands the smallest counter to a new key when full, with that count as its error', () => {
    const s = new SpaceSaving(2)
    for (const k of ['a', 'a', 'a', 'b', 'b', 'c']) s.add(k)
    assert.equal(s.get('b'), undefined)
    assert.deepEqual(s.get('c'), { count: 3, error: 2 })
    assert.deepEqual(s.get('a'), { count: 3, error: 0 })
    assert.equal(s.size, 2)
  })

  it('keeps its counts summing to the stream length, each key within its bounds, on random streams', () => {
    const rand = random(3)
    for (let run = 0; run < 50; run++) {
      const capacity = 1 + Math.floor(rand() * 8)
      const s = new SpaceSaving(capacity)
      const exact = new Map<string, number>()
      const length = Math.floor(rand() * 300)
      for (let i = 0; i < length; i++) {
        const k = `k${Math.floor(rand() * rand() * 20)}`
        s.add(k)
        exact.set(k, (exact.get(k) ?? 0) + 1)
      }
      let sum = 0
      let smallest = Number.POSITIVE_INFINITY
      s.forEach((key, count, error) => {
        sum += count
        smallest = Math.min(smallest, count)
        const truth = exact.get(key) ?? 0
        assert.ok(truth <= count && truth >= count - error, `run ${run}, ${key}: true ${truth}, ${count} - ${error}`)
      })
      assert.equal(sum, length, 'Space-Saving: the counters sum to the stream length')
      assert.equal(s.size, Math.min(capacity, exact.size))
      if (s.size > 0) assert.equal(s.min, smallest)
      // a key not held counted at most the smallest count
      for (const [key, truth] of exact) if (s.get(key) === undefined) assert.ok(truth <= s.min, `${key} ${truth} > min ${s.min}`)
    }
  })

  it('finds the real top 10 of a Zipf trace, every true count within [count - error, count]', () => {
    const next = zipf(50_000, 1.1, random(7))
    const s = new SpaceSaving(128)
    const exact = new Map<string, number>()
    for (let i = 0; i < 200_000; i++) {
      const k = next()
      s.add(k)
      exact.set(k, (exact.get(k) ?? 0) + 1)
    }
    const held: Array<{ key: string; count: number; error: number }> = []
    s.forEach((key, count, error) => held.push({ key, count, error }))
    for (const { key, count, error } of held) {
      const truth = exact.get(key) ?? 0
      assert.ok(truth <= count && truth >= count - error, `${key}: true ${truth}, estimate ${count} - ${error}`)
    }
    const top = held.sort((a, b) => b.count - a.count).slice(0, 10)
    assert.deepEqual(new Set(top.map((e) => e.key)), new Set(exactTop(exact, 10)))
  })
})

describe('SlidingTopKeys', () => {
  it('merges sub-windows: the real top 10 of a skewed minute, error bounds holding', () => {
    const start = 1_700_000_000_000 // the start of a sub-window
    let now = start
    const top = new SlidingTopKeys({ capacity: 128, slots: 6, slotMs: 10_000 })
    const next = zipf(20_000, 1.2, random(11))
    const hits = new Map<string, number>()
    const denials = new Map<string, number>()
    for (let i = 0; i < 120_000; i++) {
      now = start + i * 0.5 // 60 s in all, six sub-windows
      const k = next()
      // the heavier a key, the more often it is over its limit
      const denied = Number(k.slice(5)) < 30 && i % 3 !== 0
      top.record(k, denied, now)
      hits.set(k, (hits.get(k) ?? 0) + 1)
      if (denied) denials.set(k, (denials.get(k) ?? 0) + 1)
    }
    const report = top.top(10, now)
    assert.equal(report.windowSeconds, 60)
    for (const [list, exact] of [
      [report.byHits, hits],
      [report.byDenials, denials],
    ] as const) {
      assert.equal(list.length, 10)
      assert.deepEqual(new Set(list.map((e) => e.key)), new Set(exactTop(exact, 10)))
      for (const e of list) {
        const truth = exact.get(e.key) ?? 0
        assert.ok(truth <= e.count && truth >= e.count - e.error, `${e.key}: true ${truth}, ${e.count} - ${e.error}`)
      }
    }
  })

  it('holds a bounded number of keys under a flood of 1 M distinct keys', () => {
    const top = new SlidingTopKeys({ capacity: 128, slots: 6, slotMs: 10_000 })
    // a real collection before each reading, whatever flags the test runner was started with:
    // without it the heap holds the flood's garbage strings, which say nothing of the sketches
    v8.setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    gc()
    const before = process.memoryUsage().heapUsed
    let now = 0
    for (let i = 0; i < 1_000_000; i++) {
      top.record(`flood-${i}`, i % 2 === 0, now)
      now += 0.06 // the flood spans the whole minute, every sub-window
    }
    assert.ok(top.size <= 6 * 2 * 128, `${top.size} keys held`)
    gc()
    const grown = process.memoryUsage().heapUsed - before
    // 1 M keys held would be tens of MB; the sketches are a few hundred KB (loose: other garbage)
    assert.ok(grown < 16 * 1024 * 1024, `heap grew ${grown} bytes`)
    const report = top.top(10, now)
    for (const e of report.byHits) assert.ok(e.count - e.error <= 1, 'no key of a flood is known to count more than once')
  })

  it('forgets the counts older than the window as the clock moves', () => {
    let now = 1_000_000
    const top = new TopKeys({ clock: () => now })
    const p = top.policy('api')
    for (let i = 0; i < 5; i++) p.record('old', true, top.clock())
    now += 30_000
    for (let i = 0; i < 3; i++) p.record('new', false, top.clock())
    assert.deepEqual(
      top.topOfPolicy('api', 10).byHits.map((e) => [e.key, e.count]),
      [
        ['old', 5],
        ['new', 3],
      ],
    )
    now += 30_000 // 'old' was counted 60 s ago: its sub-window left the minute
    const report = top.topOfPolicy('api', 10)
    assert.deepEqual(
      report.byHits.map((e) => [e.key, e.count]),
      [['new', 3]],
    )
    assert.deepEqual(report.byDenials, [])
    now += 60_000
    p.record('later', false, top.clock()) // the ring turns lazily, on use
    assert.deepEqual(
      top.topOfPolicy('api', 10).byHits.map((e) => e.key),
      ['later'],
    )
  })
})
