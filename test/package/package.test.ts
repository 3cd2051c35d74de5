/**
 * The package as users get it: the build in dist/, imported from ESM and from CJS through the
 * package name, with types that resolve. Needs `npm run build` first (npm test does it).
 */
import assert from 'node:assert/strict'
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import { once } from 'node:events'
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
let consumer: string

function node(args: string[]): string {
  return execFileSync(process.execPath, args, { cwd: consumer, encoding: 'utf8' }).trim()
}

describe('the built package', () => {
  before(() => {
    assert.ok(existsSync(path.join(root, 'dist/index.js')), 'dist/index.js is missing: run npm run build')
    consumer = mkdtempSync(path.join(tmpdir(), 'ratelimiting-consumer-'))
    mkdirSync(path.join(consumer, 'node_modules'))
    symlinkSync(root, path.join(consumer, 'node_modules', 'ratelimiting'), 'dir')
  })
  after(() => rmSync(consumer, { recursive: true, force: true }))

  it('imports from ESM, with the module-level functions of the default instance', () => {
    const out = node([
      '--input-type=module',
      '-e',
      "import * as rl from 'ratelimiting'; rl.new({ windowSizes: [60] }); rl.increment('k', 60, 2); console.log(rl.slidingWindow('k', 60), typeof rl.RateLimiting.newInstance)",
    ])
    assert.equal(out, '2 function')
  })

  it('requires from CommonJS', () => {
    const out = node([
      '-e',
      "const { RateLimiting, MemoryStrategy } = require('ratelimiting'); const rl = RateLimiting.newInstance('cjs'); rl.new({ windowSizes: [1] }); console.log(rl.increment('k', 1, 3), typeof MemoryStrategy)",
    ])
    assert.equal(out, '3 function')
  })

  it('exports every subpath from the build', () => {
    const subpaths = ['redis', 'simple', 'algorithms', 'server', 'express', 'fastify', 'hono', 'postgres', 'memcached']
    const script = subpaths.map((p) => `Object.keys(await import('ratelimiting/${p}')).length`).join(', ')
    const out = node(['--input-type=module', '-e', `console.log([${script}].every((n) => n > 0))`])
    assert.equal(out, 'true')
  })

  it('runs the service from the built CLI on its in-memory default (the main job)', async () => {
    const cli = path.join(root, 'dist/server/cli.js')
    const child = spawn(process.execPath, [cli, 'serve', '--port', '0', '--log-level', 'info'], { cwd: consumer })
    try {
      let log = ''
      const port = await new Promise<number>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no listening log line: ${log}`)), 10_000)
        child.stdout.on('data', (chunk: Buffer) => {
          log += chunk.toString()
          const m = /"url":"http:\/\/127\.0\.0\.1:(\d+)"/.exec(log)
          if (m?.[1] !== undefined) {
            clearTimeout(timer)
            resolve(Number(m[1]))
          }
        })
      })
      const res = await fetch(`http://127.0.0.1:${port}/v1/check`, { method: 'POST', body: JSON.stringify({ userId: 'u1' }) })
      assert.equal(res.status, 200)
      assert.deepEqual(await res.json(), { allowed: true, count: 1, limit: 100, remaining: 99, resetMs: 60_000, retryAfterMs: 0 })
    } finally {
      child.kill('SIGTERM')
      await once(child, 'exit')
    }
  })

  it('names the packages to install when the service runs without its optional peers', () => {
    const bare = mkdtempSync(path.join(tmpdir(), 'ratelimiting-bare-'))
    try {
      cpSync(path.join(root, 'dist'), path.join(bare, 'dist'), { recursive: true })
      cpSync(path.join(root, 'package.json'), path.join(bare, 'package.json'))
      const run = spawnSync(process.execPath, [path.join(bare, 'dist/server/cli.js'), '--version'], { encoding: 'utf8' })
      assert.equal(run.status, 4)
      assert.match(run.stderr, /npm install yaml ajv pino prom-client/)
    } finally {
      rmSync(bare, { recursive: true, force: true })
    }
  })

  it('resolves its types for ESM and CJS consumers', () => {
    writeFileSync(
      path.join(consumer, 'esm.mts'),
      [
        "import { RateLimiting, rateLimitHeaders, type Decision, type Strategy } from 'ratelimiting'",
        "const rl = RateLimiting.newInstance('types')",
        "rl.new({ namespace: 'api', windowSizes: [60] })",
        "const d: Decision | Promise<Decision> = rl.limiter({ namespace: 'api', limits: [{ limit: 1, window: 60 }] }).hit('k')",
        'const s: Strategy | undefined = undefined',
        'export const out = [d, s, rateLimitHeaders]',
        '',
      ].join('\n'),
    )
    writeFileSync(
      path.join(consumer, 'cjs.cts'),
      "import { createFakeClock } from 'ratelimiting'\nexport const c = createFakeClock(0).now()\n",
    )
    writeFileSync(
      path.join(consumer, 'bad.mts'),
      "import { RateLimiting } from 'ratelimiting'\nRateLimiting.newInstance('x').new({ windowSizes: 60 })\n",
    )
    const tsc = path.join(root, 'node_modules/typescript/bin/tsc')
    const flags = [
      '--noEmit',
      '--strict',
      '--module',
      'nodenext',
      '--moduleResolution',
      'nodenext',
      '--types',
      'node',
      '--typeRoots',
      path.join(root, 'node_modules/@types'),
    ]
    node([tsc, ...flags, 'esm.mts', 'cjs.cts'])
    assert.throws(
      () => node([tsc, ...flags, 'bad.mts']),
      (err: unknown) => /bad\.mts\(2,\d+\): error TS2322/.test(String((err as { stdout?: string }).stdout)),
      'a wrong option type is a type error',
    )
  })
})
