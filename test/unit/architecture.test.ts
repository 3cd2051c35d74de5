/**
 * Dependency direction (DESIGN.md §2): arrows point inward. The core imports nothing outside
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

  it('a store imports core types and its own driver only', () => {
    const drivers: Record<string, string[]> = { memory: [], redis: ['ioredis'], postgres: ['pg'], memcached: ['memjs', 'memcached'] }
    const bad = all
      .filter(inFolder('strategies'))
      .filter((imp) => {
        const store = imp.file.split(path.sep)[1]?.replace(/\.ts$/, '') ?? ''
        const t = target(imp)
        if (t.kind === 'builtin') return false
        if (t.kind === 'package') return !(drivers[store] ?? []).includes(t.name)
        return !(localIn(imp, 'core') || t.folder === `strategies/${store}` || (store === 'memory' && t.folder === 'strategies'))
      })
      .map((imp) => `${imp.file} imports ${imp.specifier}`)
    assert.deepEqual(bad, [])
  })

  it('only the server and the simple API choose concrete stores', () => {
    const choosers = ['server', 'simple']
    const bad = all
      .filter((imp) => !choosers.some((c) => inFolder(c)(imp)) && imp.file !== 'index.ts' && !inFolder('strategies')(imp))
      .filter((imp) => localIn(imp, 'strategies'))
      .map((imp) => `${imp.file} imports ${imp.specifier}`)
    assert.deepEqual(bad, [])
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
