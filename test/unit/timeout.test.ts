import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import path from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { StoreError } from '../../src/core/errors.js'
import { withTimeout } from '../../src/core/timeout.js'

const run = promisify(execFile)
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

function never(): Promise<never> {
  return new Promise<never>(() => undefined)
}

function isTimeout(err: unknown): boolean {
  return err instanceof StoreError && err.code === 'STORE_TIMEOUT' && /pushDiffs timed out after \d+ ms/.test(err.message)
}

// Runs a script in a fresh node process; resolves with its output and how long it lived.
async function lifetime(script: string): Promise<{ stdout: string; ms: number }> {
  const started = Date.now()
  const { stdout } = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: repoRoot,
    timeout: 20_000,
  })
  return { stdout, ms: Date.now() - started }
}

describe('store call timeouts (one shared deadline sweep)', () => {
  it('settles like the store call when it answers in time', async () => {
    assert.equal(await withTimeout(Promise.resolve(42), 1000, 'redis', 'pushDiffs'), 42)
    await assert.rejects(withTimeout(Promise.reject(new Error('refused')), 1000, 'redis', 'pushDiffs'), /refused/)
  })

  it('times out a hung call while calls around it answer', async () => {
    const ms = 30
    const before = withTimeout(Promise.resolve('before'), ms, 'redis', 'pushDiffs')
    const hung = withTimeout(never(), ms, 'redis', 'pushDiffs')
    const after = withTimeout(Promise.resolve('after'), ms, 'redis', 'pushDiffs')
    const started = performance.now()
    assert.equal(await before, 'before')
    assert.equal(await after, 'after')
    await assert.rejects(hung, isTimeout)
    assert.ok(performance.now() - started >= ms - 1, 'not before its deadline')
  })

  it('times out every hung call of a burst, each at its own deadline', async () => {
    const ms = 25
    const first = Array.from({ length: 100 }, () => withTimeout(never(), ms, 'redis', 'pushDiffs'))
    await new Promise((resolve) => setTimeout(resolve, 10))
    const second = Array.from({ length: 100 }, (_, i) => withTimeout(i % 2 === 0 ? never() : Promise.resolve(i), ms, 'redis', 'pushDiffs'))
    const results = await Promise.allSettled([...first, ...second])
    const timedOut = results.filter((r) => r.status === 'rejected' && isTimeout(r.reason)).length
    assert.equal(timedOut, 150, 'the 100 hung calls of the first burst and the 50 of the second')
  })

  it('keeps the process alive until a pending call times out', async () => {
    const { stdout } = await lifetime(`
      import { withTimeout } from './src/core/timeout.ts'
      withTimeout(new Promise(() => {}), 200, 'redis', 'pushDiffs').catch((err) => console.log(err.code))
    `)
    assert.equal(stdout.trim(), 'STORE_TIMEOUT')
  })

  it('does not keep the process alive once the calls have answered', async () => {
    const { stdout, ms } = await lifetime(`
      import { withTimeout } from './src/core/timeout.ts'
      for (let i = 0; i < 3; i++) console.log(await withTimeout(Promise.resolve(i), 60_000, 'redis', 'pushDiffs'))
    `)
    assert.equal(stdout.trim(), '0\n1\n2')
    assert.ok(ms < 15_000, `exited after ${ms} ms, not after the 60 s timeout`)
  })
})
