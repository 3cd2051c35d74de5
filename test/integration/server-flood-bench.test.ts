/**
 * The flood benchmark on tiny inputs (bench/flood.bench.ts): it runs end to end against a
 * service process and a redis-server of its own, and reports a finite figure in every cell.
 * Nothing here is timed: the figures are the benchmark's business.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import path from 'node:path'
import { describe, it } from 'node:test'
import { root } from './server-helpers.js'

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'bench/flood.bench.ts'), ...args], { cwd: root })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (d) => {
      stdout += d.toString()
    })
    child.stderr.on('data', (d) => {
      stderr += d.toString()
    })
    child.once('error', reject)
    child.once('exit', (code) => resolve({ code, stdout, stderr }))
  })
}

describe('flood benchmark (tiny inputs)', { timeout: 120_000 }, () => {
  it('floods the service, holds keys on Redis, and fills every cell of its tables', async () => {
    const { code, stdout, stderr } = await run([
      '--ids',
      '2000',
      '--held',
      '1000',
      '--active-share',
      '0.1',
      '--sync-rate',
      '0.2',
      '--active-seconds',
      '1',
      '--connections',
      '4',
      '--algos',
      'sliding-window-algo,fixed-window-algo',
      '--no-write',
    ])
    assert.equal(code, 0, stderr)
    const rows = stdout.split('\n').filter((l) => /^\| (sliding-window-algo|fixed-window-algo|one per slot|`batch-across-slots`) /.test(l))
    assert.equal(rows.length, 6, stdout)
    for (const row of rows) assert.doesNotMatch(row, /n\/a|NaN|Infinity/, row)
    assert.match(stdout, /\| one per slot \| 1,000 \| 100 \|/, 'held keys and active ids, script calls per slot')
    assert.match(stdout, /\| `batch-across-slots` \| 1,000 \| 100 \|/, 'and batched across slots')
  })
})
