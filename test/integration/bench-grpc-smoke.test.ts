/**
 * The gRPC benchmark (bench/grpc.bench.ts) in quick mode on the memory store: it starts the floor
 * and the service in processes of their own, drives them with both load generators, and yields a
 * finite positive rate in every cell. Nothing here is timed: the figures are the benchmark's
 * business.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, it } from 'node:test'
import { type GrpcBenchResult, QUICK_OPTIONS, renderSection, runGrpcBench, SECTION_HEADING, writeSection } from '../../bench/grpc.bench.js'

const CELLS = ['memory-fixed', 'memory-counter'] as const
const CLIENTS = ['grpc-js', 'h2'] as const

describe('gRPC benchmark (quick mode, memory store)', { timeout: 120_000 }, () => {
  let result: GrpcBenchResult

  it('measures a finite positive rate in every cell, at every number in flight, with each client', async () => {
    result = await runGrpcBench({ ...QUICK_OPTIONS, durationMs: 200, warmupMs: 50, startWarmupMs: 100, cells: CELLS, clients: CLIENTS })
    assert.equal(result.rows.length, (1 + CELLS.length) * QUICK_OPTIONS.inflight.length * CLIENTS.length)
    for (const cell of ['floor', ...CELLS]) {
      for (const client of CLIENTS) {
        for (const inflight of QUICK_OPTIONS.inflight) {
          const row = result.rows.find((r) => r.cell === cell && r.client === client && r.inflight === inflight)
          const what = `${cell}, ${client}, ${inflight} in flight`
          assert.ok(row !== undefined, `no row for ${what}`)
          assert.ok(Number.isFinite(row.rate) && row.rate > 0, `${what}: rate ${row.rate}`)
          assert.ok(Number.isFinite(row.ratio) && row.ratio > 0, `${what}: share of the floor ${row.ratio}`)
          assert.ok(Number.isFinite(row.p50Ms) && Number.isFinite(row.p99Ms), `${what}: latency ${row.p50Ms} / ${row.p99Ms}`)
          // a call answered anything but OK is an error: the rule's limit is never reached
          assert.equal(row.errors, 0, `${what}: errors`)
          assert.ok(Number.isNaN(row.commandsPerDecision), `${what}: no Redis on the memory store`)
        }
      }
    }
  })

  it('renders a table row per cell and replaces only its own section of the file', () => {
    const section = renderSection(result, {
      date: '2000-01-01',
      cpu: 'test CPU',
      cores: 2,
      node: 'v20',
      command: 'node bench',
      load: [0, 0],
    })
    assert.ok(section.startsWith(SECTION_HEADING))
    for (const row of result.rows) assert.ok(section.includes(`| ${row.label} | ${row.inflight} |`), `no row for ${row.label}`)
    assert.doesNotMatch(section, /NaN|Infinity/)

    const dir = mkdtempSync(path.join(tmpdir(), 'bench-grpc-'))
    try {
      const file = path.join(dir, 'BENCHMARKS-gateway.md')
      writeFileSync(file, '# Benchmarks: the gateways\n\n## Forward-auth\n\nkept\n')
      writeSection(file, `${SECTION_HEADING}\n\nfirst run\n`)
      writeSection(file, `${SECTION_HEADING}\n\nsecond run\n`)
      const text = readFileSync(file, 'utf8')
      assert.ok(text.includes('## Forward-auth\n\nkept') && text.includes('second run') && !text.includes('first run'), text)
      assert.equal(text.split(SECTION_HEADING).length, 2)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
