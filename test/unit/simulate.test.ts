/**
 * The simulator's core (src/simulate): the exact-log truth, the synthetic traces, and the grid's
 * answers on small synthetic traces, which must show what the algorithms are known to do: the
 * sliding log never over-admits, a fixed window lets a boundary burst reach twice the limit, and
 * the counter's over-admission grows with the processes and the time between syncs. The ways the
 * replay is made faster (worker threads, a process's shards packed into shared instances) must
 * not change one figure.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { runGridParallel } from '../../src/simulate/parallel.js'
import { syntheticTrace } from '../../src/simulate/profiles.js'
import { ALGORITHMS, availableAlgorithms, type CellResult, gridCells, runCell, runGrid } from '../../src/simulate/replay.js'
import { recommend } from '../../src/simulate/report.js'
import { hottestKey, TraceBuilder } from '../../src/simulate/trace.js'
import { ExactTruth } from '../../src/simulate/truth.js'

const entry = (name: string) => ALGORITHMS.find((a) => a.name === name) ?? assert.fail(name)

describe('ExactTruth', () => {
  it('scores decisions against an exact log of the admitted hits', () => {
    const truth = new ExactTruth(2, 1000, 1)
    truth.record(0, 0, true, true, 0) // log: [0]
    truth.record(0, 100, true, true, 1) // log: [0, 100]
    truth.record(0, 200, true, true, 2) // the log denies: a false allow; 3 in (−800, 200]
    truth.record(0, 1100, false, true, 3) // (100, 1100] holds 200 only: the log allows, a false deny
    truth.record(0, 1201, false, true, 3) // (201, 1201] holds none: another false deny
    const m = truth.metrics()
    assert.equal(m.hits, 5)
    assert.equal(m.allowed, 3)
    assert.equal(m.worstWindow, 1.5)
    assert.equal(m.keysOver, 1)
    assert.equal(m.falseAllowShare, 1 / 5)
    assert.equal(m.falseDenyShare, 2 / 5)
    assert.equal(m.falseDenyRuns, 1) // the two false denials follow each other
    // counted hits in the window before each hit: 0, 1, 2, 1 (200), 1 (1100); the rates given: 0, 1, 2, 3, 3
    assert.equal(m.meanRateError, (0 + 0 + 0 + 2 + 2) / 5 / 2)
  })

  it('counts a run of false denials once, and a false deny after an allowed hit as a new run', () => {
    const truth = new ExactTruth(2, 1000, 2)
    truth.record(0, 0, false, true, 0) // the log allows: a run starts
    truth.record(1, 10, false, true, 0) // another key: a run of its own
    truth.record(0, 20, false, true, 0) // key 0's run goes on
    truth.record(0, 30, true, true, 0) // allowed: the run ends
    truth.record(0, 40, false, true, 0) // the log allows (1 admitted of 2): a new run
    const m = truth.metrics()
    assert.equal(m.falseDenyShare, 4 / 5)
    assert.equal(m.falseDenyRuns, 3)
  })

  it('an interval is (t − window, t]: a hit exactly one window later is in a new window', () => {
    const truth = new ExactTruth(1, 1000, 1)
    truth.record(0, 0, true, true, 0)
    truth.record(0, 1000, true, true, 0)
    assert.equal(truth.metrics().worstWindow, 1)
    assert.equal(truth.metrics().falseAllowShare, 0)
  })
})

describe('traces', () => {
  it('TraceBuilder sorts stably and spreads requests logged in one second across it', () => {
    const b = new TraceBuilder()
    b.add(2000, 'b')
    b.add(1000, 'a')
    b.add(1000, 'c')
    b.add(1000, 'a')
    const t = b.build()
    assert.deepEqual([...t.times], [1000, 1333, 1666, 2000])
    assert.deepEqual(
      [...t.keys].map((k) => t.keyNames[k]),
      ['a', 'c', 'a', 'b'],
    )
    assert.equal(t.keyNames[hottestKey(t)], 'a')
  })

  it('synthetic profiles are repeatable and shaped as named', () => {
    const a = syntheticTrace({ profile: 'poisson', limit: 100, windowSec: 60, durationSec: 120, keys: 50, seed: 7 })
    const b = syntheticTrace({ profile: 'poisson', limit: 100, windowSec: 60, durationSec: 120, keys: 50, seed: 7 })
    assert.deepEqual([...a.times], [...b.times])
    const steady = syntheticTrace({ profile: 'steady', limit: 100, windowSec: 60, durationSec: 60 })
    assert.equal(steady.length, 150)
    const burst = syntheticTrace({ profile: 'boundary', limit: 10, windowSec: 60, durationSec: 120, keys: 1 })
    assert.equal(burst.length, 20)
    assert.throws(() => syntheticTrace({ profile: 'steady', limit: 0, windowSec: 60 }), /limit must be a positive integer, got 0/)
  })
})

describe('the grid on synthetic traces', () => {
  const setup = { limit: 20, windowSec: 10 }

  it('the sliding log never over-admits nor errs; the fixed window lets a boundary burst reach 2x', async () => {
    const trace = syntheticTrace({ profile: 'boundary', limit: 20, windowSec: 10, durationSec: 60, keys: 5 })
    const [fixed, log] = await runGrid(trace, gridCells([entry('fixed-window'), entry('sliding-log')], [1], [1]), setup)
    assert.equal(log?.worstWindow, 1)
    assert.equal(log?.falseAllowShare, 0)
    assert.equal(log?.falseDenyShare, 0)
    assert.equal(log?.meanRateError, 0)
    assert.equal(fixed?.worstWindow, 2)
    assert.equal(fixed?.keysOver, 5)
    assert.ok((fixed?.falseAllowShare ?? 0) > 0.2)
  })

  it("the counter's over-admission grows with the nodes and the sync rate", async () => {
    const trace = syntheticTrace({ profile: 'steady', limit: 20, windowSec: 10, durationSec: 120 })
    const run = (nodes: number, syncRate: number) =>
      runCell(trace, { algorithm: entry('counter'), nodes, syncRate }, { ...setup, countDenied: false }).then((r) => r.worstWindow)
    const single = await run(1, 1)
    const [n2, n8] = [await run(2, 1), await run(8, 1)]
    const [fast, slow] = [await run(8, 0.1), await run(8, 4)]
    assert.ok(single <= 1.2, `one process: ${single}`)
    assert.ok(n2 > single && n8 > n2, `1, 2, 8 nodes at 1 s: ${single}, ${n2}, ${n8}`)
    assert.ok(fast < n8 && n8 < slow, `8 nodes at 0.1, 1, 4 s: ${fast}, ${n8}, ${slow}`)
  })

  it('one process decides alike whatever its sync rate, and the sync rate costs store calls', async () => {
    const trace = syntheticTrace({ profile: 'poisson', limit: 20, windowSec: 10, durationSec: 60, keys: 40 })
    const results: CellResult[] = await runGrid(trace, gridCells([entry('counter')], [1, 4], [0.1, 2]), setup)
    const [a, b] = results.filter((r) => r.nodes === 1)
    assert.equal(a?.allowed, b?.allowed)
    assert.ok((a?.storeCallsPerSec ?? 0) > (b?.storeCallsPerSec ?? 0))
    const recs = recommend(results, 10)
    assert.deepEqual(
      recs.map((r) => r.syncRate),
      [2, 2],
    )
  })

  it('cells replayed on worker threads answer exactly what one thread does, in the same order', async () => {
    const trace = syntheticTrace({ profile: 'poisson', limit: 20, windowSec: 10, durationSec: 60, keys: 40 })
    const cells = gridCells([entry('fixed-window'), entry('sliding-log'), entry('counter')], [1, 4], [0.1, 2])
    const withTrack = { ...setup, track: hottestKey(trace) }
    const figures = (results: CellResult[]) => results.map(({ replayMs: _ms, ...rest }) => rest)
    const one = await runGrid(trace, cells, withTrack)
    const seen: number[] = []
    const two = await runGridParallel(trace, cells, withTrack, { jobs: 2, progress: (done, total) => seen.push(done / total) })
    assert.deepEqual(figures(two), figures(one))
    assert.ok(one[2]?.series !== undefined && one[2].series.t.length > 0)
    assert.deepEqual(
      seen.filter((s, i) => i > 0 && s < (seen[i - 1] as number)),
      [],
      'progress never goes back',
    )
    assert.equal(seen.at(-1), 1)
  })

  it("a process's shards answer alike whether each is an instance of its own or many share one", async () => {
    const trace = syntheticTrace({ profile: 'poisson', limit: 20, windowSec: 10, durationSec: 60, keys: 40 })
    const cell = { algorithm: entry('counter'), nodes: 4, syncRate: 0.5 }
    const figures = ({ replayMs: _ms, ...rest }: CellResult) => rest
    const packed = await runCell(trace, cell, setup)
    const apart = await runCell(trace, cell, { ...setup, shardsPerInstance: 1 })
    assert.deepEqual(figures(apart), figures(packed))
  })

  it('tells onHit every decision in time order, with the process that made it', async () => {
    const trace = syntheticTrace({ profile: 'boundary', limit: 20, windowSec: 10, durationSec: 60, keys: 3 })
    const seen: { t: number; node: number; allowed: boolean }[] = []
    const r = await runCell(
      trace,
      { algorithm: entry('counter'), nodes: 4, syncRate: 0.5 },
      {
        ...setup,
        onHit: (_key, t, node, allowed) => seen.push({ t, node, allowed }),
      },
    )
    assert.equal(seen.length, r.hits)
    assert.equal(seen.filter((h) => h.allowed).length, r.allowed)
    assert.deepEqual(
      seen.map((h) => h.t),
      [...trace.times],
    )
    assert.deepEqual(
      seen.map((h) => h.node),
      seen.map((_, i) => i % 4),
      'hits go to the processes in turn',
    )
  })

  it('lists every algorithm the engine runs', () => {
    const names = availableAlgorithms().map((a) => a.name)
    assert.deepEqual(names, ['fixed-window', 'sliding-log', 'counter', 'counter-escrow'])
  })
})
