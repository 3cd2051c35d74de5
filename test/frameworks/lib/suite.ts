/**
 * Runs a framework's own (vendored) test suite in a child process and checks its per-test
 * results against the lists in the suite's folder: see test/frameworks/README.md.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import type { TestContext } from 'node:test'
import { fileURLToPath } from 'node:url'

export const frameworksDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const repoRoot = path.resolve(frameworksDir, '../..')

export type Status = 'passed' | 'failed' | 'skipped'

export interface TestResult {
  readonly name: string
  readonly status: Status
  /** First line of the failure, when it failed. */
  readonly error?: string
}

/** Test name → one-line reason. */
export type Reasons = Readonly<Record<string, string>>

interface Child {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

function run(command: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Child> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()))
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()))
    // a suite that hangs is a failure with its output, not a hung run
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
    child.on('error', reject)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ code, stdout, stderr })
    })
  })
}

function suiteEnv(extra: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, FORCE_COLOR: '0', ...extra }
  // the parent's node:test context must not leak into the child's runner; CI changes what
  // express-rate-limit's suite skips
  delete env.NODE_TEST_CONTEXT
  delete env.CI
  return env
}

/** Runs a Jest suite (its config file) and returns every test's result. */
export async function runJest(configPath: string, env: NodeJS.ProcessEnv = {}, timeoutMs = 240_000): Promise<TestResult[]> {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratelimiting-jest-'))
  const outputFile = path.join(dir, 'results.json')
  try {
    const jest = path.join(repoRoot, 'node_modules/jest/bin/jest.js')
    const child = await run(
      process.execPath,
      [jest, '--config', configPath, '--json', '--outputFile', outputFile, '--ci', '--runInBand', '--silent'],
      path.dirname(configPath),
      suiteEnv(env),
      timeoutMs,
    )
    let report: { testResults: { message: string; name: string; assertionResults: JestAssertion[] }[] }
    try {
      report = JSON.parse(readFileSync(outputFile, 'utf8')) as typeof report
    } catch {
      throw new Error(`jest left no results (exit ${child.code}):\n${child.stderr.slice(-4000)}`)
    }
    const results: TestResult[] = []
    for (const file of report.testResults) {
      // a file that cannot load has no assertions: make it a failure of its own
      if (file.assertionResults.length === 0 && file.message !== '')
        results.push({ name: `${path.basename(file.name)} (load)`, status: 'failed', error: file.message.split('\n')[0] })
      for (const a of file.assertionResults) {
        const name = [...a.ancestorTitles, a.title].join(' > ')
        const status: Status = a.status === 'passed' ? 'passed' : a.status === 'failed' ? 'failed' : 'skipped'
        results.push(status === 'failed' ? { name, status, error: firstLine(a.failureMessages[0]) } : { name, status })
      }
    }
    return results
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

interface JestAssertion {
  readonly ancestorTitles: readonly string[]
  readonly title: string
  readonly status: string
  readonly failureMessages: readonly string[]
}

function firstLine(text: string | undefined): string {
  // jest's messages start with blank lines (colours are off: FORCE_COLOR=0)
  return (
    (text ?? '')
      .split('\n')
      .map((l) => l.trim())
      .find((l) => l !== '') ?? ''
  )
}

/** Runs node:test files (paths relative to `cwd`) and returns every test's result. */
export async function runNodeTest(
  cwd: string,
  files: readonly string[],
  nodeArgs: readonly string[],
  env: NodeJS.ProcessEnv = {},
  timeoutMs = 300_000,
): Promise<TestResult[]> {
  const reporter = path.join(frameworksDir, 'lib/node-test-reporter.mjs')
  const child = await run(
    process.execPath,
    [...nodeArgs, '--test', `--test-reporter=${reporter}`, '--test-timeout=60000', ...files],
    cwd,
    suiteEnv(env),
    timeoutMs,
  )
  const results: TestResult[] = []
  for (const line of child.stdout.split('\n')) {
    if (!line.startsWith('{')) continue
    const r = JSON.parse(line) as { file: string; name: string; status: Status; error?: string }
    const name = `${path.relative(cwd, r.file)} > ${r.name}`
    results.push(r.status === 'failed' ? { name, status: r.status, error: r.error ?? '' } : { name, status: r.status })
  }
  // a file that reported nothing did not run: a failure of its own, never a silent pass
  for (const file of files) {
    if (!results.some((r) => r.name.startsWith(`${file} > `)))
      results.push({
        name: `${file} > (file)`,
        status: 'failed',
        error: `no test reported (exit ${child.code}): ${child.stderr.slice(-2000)}`,
      })
  }
  return results
}

function describeFailures(results: readonly TestResult[]): string {
  return results.map((r) => `  - ${r.name}\n      ${r.error ?? ''}`).join('\n')
}

/**
 * The suite over the framework's own stores: every test passes, except those listed as not
 * runnable against the package, which must fail here too (else the entry is stale). Proves the
 * harness runs the suite as its authors do.
 */
export function checkBaseline(t: TestContext, results: readonly TestResult[], notRunnable: Reasons): void {
  const byName = new Map(results.map((r) => [r.name, r]))
  const unexpected = results.filter((r) => r.status === 'failed' && notRunnable[r.name] === undefined)
  assert.equal(unexpected.length, 0, `failures with the framework's own store (the harness is wrong):\n${describeFailures(unexpected)}`)
  const stale = Object.keys(notRunnable).filter((name) => byName.get(name)?.status !== 'failed')
  assert.deepEqual(stale, [], 'listed as not runnable, but passed or missing with the framework’s own store')
  t.diagnostic(`${results.filter((r) => r.status === 'passed').length} of ${results.length} passed with the framework's own store`)
}

/**
 * The suite over our store: every failure must be listed (an expected difference, or not
 * runnable against the package); a listed test that passes is reported so the list shrinks (a
 * test on the real clock, `clockDependent`, passes when the window happens to fall its way, and
 * is reported as such); a listed name that no longer exists fails (the list must follow the
 * vendored version).
 */
export function checkOurs(
  t: TestContext,
  results: readonly TestResult[],
  differences: Reasons,
  notRunnable: Reasons,
  clockDependent: ReadonlySet<string> = new Set(),
): void {
  const byName = new Map(results.map((r) => [r.name, r]))
  const missing = [...Object.keys(differences), ...Object.keys(notRunnable)].filter((name) => !byName.has(name))
  assert.deepEqual(missing, [], 'listed tests that the suite does not have')
  const unexpected = results.filter((r) => r.status === 'failed' && differences[r.name] === undefined && notRunnable[r.name] === undefined)
  assert.equal(unexpected.length, 0, `failures that are not listed differences:\n${describeFailures(unexpected)}`)
  const stale = [...clockDependent].filter((name) => differences[name] === undefined)
  assert.deepEqual(stale, [], 'marked clock-dependent but not listed')
  for (const name of Object.keys(differences)) {
    if (byName.get(name)?.status !== 'passed') continue
    if (clockDependent.has(name))
      t.diagnostic(`listed difference passed this run (where the real clock falls in the window decides): ${name}`)
    else t.diagnostic(`listed difference now passes, remove it from the list: ${name}`)
  }
  const failed = results.filter((r) => r.status === 'failed').length
  t.diagnostic(
    `${results.filter((r) => r.status === 'passed').length} of ${results.length} passed with our store; ${failed} failed, all listed`,
  )
}
