/**
 * Loads our engine for the benchmark the way users run it: compiled by TypeScript with the
 * build's options, not through tsx. tsx compiles with esbuild's `keepNames`, which wraps every
 * function expression created at run time in a `__name()` call (an `Object.defineProperty`), so
 * code that makes a closure per call would be measured slower than the package users install.
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import ts from 'typescript'
import type * as OursModule from '../../src/index.js'

/** The package's entry point module. */
export type Ours = typeof OursModule

/** `build`: TypeScript-compiled copy of src/ (as published); `source`: src/ through tsx. */
export type EngineSource = 'build' | 'source'

/** A loaded engine and how to remove its temporary copy. */
export interface LoadedEngine {
  readonly ours: Ours
  readonly source: EngineSource
  /** Imports another module of the same copy, by its path under src/ (`strategies/redis/index.ts`). */
  load<T = Record<string, unknown>>(path: string): Promise<T>
  cleanup(): void
}

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..')

function tsFiles(dir: string): string[] {
  const out: string[] = []
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) out.push(...tsFiles(path))
    else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts')) out.push(path)
  }
  return out
}

function buildOptions(): ts.CompilerOptions {
  const configPath = join(root, 'tsconfig.build.json')
  const parsed = ts.getParsedCommandLineOfConfigFile(
    configPath,
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => {
        throw new Error(`tsconfig.build.json: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`)
      },
    },
  )
  if (parsed === undefined) throw new Error('tsconfig.build.json could not be read')
  // the package is ESM: say so, since a single file's format cannot be inferred from package.json here
  return {
    ...parsed.options,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    sourceMap: false,
    declaration: false,
    declarationMap: false,
  }
}

/**
 * Compiles src/ into a temporary directory (file by file, like `tsc` with the build's options,
 * without type checking) and imports its entry point; or imports src/ itself with `source`.
 * `srcDir` points at another copy of src/, to compare an engine change side by side.
 */
export async function loadOurs(source: EngineSource = 'build', srcDir = join(root, 'src')): Promise<LoadedEngine> {
  if (source === 'source') {
    const ours = (await import(pathToFileURL(join(srcDir, 'index.ts')).href)) as Ours
    const load = async <T>(path: string) => (await import(pathToFileURL(join(srcDir, path)).href)) as T
    return { ours, source, load, cleanup: () => undefined }
  }
  const options = buildOptions()
  const outDir = mkdtempSync(join(tmpdir(), 'ratelimiting-bench-'))
  try {
    writeFileSync(join(outDir, 'package.json'), JSON.stringify({ type: 'module' }))
    // bare imports (drivers) resolve from the project's node_modules
    symlinkSync(join(root, 'node_modules'), join(outDir, 'node_modules'), 'dir')
    for (const file of tsFiles(srcDir)) {
      const out = join(outDir, 'src', relative(srcDir, file)).replace(/\.ts$/, '.js')
      const { outputText } = ts.transpileModule(readFileSync(file, 'utf8'), { compilerOptions: options, fileName: file })
      mkdirSync(dirname(out), { recursive: true })
      writeFileSync(out, outputText)
    }
    const ours = (await import(pathToFileURL(join(outDir, 'src', 'index.js')).href)) as Ours
    const load = async <T>(path: string) => (await import(pathToFileURL(join(outDir, 'src', path.replace(/\.ts$/, '.js'))).href)) as T
    return { ours, source, load, cleanup: () => rmSync(outDir, { recursive: true, force: true }) }
  } catch (err) {
    rmSync(outDir, { recursive: true, force: true })
    throw err
  }
}
