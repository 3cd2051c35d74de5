/**
 * The package as users get it: the build in dist/ (ESM and CommonJS), loaded through the package
 * name, with types that resolve, and the tarball `npm pack` makes checked by attw and publint.
 * Needs `npm run build` first (npm test does it). test/package/scratch.test.ts installs the
 * tarball into real projects.
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
const subpaths = ['redis', 'simple', 'algorithms', 'server', 'express', 'fastify', 'hono', 'nestjs', 'postgres', 'memcached', 'testing']
let consumer: string

function node(args: string[]): string {
  return execFileSync(process.execPath, args, { cwd: consumer, encoding: 'utf8' }).trim()
}

describe('the built package', () => {
  before(() => {
    for (const file of ['dist/index.js', 'dist/index.cjs'])
      assert.ok(existsSync(path.join(root, file)), `${file} is missing: run npm run build`)
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
    const script = subpaths.map((p) => `Object.keys(await import('ratelimiting/${p}')).length`).join(', ')
    const out = node(['--input-type=module', '-e', `console.log([${script}].every((n) => n > 0))`])
    assert.equal(out, 'true')
  })

  it('gives import and require the same names on every subpath, from an ES module and a CommonJS file', () => {
    const script = [
      "import { createRequire } from 'node:module'",
      'const require = createRequire(process.cwd() + "/")',
      'const out = {}',
      `for (const p of ['', ${subpaths.map((p) => `'/${p}'`).join(', ')}]) {`,
      '  const name = `ratelimiting${p}`',
      '  const esm = Object.keys(await import(name)).sort()',
      '  const cjs = Object.keys(require(name)).sort()',
      '  out[name] = [esm.length, JSON.stringify(esm) === JSON.stringify(cjs), require.resolve(name).endsWith(".cjs"), import.meta.resolve(name).endsWith(".js")]',
      '}',
      'console.log(JSON.stringify(out))',
    ].join('\n')
    const out = JSON.parse(node(['--input-type=module', '-e', script])) as Record<string, [number, boolean, boolean, boolean]>
    assert.equal(Object.keys(out).length, subpaths.length + 1)
    for (const [name, [count, same, requiresCjs, importsEsm]] of Object.entries(out)) {
      assert.ok(count > 0, `${name} exports nothing`)
      assert.ok(same, `${name}: import and require export different names`)
      assert.ok(requiresCjs && importsEsm, `${name}: require gives the .cjs file, import the .js file`)
    }
  })

  it('keeps one engine per format: an ES module app and a CommonJS dependency each get their own', () => {
    // the dual-package hazard README's "Module formats" documents: two registries and two default
    // instances, while objects (a store, here) still work across; rates above 2 show that b saw a's hits
    const out = node([
      '--input-type=module',
      '-e',
      [
        "import { createRequire } from 'node:module'",
        "import * as esm from 'ratelimiting'",
        "const cjs = createRequire(process.cwd() + '/')('ratelimiting')",
        'const store = new cjs.MemoryStrategy()',
        'const [a, b] = ["a", "b"].map((name) => esm.RateLimiting.newInstance(name))',
        "for (const rl of [a, b]) rl.new({ namespace: 'api', windowSizes: [3600], syncRate: 0, strategy: store })",
        "const rates = [await a.increment('k', 3600, 2, 'api'), await b.increment('k', 3600, 1, 'api')]",
        'await Promise.all([a.close(), b.close()])',
        'console.log(esm.RateLimiting.default === cjs.RateLimiting.default, esm.ConfigError === cjs.ConfigError, rates[0], rates[1] > 2)',
      ].join('\n'),
    ])
    assert.equal(out, 'false false 2 true')
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
      const res = await fetch(`http://127.0.0.1:${port}/v1/check`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ userId: 'u1' }),
      })
      assert.equal(res.status, 200)
      assert.deepEqual(await res.json(), {
        allowed: true,
        count: 1,
        limit: 100,
        remaining: 99,
        resetMs: 60_000,
        retryAfterMs: 0,
        reason: 'limit',
      })
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
    // node10 and CommonJS without esModuleInterop or skipLibCheck: our declarations import the
    // CommonJS drivers' types in a way such a project accepts (a default import of pg was TS1192)
    writeFileSync(
      path.join(consumer, 'node10.ts'),
      "import { PostgresStrategy } from 'ratelimiting/postgres'\nimport { RedisStrategy } from 'ratelimiting/redis'\nexport const s = [PostgresStrategy, RedisStrategy]\n",
    )
    node([tsc, ...flags.slice(0, 2), '--module', 'commonjs', '--moduleResolution', 'node10', ...flags.slice(6), 'node10.ts'])
    assert.throws(
      () => node([tsc, ...flags, 'bad.mts']),
      (err: unknown) => /bad\.mts\(2,\d+\): error TS2322/.test(String((err as { stdout?: string }).stdout)),
      'a wrong option type is a type error',
    )
  })
})

describe('the tarball npm pack makes', () => {
  let dir: string
  let tarball: string

  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'ratelimiting-pack-'))
    // the build is npm test's: no prepack
    const out = execFileSync('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', dir], { cwd: root, encoding: 'utf8' })
    tarball = path.join(dir, (JSON.parse(out) as [{ filename: string }])[0].filename)
  })
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('has types that resolve on every subpath under node10, node16 from CJS and ESM, and bundler (attw)', () => {
    const attw = path.join(root, 'node_modules/.bin/attw')
    const run = spawnSync(attw, [tarball, '--format', 'json', '--no-definitely-typed'], { encoding: 'utf8' })
    const report = JSON.parse(run.stdout) as {
      analysis: { entrypoints: Record<string, { resolutions: Record<string, { resolution?: { fileName: string } }> }> }
      problems?: unknown
    }
    assert.deepEqual(report.problems ?? {}, {}, run.stdout)
    const entrypoints = report.analysis.entrypoints
    assert.deepEqual(Object.keys(entrypoints).sort(), ['.', './package.json', ...subpaths.map((p) => `./${p}`)].sort())
    // node10 reads typesVersions, node16 the require and import conditions
    const redis = entrypoints['./redis']?.resolutions
    assert.equal(redis?.node10?.resolution?.fileName, '/node_modules/ratelimiting/dist/strategies/redis/index.d.cts')
    assert.equal(redis?.['node16-cjs']?.resolution?.fileName, '/node_modules/ratelimiting/dist/strategies/redis/index.d.cts')
    assert.equal(redis?.['node16-esm']?.resolution?.fileName, '/node_modules/ratelimiting/dist/strategies/redis/index.d.ts')
  })

  it('passes publint, warnings included', () => {
    const publint = path.join(root, 'node_modules/.bin/publint')
    const run = spawnSync(publint, ['run', tarball, '--strict'], { encoding: 'utf8' })
    assert.equal(run.status, 0, run.stdout + run.stderr)
  })

  it('ships the build, the docs and no source maps pointing at sources it does not ship', () => {
    const files = execFileSync('tar', ['tzf', tarball], { encoding: 'utf8' }).trim().split('\n')
    assert.ok(files.includes('package/dist/index.cjs') && files.includes('package/dist/index.d.cts'))
    assert.ok(files.includes('package/dist/server/cli.js') && files.includes('package/README.md'))
    assert.deepEqual(
      files.filter((f) => f.endsWith('.map') || f.startsWith('package/src/') || f.startsWith('package/test/')),
      [],
    )
  })
})
