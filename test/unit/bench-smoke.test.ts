import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, before, describe, it } from 'node:test'
import { compileLoop, median } from '../../bench/lib/harness.js'
import { loadOurs } from '../../bench/lib/load-ours.js'
import { renderSection, SECTION_HEADING, writeSection } from '../../bench/lib/report.js'
import { type BenchResult, QUICK_CONFIG, runEngineBench } from '../../bench/lib/run.js'
import { subjects } from '../../bench/lib/subjects.js'

// The engine benchmark on tiny inputs: every subject must yield a number, whatever the timing.
const TINY = { ...QUICK_CONFIG, rounds: 2, targetMs: 1, warmupMs: 0, manyKeys: 50, floodKeys: 200, memoryKeys: 2_000, clockTurns: 20 }

const positive = (value: number, what: string) => assert.ok(Number.isFinite(value) && value > 0, `${what}: got ${value}`)

describe('engine benchmark harness (quick mode, tiny inputs)', () => {
  let result: BenchResult
  let ids: { id: string; patterns: readonly string[]; memory: boolean }[]

  before(async () => {
    result = await runEngineBench(TINY)
    const engine = await loadOurs('source')
    ids = subjects(engine.ours).map(({ id, patterns, memory }) => ({ id, patterns, memory }))
  })

  it('measures a finite positive time per call for every subject in each of its key patterns', () => {
    for (const { id, patterns } of ids) {
      for (const pattern of patterns) {
        const timing = result.timings.find((t) => t.id === id && t.pattern === pattern)
        assert.ok(timing !== undefined, `no timing for ${id} in ${pattern}`)
        assert.equal(timing.samples.length, TINY.rounds)
        for (const sample of timing.samples) positive(sample, `${id} ${pattern} sample`)
        positive(timing.medianNs, `${id} ${pattern} median`)
      }
    }
  })

  it('measures a finite positive heap per key for every subject with a memory figure', () => {
    for (const { id, memory } of ids.filter((s) => s.memory)) {
      const m = result.memory.find((r) => r.id === id)
      assert.ok(m !== undefined && memory, `no heap figure for ${id}`)
      assert.equal(m.keys, TINY.memoryKeys)
      positive(m.bytesPerKey, `${id} bytes per key`)
    }
  })

  it('measures a finite positive cost for every clock read', () => {
    assert.equal(result.clocks.length, 3)
    for (const c of result.clocks) positive(c.medianNs, c.label)
    for (const t of result.perTurn) assert.ok(Number.isFinite(t.extraNs), t.label)
  })

  it('renders one table row per subject under the section heading', () => {
    const section = renderSection(result, { date: '2000-01-01', node: 'v20', cpu: 'test CPU', cores: 2, command: 'node bench' })
    assert.ok(section.startsWith(SECTION_HEADING))
    for (const { id } of ids) {
      const label = result.timings.find((t) => t.id === id)?.label
      assert.ok(label !== undefined && section.includes(`| ${label} |`), `no row for ${id}`)
    }
  })
})

describe('benchmark report file', () => {
  let dir: string
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'bench-report-'))
  })
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('creates the file with an intro, then replaces only its own section on later runs', () => {
    const path = join(dir, 'BENCHMARKS.md')
    writeSection(path, `${SECTION_HEADING}\n\nfirst run\n`)
    const created = readFileSync(path, 'utf8')
    assert.match(created, /^# Benchmarks/)
    assert.match(created, /--quick/)
    writeFileSync(path, `${created}\n## HTTP: middleware\n\nkept\n`)
    writeSection(path, `${SECTION_HEADING}\n\nsecond run\n`)
    const updated = readFileSync(path, 'utf8')
    assert.ok(updated.includes('second run') && !updated.includes('first run'))
    assert.ok(updated.includes('## HTTP: middleware\n\nkept'))
    assert.equal(updated.split(SECTION_HEADING).length, 2)
  })
})

describe('timed loop', () => {
  it('awaits async calls and catches their rejections', async () => {
    const loop = compileLoop(true)
    let calls = 0
    const state = { cursor: 0, sink: undefined as unknown }
    const op = async () => {
      calls++
      throw new Error('denied')
    }
    const elapsed = await loop(op, ['a', 'b', 'c'], 5, state)
    assert.equal(calls, 5)
    assert.equal(state.cursor, 2)
    assert.ok(state.sink instanceof Error)
    positive(elapsed, 'elapsed ns')
  })

  it('takes the median of odd and even lists', () => {
    assert.equal(median([3, 1, 2]), 2)
    assert.equal(median([4, 1, 3, 2]), 2.5)
  })
})
