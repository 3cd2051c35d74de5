// Bundles the app with the package inlined twice: as Vite does (rolldown is its bundler), and with
// esbuild. The packages it needs stay external, as in a server bundle. Each bundler picks the
// "import" files of the package and drops the code package.json's sideEffects says it may drop.
import { readFileSync } from 'node:fs'
import { build as esbuild } from 'esbuild'
import { build } from 'rolldown'

const { dependencies } = JSON.parse(readFileSync('package.json', 'utf8'))
const external = Object.keys(dependencies).filter((name) => name !== 'ratelimiting')
await build({
  input: 'src/app.ts',
  platform: 'node',
  external: (id) => external.some((name) => id === name || id.startsWith(`${name}/`)),
  output: { file: 'out/app.mjs', format: 'esm', codeSplitting: false },
  logLevel: 'warn',
})
await esbuild({
  entryPoints: ['src/app.ts'],
  bundle: true,
  platform: 'node',
  format: 'esm',
  external,
  outfile: 'out/app-esbuild.mjs',
  logLevel: 'warning',
})
