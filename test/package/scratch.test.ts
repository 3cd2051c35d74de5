/**
 * The packed tarball as users install it: each folder of test/package/scratch/ is a project with
 * its own package.json (and tsconfig), in the manner of express-rate-limit's test/external/imports.
 * Each imports every subpath, type-checks where it is TypeScript, and sends real requests through
 * an adapter. Needs `npm run build` first (npm test does it).
 *
 * The projects are installed from the npm registry outside this repository (a folder under the
 * OS temp directory, kept between runs), so that none of them can resolve a package from the
 * repository's own node_modules; npm's download cache is kept in .tmp/package/npm-cache, so a
 * second run installs without the network.
 */
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { createHash, randomUUID } from 'node:crypto'
import { copyFileSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { type SentinelSet, startSentinelSet } from '../support/redis-sentinel.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const sources = path.join(root, 'test/package/scratch')
const npmCache = path.join(root, '.tmp/package/npm-cache')
const work = path.join(tmpdir(), `ratelimiting-scratch-${createHash('sha256').update(root).digest('hex').slice(0, 12)}`)
const redisUrl = 'redis://127.0.0.1:6379'
const keyPrefix = `test:pkg-scratch:${randomUUID().slice(0, 8)}`

interface Project {
  /** Its folder under test/package/scratch/. */
  readonly dir: string
  /** What the test is called. */
  readonly title: string
  /** Where it is installed under `work` (a variant of a folder needs its own). */
  readonly installAs?: string
  /** For a variant: exact versions that replace the folder's own, and compiler options over its tsconfig's. */
  readonly overrides?: {
    readonly versions?: Readonly<Record<string, string>>
    readonly compilerOptions?: Readonly<Record<string, unknown>>
  }
  /** Scripts it also runs with the oldest Node that package.json's engines allows. */
  readonly onOldestNode?: readonly string[]
}

const projects: readonly Project[] = [
  {
    dir: 'esm-js',
    title: 'ESM JavaScript: import, express-rate-limit, a store by name, the CLI, the Envoy gRPC listener',
    onOldestNode: ['index.js', 'cli.js'],
  },
  {
    dir: 'cjs-js',
    title: 'CommonJS JavaScript: require, express-rate-limit, the service on memcached',
    onOldestNode: ['index.js', 'service.js'],
  },
  { dir: 'jest-cjs', title: 'Jest in its default CommonJS mode, no configuration' },
  { dir: 'ts-node10', title: 'TypeScript module commonjs, moduleResolution node10 (typesVersions)' },
  { dir: 'ts-nodenext', title: 'TypeScript nodenext, CommonJS and ESM files, a Nest 12 app, the current TypeScript' },
  {
    dir: 'ts-nodenext',
    installAs: 'ts-nodenext-ts5.4',
    title: 'TypeScript nodenext, CommonJS and ESM files, a Nest 12 app, TypeScript 5.4',
    // pg's declarations, and the Float64Array<ArrayBuffer> that TypeScript 5.7+ writes into
    // dist/server/metrics.d.ts, use generics TypeScript 5.4 lacks: check the project's code against
    // our types with skipLibCheck, as TypeScript 5.4 users (and `tsc --init`) do
    overrides: { versions: { typescript: '5.4.5' }, compilerOptions: { skipLibCheck: true } },
  },
  { dir: 'ts-bundler', title: 'TypeScript moduleResolution bundler, bundled by rolldown and by esbuild, Hono' },
]

interface Run {
  readonly code: number
  readonly stdout: string
  /** stdout and stderr. */
  readonly output: string
}

/** Runs a command; resolves with its exit code and what it printed. */
function run(command: string, args: readonly string[], cwd: string, env: NodeJS.ProcessEnv, timeoutMs: number): Promise<Run> {
  return new Promise((resolve) => {
    execFile(command, args, { cwd, env, timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1
      const killed = err?.killed === true ? `\n(killed after ${timeoutMs} ms)` : ''
      resolve({ code, stdout, output: `${stdout}${stderr}${killed}` })
    })
  })
}

/**
 * The environment of the projects: ours without npm's variables. `npm test` sets npm_config_* for
 * this repository (its prefix among them), which would make the projects' npm act on it.
 */
function projectEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const [name, value] of Object.entries(process.env)) if (!/^npm_/i.test(name)) env[name] = value
  return { ...env, npm_config_cache: npmCache, npm_config_update_notifier: 'false', ...extra }
}

const OFFLINE = /\b(ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH)\b/

/** `npm install` in `cwd`, with a clear error when the registry cannot be reached. */
async function npmInstall(cwd: string, args: readonly string[], what: string): Promise<void> {
  const result = await run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', ...args], cwd, projectEnv(), 300_000)
  if (result.code === 0) return
  const cause = OFFLINE.test(result.output)
    ? 'the npm registry cannot be reached (the packages it needs are not in the cache either)'
    : `npm install failed (exit ${result.code})`
  throw new Error(`installing ${what}: ${cause}\n${result.output}`)
}

/** Copies a project's files over its installed copy, keeping node_modules and the lockfile. */
function syncProject(project: Project, dest: string): void {
  mkdirSync(dest, { recursive: true })
  for (const entry of readdirSync(dest))
    if (entry !== 'node_modules' && entry !== 'package-lock.json') rmSync(path.join(dest, entry), { recursive: true })
  cpSync(path.join(sources, project.dir), dest, {
    recursive: true,
    filter: (src) => !['node_modules', 'out', 'package-lock.json'].includes(path.basename(src)),
  })
  const { versions, compilerOptions } = project.overrides ?? {}
  if (versions !== undefined) {
    const file = path.join(dest, 'package.json')
    const pkg = JSON.parse(readFileSync(file, 'utf8')) as {
      dependencies?: Record<string, string>
      devDependencies?: Record<string, string>
    }
    for (const [name, version] of Object.entries(versions)) {
      const group = pkg.devDependencies?.[name] !== undefined ? pkg.devDependencies : pkg.dependencies
      assert.ok(group?.[name] !== undefined, `${project.dir} has no dependency ${name} to override`)
      group[name] = version
    }
    writeJson(file, pkg)
  }
  if (compilerOptions !== undefined) {
    const file = path.join(dest, 'tsconfig.json')
    const tsconfig = JSON.parse(readFileSync(file, 'utf8')) as { compilerOptions: Record<string, unknown> }
    Object.assign(tsconfig.compilerOptions, compilerOptions)
    writeJson(file, tsconfig)
  }
}

function writeJson(file: string, value: unknown): void {
  writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`)
}

/** " (TypeScript x.y.z)" for a project that installs TypeScript. */
function typescriptOf(project: Project): string {
  const pkg = JSON.parse(readFileSync(path.join(sources, project.dir, 'package.json'), 'utf8')) as {
    devDependencies?: Record<string, string>
  }
  const version = project.overrides?.versions?.typescript ?? pkg.devDependencies?.typescript
  return version === undefined ? '' : ` (TypeScript ${version})`
}

/** The oldest Node version package.json's engines allows, as x.y.z. */
function oldestNode(): string {
  const range = (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { engines: { node: string } }).engines.node
  const m = /^>=\s*(\d+)(?:\.(\d+))?(?:\.(\d+))?$/.exec(range.trim())
  assert.ok(m !== null, `engines.node should be a plain ">=x.y.z" range, got ${range}`)
  return `${m[1]}.${m[2] ?? 0}.${m[3] ?? 0}`
}

describe('the packed tarball in scratch projects', { concurrency: 3 }, () => {
  let oldestNodeBin = ''
  // a Sentinel deployment of the test's own: the JavaScript projects reach Redis through it too
  let sentinel: SentinelSet | undefined

  before(async () => {
    sentinel = await startSentinelSet()
    assert.ok(existsSync(path.join(root, 'dist/index.cjs')), 'dist/index.cjs is missing: run npm run build')
    mkdirSync(npmCache, { recursive: true })
    mkdirSync(work, { recursive: true })
    // the package as `npm publish` would send it (the build is npm test's, hence no prepack)
    const packed = await run('npm', ['pack', '--ignore-scripts', '--json', '--pack-destination', work], root, projectEnv(), 120_000)
    assert.equal(packed.code, 0, packed.output)
    const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }]
    copyFileSync(path.join(work, filename), path.join(work, 'ratelimiting.tgz'))

    // a Node binary as the npm registry ships it (node-<platform>-<arch>, the `node` package's own)
    const version = oldestNode()
    const dir = path.join(work, `node-${version}`)
    const pkg = `node-${process.platform}-${process.arch}`
    mkdirSync(dir, { recursive: true })
    oldestNodeBin = path.join(dir, 'node_modules', pkg, 'bin', 'node')
    if (!existsSync(oldestNodeBin)) {
      writeJson(path.join(dir, 'package.json'), { private: true })
      await npmInstall(dir, [`${pkg}@${version}`], `Node ${version} (${pkg})`)
    }
    const reported = await run(oldestNodeBin, ['--version'], dir, projectEnv(), 10_000)
    assert.equal(reported.output.trim(), `v${version}`)
  })

  after(async () => {
    await sentinel?.stop()
    const redis = new Redis(redisUrl)
    try {
      let cursor = '0'
      do {
        const [next, keys] = await redis.scan(cursor, 'MATCH', `${keyPrefix}*`, 'COUNT', 1000)
        cursor = next
        if (keys.length > 0) await redis.del(...keys)
      } while (cursor !== '0')
    } finally {
      redis.disconnect()
    }
  })

  for (const project of projects) {
    it(`${project.title}${typescriptOf(project)}`, { timeout: 600_000 }, async (t) => {
      const name = project.installAs ?? project.dir
      const dest = path.join(work, name)
      syncProject(project, dest)
      // naming the tarball makes npm take it again: its lockfile entry would keep the previous build
      await npmInstall(dest, ['../ratelimiting.tgz'], `scratch project ${name}`)
      const env = projectEnv({
        RATELIMITING_REDIS_URL: redisUrl,
        RATELIMITING_MEMCACHED: '127.0.0.1:11211',
        RATELIMITING_KEY_PREFIX: `${keyPrefix}:${name}`,
        ...(sentinel !== undefined
          ? {
              RATELIMITING_SENTINELS: sentinel.sentinels.map((s) => `${s.host}:${s.port}`).join(','),
              RATELIMITING_SENTINEL_MASTER: sentinel.masterName,
              RATELIMITING_SENTINEL_DATA_PASSWORD: sentinel.password,
              RATELIMITING_SENTINEL_PASSWORD: sentinel.sentinelPassword,
            }
          : {}),
      })

      await t.test('npm test', async () => {
        const result = await run('npm', ['test'], dest, env, 300_000)
        assert.equal(result.code, 0, `npm test in ${name} failed:\n${result.output}`)
      })

      for (const script of project.onOldestNode ?? []) {
        await t.test(`${script} on Node ${oldestNode()}, the oldest engines allows`, async () => {
          // first on PATH, so the CLI's `#!/usr/bin/env node` runs on it too
          const oldEnv = {
            ...env,
            PATH: `${path.dirname(oldestNodeBin)}${path.delimiter}${env.PATH ?? ''}`,
            RATELIMITING_KEY_PREFIX: `${keyPrefix}:${name}:oldest-node`,
          }
          const result = await run(oldestNodeBin, [script], dest, oldEnv, 120_000)
          assert.equal(result.code, 0, `${script} in ${name} on Node ${oldestNode()} failed:\n${result.output}`)
        })
      }
    })
  }
})
