/**
 * Dependency direction (docs/ARCHITECTURE.md): arrows point inward. The core imports nothing outside
 * itself but Node built-ins; a store imports core types and its own driver only; adapters import
 * the core; only the server (and the simple API, for its default store) pick concrete stores.
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const src = path.join(root, 'src')

interface Import {
  readonly file: string // relative to src
  readonly specifier: string
  readonly typeOnly: boolean
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(full)
    return entry.name.endsWith('.ts') ? [full] : []
  })
}

function importsOf(file: string): Import[] {
  const text = readFileSync(file, 'utf8')
  const rel = path.relative(src, file)
  const out: Import[] = []
  const pattern = /(?:^|\n)\s*(import|export)\s+(type\s+)?(?:[^'"]*?\sfrom\s+)?['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g
  for (const m of text.matchAll(pattern)) {
    const specifier = m[3] ?? m[4]
    if (specifier !== undefined) out.push({ file: rel, specifier, typeOnly: m[2] !== undefined })
  }
  return out
}

/** The src-relative folder an import lands in, or the package name for a bare specifier. */
function target(imp: Import): { kind: 'local'; folder: string } | { kind: 'builtin' } | { kind: 'package'; name: string } {
  if (imp.specifier.startsWith('node:')) return { kind: 'builtin' }
  if (imp.specifier.startsWith('.')) {
    const resolved = path.relative(src, path.resolve(src, path.dirname(imp.file), imp.specifier))
    return { kind: 'local', folder: resolved.split(path.sep).slice(0, -1).join('/') }
  }
  const parts = imp.specifier.split('/')
  return { kind: 'package', name: imp.specifier.startsWith('@') ? parts.slice(0, 2).join('/') : (parts[0] as string) }
}

const all = sourceFiles(src).flatMap(importsOf)

function violations(filter: (imp: Import) => boolean, allowed: (imp: Import) => boolean): string[] {
  return all
    .filter(filter)
    .filter((imp) => !allowed(imp))
    .map((imp) => `${imp.file} imports ${imp.specifier}`)
}

const inFolder = (folder: string) => (imp: Import) => imp.file.split(path.sep).join('/').startsWith(`${folder}/`)
const localIn = (imp: Import, ...folders: string[]) => {
  const t = target(imp)
  return t.kind === 'local' && folders.some((f) => t.folder === f || t.folder.startsWith(`${f}/`))
}

describe('dependency direction', () => {
  it('finds the imports it checks', () => {
    assert.ok(all.some((imp) => imp.file.startsWith('core') && imp.specifier === './window.js'))
  })

  it('the core imports only itself and Node built-ins', () => {
    assert.deepEqual(
      violations(inFolder('core'), (imp) => target(imp).kind === 'builtin' || localIn(imp, 'core')),
      [],
    )
  })

  it('a store imports core types, the capabilities table and its own driver only', () => {
    const drivers: Record<string, string[]> = { memory: [], redis: ['ioredis'], postgres: ['pg'], memcached: ['memjs', 'memcached'] }
    const bad = all
      .filter(inFolder('strategies'))
      // the registrations of the built-in stores load each store's module by name, on first use
      .filter((imp) => imp.file !== path.join('strategies', 'built-in.ts'))
      .filter((imp) => {
        const store = imp.file.split(path.sep)[1]?.replace(/\.ts$/, '') ?? ''
        const t = target(imp)
        if (t.kind === 'builtin') return false
        if (t.kind === 'package') return !(drivers[store] ?? []).includes(t.name)
        if (/(^|\/)capabilities\.js$/.test(imp.specifier)) return false
        return !(localIn(imp, 'core') || t.folder === `strategies/${store}` || (store === 'memory' && t.folder === 'strategies'))
      })
      .map((imp) => `${imp.file} imports ${imp.specifier}`)
    assert.deepEqual(bad, [])
  })

  it('the built-in registrations load a store module only by dynamic import', () => {
    const text = readFileSync(path.join(src, 'strategies', 'built-in.ts'), 'utf8')
    assert.deepEqual(text.match(/^import .*\/(redis|postgres|memcached)\//gm), null)
  })

  it('only the server and the simple API choose concrete stores (the testing kit ships the memory store)', () => {
    const choosers = ['server', 'simple']
    const bad = all
      .filter((imp) => !choosers.some((c) => inFolder(c)(imp)) && imp.file !== 'index.ts' && !inFolder('strategies')(imp))
      .filter((imp) => localIn(imp, 'strategies'))
      .filter((imp) => !(inFolder('testing')(imp) && imp.specifier === '../strategies/memory.js'))
      // the Redis algorithms run their scripts the way the Redis store does (no store chosen)
      .filter((imp) => !(inFolder('algorithms')(imp) && imp.specifier === '../strategies/redis/scripts.js'))
      .map((imp) => `${imp.file} imports ${imp.specifier}`)
    assert.deepEqual(bad, [])
  })

  it('the testing kit imports the core, the memory store and Node built-ins only', () => {
    assert.deepEqual(
      violations(
        inFolder('testing'),
        (imp) => target(imp).kind === 'builtin' || localIn(imp, 'core', 'testing') || imp.specifier === '../strategies/memory.js',
      ),
      [],
    )
  })

  it('no module outside the core reaches into its internals (the counter table, a namespace object)', () => {
    const internals = ['counter-table.js', 'counter-dict.js', 'namespace.js', 'store-link.js', 'sync-loop.js', 'previous-reads.js']
    const bad = all
      // the package root re-exports what is public of them (DictStats, the channels)
      .filter((imp) => !inFolder('core')(imp) && imp.file !== 'index.ts')
      .filter((imp) => !imp.typeOnly || !imp.specifier.endsWith('/namespace.js'))
      .filter((imp) => internals.some((file) => imp.specifier.endsWith(`/core/${file}`)))
      .map((imp) => `${imp.file} imports ${imp.specifier}`)
    assert.deepEqual(bad, [])
    const calls = sourceFiles(src)
      .filter((file) => !path.relative(src, file).startsWith(`core${path.sep}`))
      .filter((file) => /\.namespace\(/.test(readFileSync(file, 'utf8')))
      .map((file) => path.relative(src, file))
    assert.deepEqual(calls, [], 'RateLimiting.namespace() is internal: use the Limiter')
  })

  it('adapters import the core and frameworks only as types', () => {
    assert.deepEqual(
      violations(inFolder('adapters'), (imp) => {
        const t = target(imp)
        return t.kind === 'builtin' || localIn(imp, 'core', 'adapters') || (t.kind === 'package' && imp.typeOnly)
      }),
      [],
    )
  })
})
