/**
 * Engine benchmark: our local decisions against rate-limiter-flexible, express-rate-limit and
 * limiter, in one process, over one hot key, 10,000 keys and 1,000,000 keys, plus heap per key
 * and the cost of reading the clock.
 *
 *   node --expose-gc --import tsx bench/engine.bench.ts            full run, rewrites docs/BENCHMARKS.md
 *   node --expose-gc --import tsx bench/engine.bench.ts --quick    smoke run in seconds, prints only
 *
 * Options: --quick, --rounds N, --write (also write after --quick), --no-write, --source (load our
 * engine from src/ through tsx instead of a TypeScript-compiled copy; see bench/lib/load-ours.ts).
 */
import { cpus, getPriority, loadavg } from 'node:os'
import { relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { renderSection, writeSection } from './lib/report.js'
import { type BenchConfig, FULL_CONFIG, QUICK_CONFIG, runEngineBench } from './lib/run.js'

const args = process.argv.slice(2)
const quick = args.includes('--quick')
const roundsAt = args.indexOf('--rounds')
const rounds = roundsAt >= 0 ? Number(args[roundsAt + 1]) : undefined
if (rounds !== undefined && (!Number.isInteger(rounds) || rounds < 1)) {
  throw new RangeError(`--rounds takes a positive integer, got ${String(args[roundsAt + 1])}`)
}
const write = args.includes('--no-write') ? false : args.includes('--write') || !quick

const config: BenchConfig = {
  ...(quick ? QUICK_CONFIG : FULL_CONFIG),
  engine: args.includes('--source') ? 'source' : 'build',
  ...(rounds === undefined ? {} : { rounds }),
  log: (line) => process.stderr.write(`[bench] ${line}\n`),
}

const here = fileURLToPath(import.meta.url)
const root = resolve(here, '..', '..')
const script = relative(process.cwd(), here) || here
const niceness = getPriority()
const command = [...(niceness === 0 ? [] : ['nice', '-n', String(niceness)]), 'node', ...process.execArgv, script, ...args].join(' ')
if (typeof (globalThis as { gc?: unknown }).gc !== 'function') {
  process.stderr.write('[bench] note: run with --expose-gc; the heap figures force GC through v8 flags otherwise\n')
}

const started = Date.now()
const loadAtStart = loadavg()[0] as number
const result = await runEngineBench(config)
const section = renderSection(result, {
  date: new Date().toISOString().slice(0, 10),
  node: process.version,
  cpu: cpus()[0]?.model.trim() ?? 'unknown CPU',
  cores: cpus().length,
  command,
  load: [loadAtStart, loadavg()[0] as number],
})
process.stdout.write(`${section}\n`)
process.stderr.write(`[bench] done in ${((Date.now() - started) / 1000).toFixed(0)} s\n`)
if (write) {
  const path = resolve(root, 'docs', 'BENCHMARKS.md')
  writeSection(path, section)
  process.stderr.write(`[bench] wrote ${relative(process.cwd(), path)}\n`)
}
