/**
 * Wildcard matching of Envoy descriptors (src/server/gateway/wildcards.ts): the time of one
 * match of a `key_value` against one level's `*` patterns, the old loop (each pattern in turn,
 * with `indexOf`) against the one-pass match, for several numbers of patterns and value lengths.
 * Medians of repeats; prints a Markdown table (copied by hand into docs/BENCHMARKS-gateway.md,
 * "Wildcard matching").
 *
 *   node --import tsx bench/wildcards.bench.ts            every cell (the old loop on 2,000 patterns × 1 MB takes ~10 s a run)
 *   node --import tsx bench/wildcards.bench.ts --quick    no 1 MB values, fewer repeats
 */
import { cpus, loadavg } from 'node:os'
import { globMatch, WildcardSet } from '../src/server/gateway/wildcards.js'

const quick = process.argv.includes('--quick')

// The baseline is the loop the reference uses and levels of a few patterns still use (globMatch:
// one indexOf per part, each pattern in turn, the first matching one in config order).
function oldFirstMatch(level: readonly (readonly string[])[], value: string): number {
  for (let i = 0; i < level.length; i++) if (globMatch(level[i] as string[], value)) return i
  return -1
}

/**
 * Median time of one call, ms: after a warm-up (100 ms, or one call when a call takes longer),
 * batches of calls at least 2 ms long, at least 5 of them (2 more when one call takes over 2 s).
 */
function median(fn: () => unknown): number {
  const warm = performance.now()
  let once: number
  do {
    const t = performance.now()
    fn()
    once = performance.now() - t
  } while (performance.now() - warm < (quick ? 30 : 100))
  const perBatch = Math.max(1, Math.ceil(2 / Math.max(once, 1e-4)))
  const budget = quick ? 300 : 1500
  const runs = once > 2000 ? 2 : Math.min(200, Math.max(5, Math.floor(budget / Math.max(once * perBatch, 1e-3))))
  const times = once > 2000 ? [once] : []
  for (let r = 0; r < runs; r++) {
    const t = performance.now()
    for (let k = 0; k < perBatch; k++) fn()
    times.push((performance.now() - t) / perBatch)
  }
  times.sort((a, b) => a - b)
  return times[Math.floor(times.length / 2)] as number
}

function fmt(ms: number): string {
  if (ms >= 1000) return `${(ms / 1000).toFixed(2)} s`
  if (ms >= 1) return `${ms.toFixed(ms >= 100 ? 0 : 1)} ms`
  if (ms >= 0.001) return `${(ms * 1000).toFixed(ms >= 0.1 ? 0 : 1)} µs`
  return `${(ms * 1e6).toFixed(0)} ns`
}

interface Cell {
  readonly label: string
  readonly patterns: string[]
  readonly value: string
}

/** `k_*a<i>*y<i>*q`: every pattern passes the anchors of a value `a…aq`, and none matches it: each costs a full pass in the old loop. */
function spread(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `k_*a${i}*y${i}*q`)
}

/**
 * The costliest level for the one pass: middle parts `a`, `aa`, … `a`×62 (so up to 62 parts end
 * at each position of `a…a`), behind a first middle part the value never holds, so that every
 * pattern keeps waiting.
 */
function chains(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `k_*b${i}*${'a'.repeat(1 + (i % 62))}*q`)
}

const value = (length: number): string => `k_${'a'.repeat(length - 1)}q`
const KB = 1024
const cells: Cell[] = [
  {
    label: '4 patterns, a 20-character path (the usual case; the third matches)',
    patterns: ['path_/admin/*', 'path_/api/*/orders/*', 'path_/api/*/users/*', 'path_*'],
    value: 'path_/api/v1/users/42',
  },
  {
    label: '100 patterns, a 20-character path (the 100th matches)',
    patterns: [...Array.from({ length: 99 }, (_, i) => `path_/svc${i}/*/users/*`), 'path_/api/*/users/*'],
    value: 'path_/api/v1/users/42',
  },
]
for (const count of [10, 100, 2000])
  for (const length of quick ? [KB, 64 * KB] : [KB, 64 * KB, 1024 * KB])
    cells.push({
      label: `${count.toLocaleString('en-US')} patterns \`k_*a<i>*y<i>*q\`, value ${length / KB} KB (no match)`,
      patterns: spread(count),
      value: value(length),
    })
cells.push({
  label: '2,000 patterns `k_*b<i>*a…a*q` (62 part lengths), value 64 KB (no match): the one pass at its costliest',
  patterns: chains(2000),
  value: value(65_536),
})
cells.push({
  label: 'the same level, value `b…b` 64 KB (no match): the old loop at its costliest on it',
  patterns: chains(2000),
  value: `k_${'b'.repeat(65_535)}q`,
})
cells.push({
  label: 'the largest call at the defaults: 2,000 patterns `k_*a<i>*y<i>*q`, value 65,536 (`envoy.max-value-length`) + `k_`',
  patterns: spread(2000),
  value: value(65_536 + 1),
})

console.log(`Node ${process.version}, ${cpus()[0]?.model ?? 'unknown CPU'} × ${cpus().length}, load average ${loadavg()[0]?.toFixed(2)}`)
console.log()
const builds = new Map<string, string>()
console.log('| level and value | old loop | one pass (auto) | speed-up |')
console.log('|---|---:|---:|---:|')
for (const cell of cells) {
  const set = new WildcardSet()
  for (const p of cell.patterns) set.add(p)
  const parts = cell.patterns.map((p) => p.split('*'))
  // the automaton is built at the level's first match that needs it; an empty value builds it and reads nothing
  const t = performance.now()
  set.firstMatch('', 'scan')
  const build = performance.now() - t
  const expected = set.firstMatch(cell.value)
  const got = oldFirstMatch(parts, cell.value)
  if (got !== expected) throw new Error(`${cell.label}: the old loop says ${got}, the one pass ${expected}`)
  const old = median(() => oldFirstMatch(parts, cell.value))
  const now = median(() => set.firstMatch(cell.value))
  console.log(`| ${cell.label} | ${fmt(old)} | ${fmt(now)} | ${(old / now).toFixed(old / now >= 10 ? 0 : 1)}× |`)
  const level = cell.label.replace(/, value.*$/, '').replace(/ \(.*$/, '')
  if (cell.patterns.length > 8 && !builds.has(level)) builds.set(level, fmt(build))
}
console.log()
console.log('The automaton, built at the first match of a level of more than 8 patterns (cold, once per level and config load):')
console.log()
for (const [level, time] of builds) console.log(`- ${level}: ${time}`)
console.log()
console.log(`load average at the end ${loadavg()[0]?.toFixed(2)}`)
