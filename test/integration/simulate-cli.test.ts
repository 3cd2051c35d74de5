/**
 * `ratelimiting simulate` end to end, run as users run it (`node --import tsx src/server/cli.ts
 * simulate …`), and its log readers on real files: combined, JSON lines, CSV, gzip told by its
 * bytes, bad lines counted and reported by number, empty logs and logs without keys refused.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { gzipSync } from 'node:zlib'
import { EmptyLogError, readLog } from '../../src/simulate/readers.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const dir = mkdtempSync(path.join(tmpdir(), 'simulate-'))
const file = (name: string, content: string | Buffer) => {
  const p = path.join(dir, name)
  writeFileSync(p, content)
  return p
}

function run(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, ['--import', 'tsx', 'src/server/cli.ts', 'simulate', ...args], { cwd: root }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : 1, stdout, stderr })
    })
  })
}

const combined = [
  '10.0.0.1 - - [10/Oct/2024:13:55:36 +0000] "GET / HTTP/1.1" 200 2326 "-" "curl/8"',
  '10.0.0.2 - alice [10/Oct/2024:13:55:36 +0000] "GET /a HTTP/1.1" 200 12 "-" "curl/8"',
  'garbage that is not a log line',
  '10.0.0.1 - - [10/Oct/2024:13:55:37 +0200] "GET / HTTP/1.1" 200 2326 "-" "curl/8"',
].join('\n')

describe('log readers', () => {
  it('combined: client address as key, the time zone applied, a bad line counted by number', async () => {
    const read = await readLog(file('access.log', combined))
    assert.equal(read.format, 'combined')
    assert.equal(read.trace.length, 3)
    assert.deepEqual(read.trace.keyNames, ['10.0.0.1', '10.0.0.2'])
    assert.equal(read.trace.times[0], Date.UTC(2024, 9, 10, 11, 55, 37)) // +0200 sorts first
    assert.deepEqual(read.firstBad, [{ line: 3, reason: 'not a combined log line' }])
    const users = await readLog(file('access2.log', combined), { keyField: 'user', format: 'combined' })
    assert.deepEqual(users.trace.keyNames, ['alice'])
    assert.equal(users.badLines, 3)
  })

  it('JSON lines with named fields (nested, epoch seconds or ISO), gzipped, told by its bytes', async () => {
    const lines = [
      JSON.stringify({ ts: 1_700_000_000.5, client: { ip: 'a' } }),
      '{not json',
      JSON.stringify({ ts: '2023-11-14T22:13:21Z', client: { ip: 'b' } }),
      JSON.stringify({ ts: 1_700_000_002_000 }),
    ].join('\n')
    const read = await readLog(file('log.jsonl.whatever', gzipSync(lines)), { timeField: 'ts', keyField: 'client.ip' })
    assert.equal(read.format, 'jsonl')
    assert.deepEqual([...read.trace.times], [1_700_000_000_500, 1_700_000_001_000])
    assert.deepEqual(read.firstBad, [
      { line: 2, reason: 'not valid JSON' },
      { line: 4, reason: 'no field "client.ip"' },
    ])
  })

  it('CSV with a header and quoted fields; a missing column is a clear error', async () => {
    const read = await readLog(file('log.csv', 'when,who,path\n1700000000,"x, y",/\n1700000001,z,"/a ""b"""\nbad,z,/\n'), {
      timeField: 'when',
      keyField: 'who',
    })
    assert.deepEqual(read.trace.keyNames, ['x, y', 'z'])
    assert.deepEqual(read.firstBad, [{ line: 4, reason: 'bad time "bad"' }])
    await assert.rejects(readLog(file('nokey.csv', 'time,ip\n1,a\n')), /CSV header has no column "key"/)
  })

  it('an empty log, a header only, or no line with a key: EmptyLogError', async () => {
    await assert.rejects(
      readLog(file('empty.log', '')),
      (err: unknown) => err instanceof EmptyLogError && /no requests in it \(0 lines\)/.test(err.message),
    )
    await assert.rejects(readLog(file('header.csv', 'time,key\n')), /a header only/)
    await assert.rejects(
      readLog(file('nokeys.jsonl', '{"time": 1}\n{"time": 2}\n')),
      /no line could be read \(2 bad lines; line 1: no field "key"\)/,
    )
  })
})

describe('ratelimiting simulate', () => {
  it('replays a log (two cells at a time, on worker threads) and prints the table, the bad line and a recommendation', async () => {
    const lines: string[] = []
    for (let s = 0; s < 300; s++)
      for (const ip of ['10.0.0.1', '10.0.0.2']) {
        const m = String(Math.floor(s / 60)).padStart(2, '0')
        const sec = String(s % 60).padStart(2, '0')
        lines.push(`${ip} - - [10/Oct/2024:13:${m}:${sec} +0000] "GET / HTTP/1.1" 200 1 "-" "x"`)
      }
    lines.splice(10, 0, 'not a log line')
    const log = file('big.log', gzipSync(lines.join('\n')))
    const json = path.join(dir, 'out.json')
    const r = await run([
      log,
      '--limit',
      '30',
      '--window',
      '60',
      '--nodes',
      '1,4',
      '--sync-rate',
      '0.5,2',
      '--json',
      json,
      '--algorithms',
      'sliding-log,counter',
      '--jobs',
      '2',
    ])
    assert.equal(r.code, 0, r.stderr)
    assert.match(r.stdout, /600 requests, 2 keys/)
    assert.match(r.stdout, /1 line\(s\) could not be read and were not replayed \(line 11: not a combined log line\)/)
    assert.match(r.stdout, /sliding log\s+any\s+per hit\s+1\.00x\s+0\.00%\s+0\.00%/)
    assert.match(r.stdout, /4 node\(s\): sync every/)
    const report = JSON.parse(readFileSync(json, 'utf8'))
    assert.equal(report.cells.length, 5)
    assert.equal(report.run.badLines, 1)
    assert.deepEqual(
      report.cells.map((c: { algorithm: string }) => c.algorithm),
      ['sliding-log', 'counter', 'counter', 'counter', 'counter'],
    )
  })

  it('--json - writes the JSON to stdout; a synthetic profile needs no file', async () => {
    const r = await run([
      '--profile',
      'boundary',
      '--limit',
      '10',
      '--window',
      '10',
      '--keys',
      '2',
      '--duration',
      '40',
      '--nodes',
      '2',
      '--sync-rate',
      '1',
      '--json',
      '-',
      '--algorithms',
      'fixed-window',
    ])
    assert.equal(r.code, 0, r.stderr)
    const report = JSON.parse(r.stdout)
    assert.equal(report.cells[0].worstWindow, 2)
  })

  it('bad input and bad flags: a clear message and exit codes 3 and 2', async () => {
    const empty = await run([file('none.log', ''), '--limit', '10', '--window', '60'])
    assert.equal(empty.code, 3)
    assert.match(empty.stderr, /none\.log: no requests in it \(0 lines\)/)
    const missing = await run([path.join(dir, 'missing.log'), '--limit', '10', '--window', '60'])
    assert.equal(missing.code, 3)
    assert.match(missing.stderr, /ENOENT/)
    const noLimit = await run([file('one.log', combined)])
    assert.equal(noLimit.code, 2)
    assert.match(noLimit.stderr, /give the limit with --limit N --window SECONDS/)
    const badNodes = await run([file('two.log', combined), '--limit', '10', '--window', '60', '--nodes', '1,x'])
    assert.equal(badNodes.code, 2)
    assert.match(badNodes.stderr, /--nodes must be a comma-separated list of positive integers, got "1,x"/)
    const badJobs = await run(['--profile', 'steady', '--limit', '10', '--window', '60', '--jobs', '0'])
    assert.equal(badJobs.code, 2)
    assert.match(badJobs.stderr, /--jobs must be a positive integer, got "0"/)
    const unknown = await run(['--profile', 'steady', '--limit', '10', '--window', '60', '--algorithms', 'leaky'])
    assert.equal(unknown.code, 2)
    assert.match(unknown.stderr, /algorithm must be one of fixed-window, sliding-log, counter, counter-escrow, got "leaky"/)
  })
})
