// The published build: ESM (.js, .d.ts) and CommonJS (.cjs, .d.cts) side by side in dist/, each
// file mirroring one file of src/: one module instance per format, whichever subpaths a user loads
// (README, "Module formats"), and the relative paths the code resolves at run time stay valid.
import { defineConfig, type UserConfig } from 'tsdown'

/** Every subpath of package.json's `exports`, by its built file (without extension) under dist/. */
const entries = {
  index: 'src/index.ts',
  'strategies/redis/index': 'src/strategies/redis/index.ts',
  'strategies/postgres/index': 'src/strategies/postgres/index.ts',
  'strategies/memcached/index': 'src/strategies/memcached/index.ts',
  'simple/index': 'src/simple/index.ts',
  'adapters/express': 'src/adapters/express.ts',
  'adapters/fastify': 'src/adapters/fastify.ts',
  'adapters/hono': 'src/adapters/hono.ts',
  'adapters/nestjs': 'src/adapters/nestjs.ts',
  'algorithms/index': 'src/algorithms/index.ts',
  'server/index': 'src/server/index.ts',
  'testing/index': 'src/testing/index.ts',
}

const common = {
  unbundle: true,
  root: 'src',
  outDir: 'dist',
  platform: 'node',
  target: 'node20',
  // .js and .d.ts for ESM (the package is "type": "module"), .cjs and .d.cts for CommonJS
  fixedExtension: false,
  tsconfig: 'tsconfig.build.json',
  dts: { sourcemap: false },
  sourcemap: false,
  // import.meta.url in the CommonJS build (the service reads package.json and its store modules by it)
  shims: true,
  report: false,
  checks: { legacyCjs: false, pluginTimings: false },
} satisfies UserConfig

export default defineConfig([
  // the bin is ESM only: it is run, never required
  { ...common, format: 'esm', entry: { ...entries, 'server/cli': 'src/server/cli.ts' } },
  { ...common, format: 'cjs', entry: entries, clean: false },
])
