/**
 * Turns a {@link BenchResult} into the markdown of docs/BENCHMARKS.md, and replaces the engine's
 * section of that file with it.
 */
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import type { BenchResult, Timing } from './run.js'
import type { PatternId } from './subjects.js'

/** Heading of the section this benchmark owns in docs/BENCHMARKS.md. */
export const SECTION_HEADING = '## Engine: local decisions'

/** Where and how a run happened. */
export interface RunInfo {
  readonly date: string
  readonly node: string
  readonly cpu: string
  readonly cores: number
  readonly command: string
  /** One-minute load average when the run started and when it ended. */
  readonly load?: readonly [number, number]
}

const INTRO = `# Benchmarks

Figures measured on the project's development machine. Re-run the engine benchmark with

\`\`\`sh
node --expose-gc --import tsx bench/engine.bench.ts          # 1 to 2 minutes, rewrites the section below
node --expose-gc --import tsx bench/engine.bench.ts --quick  # a smoke run in seconds, prints only
\`\`\`

The machine is shared (2 cores, other jobs running at the same time), so single figures are
noisy. Every figure is the median of several rounds in which all subjects take turns, so a drift
of the machine hits all of them; differences under 10% are noise.

The stores, the middleware and the service have benchmarks of their own, in the \`BENCHMARKS-*.md\` pages beside this one.
`

function ns(value: number): string {
  if (!Number.isFinite(value)) return String(value)
  return value < 100 ? value.toFixed(1) : Math.round(value).toLocaleString('en-US')
}

function spread(t: Timing): string {
  return `±${Math.round(((t.maxNs - t.minNs) / 2 / t.medianNs) * 100)}%`
}

function ratio(value: number): string {
  return value >= 10 ? `${value.toFixed(0)}×` : `${value.toFixed(1)}×`
}

function find(result: BenchResult, id: string, pattern: PatternId): Timing | undefined {
  return result.timings.find((t) => t.id === id && t.pattern === pattern)
}

/** Whether each target of the issue is met, one line each. */
export function targetLines(result: BenchResult): string[] {
  const lines: string[] = []
  const others = ['erl-increment', 'limiter-map', 'limiter-bucket']
  for (const oursId of ['ours-increment', 'ours-increment-datenow']) {
    for (const pattern of ['hot', 'many'] as const) {
      const ours = find(result, oursId, pattern)
      const rlf = find(result, 'rlf-consume', pattern)
      if (ours === undefined || rlf === undefined) continue
      const label = result.patterns.find((p) => p.id === pattern)?.label ?? pattern
      const x = rlf.medianNs / ours.medianNs
      const vs = others.flatMap((id) => {
        const peer = find(result, id, pattern)
        return peer === undefined ? [] : [{ id, x: peer.medianNs / ours.medianNs }]
      })
      const allFaster = vs.every((v) => v.x > 1)
      const close = vs.some((v) => v.x > 0.9 && v.x < 1.1)
      lines.push(
        `- ${ours.label}, ${label}: ${x.toFixed(2)}× rate-limiter-flexible's time (target ≥ 10×: ${x >= 10 ? 'met' : 'MISSED'}); ` +
          `${vs.map((v) => `${ratio(v.x)} ${shortPeer(v.id).replace(/^vs /, '')}`).join(', ')} ` +
          `(target faster than every other peer: ${allFaster ? 'met' : 'MISSED'}${close ? ', within the 10% noise for at least one' : ''}).`,
      )
    }
  }
  const ours = result.memory.find((m) => m.kind === 'ours')
  const peerMemory = result.memory.filter((m) => m.kind === 'peer')
  if (ours !== undefined && peerMemory.length > 0) {
    const best = peerMemory.reduce((a, b) => (a.bytesPerKey <= b.bytesPerKey ? a : b))
    const met = ours.bytesPerKey < best.bytesPerKey
    lines.push(
      `- heap per tracked key: ours ${Math.round(ours.bytesPerKey)} B, the leanest peer ${Math.round(best.bytesPerKey)} B ` +
        `(${best.label}) (target below every peer: ${met ? 'met' : 'MISSED'}).`,
    )
  }
  return lines
}

/** The section's markdown, heading included. */
export function renderSection(result: BenchResult, info: RunInfo): string {
  const { config, patterns } = result
  const out: string[] = [SECTION_HEADING, '']
  out.push(
    `Run ${info.date} on ${info.cpu} (${info.cores} cores), Node ${info.node}, with \`${info.command}\`. ` +
      `Medians of ${config.rounds} rounds of about ${config.targetMs} ms per subject; ± is half the spread between the fastest and the slowest round.` +
      (info.load === undefined
        ? ''
        : ` Load average (1 min) ${info.load[0].toFixed(1)} at the start, ${info.load[1].toFixed(1)} at the end.`),
    '',
  )

  out.push('### Time per call (ns, lower is better)', '')
  out.push(`| subject | ${patterns.map((p) => p.label).join(' | ')} |`)
  out.push(`| --- | ${patterns.map(() => '---:').join(' | ')} |`)
  const seen = new Set<string>()
  for (const t of result.timings) {
    if (seen.has(t.id)) continue
    seen.add(t.id)
    const cells = patterns.map((p) => {
      const m = find(result, t.id, p.id)
      return m === undefined ? '–' : `${ns(m.medianNs)} ${spread(m)}`
    })
    out.push(`| ${t.label} | ${cells.join(' | ')} |`)
  }
  out.push('')

  const oursIds = [...seen].filter((id) => result.timings.find((t) => t.id === id)?.kind === 'ours')
  const peerIds = [...seen].filter((id) => result.timings.find((t) => t.id === id)?.kind === 'peer' && !id.endsWith('-denied'))
  out.push('### How many times faster ours is (peer median / ours median, same run)', '')
  out.push(`| ours | key pattern | ${peerIds.map((id) => shortPeer(id)).join(' | ')} |`)
  out.push(`| --- | --- | ${peerIds.map(() => '---:').join(' | ')} |`)
  for (const id of oursIds) {
    for (const p of patterns) {
      const ours = find(result, id, p.id)
      if (ours === undefined) continue
      const cells = peerIds.map((peer) => {
        const other = find(result, peer, p.id)
        return other === undefined ? '–' : ratio(other.medianNs / ours.medianNs)
      })
      out.push(`| ${ours.label.replace(/^ours: /, '')} | ${p.label} | ${cells.join(' | ')} |`)
    }
  }
  out.push('')
  const denied = find(result, 'ours-hit-denied', 'hot')
  const rlfDenied = find(result, 'rlf-consume-denied', 'hot')
  if (denied !== undefined && rlfDenied !== undefined) {
    out.push(
      `Denied hits, one hot key: ours ${ns(denied.medianNs)} ns, rate-limiter-flexible ${ns(rlfDenied.medianNs)} ns ` +
        `(${ratio(rlfDenied.medianNs / denied.medianNs)}).`,
      '',
    )
  }

  const targets = targetLines(result)
  if (targets.length > 0) out.push('### Targets of the issue', '', ...targets, '')

  if (result.memory.length > 0) {
    const keys = (result.memory[0]?.keys ?? 0).toLocaleString('en-US')
    out.push(`### Heap per tracked key (${keys} distinct keys, one window size, key strings included)`, '')
    out.push('| subject | heapUsed (MB) | external (MB) | of which arrayBuffers (MB) | bytes per key |')
    out.push('| --- | ---: | ---: | ---: | ---: |')
    for (const m of result.memory) {
      const mb = (bytes: number) => (bytes / 1e6).toFixed(1)
      out.push(`| ${m.label} | ${mb(m.heapUsed)} | ${mb(m.external)} | ${mb(m.arrayBuffers)} | ${Math.round(m.bytesPerKey)} |`)
    }
    out.push(
      '',
      'Bytes per key = (heapUsed + external) after − before, over the number of keys, with a full GC before each reading and the ' +
        'limiter still reachable. Node counts `arrayBuffers` inside `external`, so our typed-array counters are counted once, ' +
        'in `external`. Keys are `user:<i>` strings built inside the measured region: each subject pays for the key strings it keeps. ' +
        'One measurement per subject. A million keys is close to full for both our typed arrays (`maxKeys` defaults to 1,000,000) ' +
        "and the hash tables of V8's `Map` (2^20 entries); at other counts both carry spare capacity after their last doubling.",
      '',
    )
  }

  out.push('### Cost of reading the clock', '')
  out.push('| clock | ns per read |')
  out.push('| --- | ---: |')
  for (const c of result.clocks) out.push(`| ${c.label} | ${ns(c.medianNs)} ${spread(c)} |`)
  for (const t of result.perTurn) out.push(`| ${t.label} | ${ns(t.extraNs)} (extra over an empty turn) |`)
  out.push('')

  out.push(
    '### What each subject does',
    '',
    '- All subjects hold one window of 60 s. Ours: a local namespace (`syncRate: -1`, `windowSizes: [60]`), called as ' +
      '`rl.increment(key, 60, 1, ns)` or through a limiter with one limit (`limiter.hit(key)`): a limit never reached (allowed), ' +
      'or a limit of 1 (every hit after the first denied, denied hits counted as by default).',
    '- Peers: rate-limiter-flexible `RateLimiterMemory({ points, duration: 60 }).consume(key)` and express-rate-limit ' +
      '`MemoryStore` (`init({ windowMs: 60000 })`, `increment(key)`) return Promises, awaited one call at a time as a middleware ' +
      'does; limiter\'s `TokenBucket` has no keys, so a user keeps a bucket per key in a `Map` (the "one bucket" row is the bucket alone).',
    result.engine === 'build'
      ? "- Our engine is compiled from src/ by TypeScript with the build's options, as in the published package. Through tsx " +
          "(`--source`) code that creates a closure per call runs slower: tsx compiles with esbuild's `keepNames`, which wraps " +
          'each such closure in an `Object.defineProperty` call.'
      : '- Our engine was loaded from src/ through tsx (`--source`), not as the published build: closures created per call ' +
          "pay for esbuild's `keepNames` here.",
    '- Each subject gets its own compiled timing loop, so its call site sees only its own function. Every key is hit once before ' +
      'the measurement. The floor row is that loop calling a function that returns its argument; it is not subtracted.',
    '- Keys are built once, before the measurement, so V8 has their hash cached; a key built per request adds the cost of ' +
      'building and hashing it, the same for every subject.',
    '- The default clock (`cachedClock`) reads `Date.now()` once per 64 reads, and at most about 1 ms after the last read (a timer ' +
      'expires it), which a tight loop rewards. In a server where each request arrives in an event-loop turn of its own, a decision ' +
      'pays the per-turn cost in the clock table instead.',
    '',
  )
  return out.join('\n')
}

/** Replaces (or appends) the engine's section of the benchmarks file, creating it with an intro. */
export function writeSection(path: string, section: string): void {
  const current = existsSync(path) ? readFileSync(path, 'utf8') : INTRO
  const lines = current.split('\n')
  const start = lines.findIndex((line) => line.trim() === SECTION_HEADING)
  let next: string
  if (start < 0) {
    next = `${current.trimEnd()}\n\n${section.trimEnd()}\n`
  } else {
    let end = lines.findIndex((line, i) => i > start && /^## /.test(line))
    if (end < 0) end = lines.length
    const before = lines.slice(0, start).join('\n').trimEnd()
    const after = lines.slice(end).join('\n').trim()
    next = `${before}\n\n${section.trimEnd()}\n${after.length > 0 ? `\n${after}\n` : ''}`
  }
  writeFileSync(path, next)
}

function shortPeer(id: string): string {
  switch (id) {
    case 'rlf-consume':
      return 'vs rate-limiter-flexible'
    case 'erl-increment':
      return 'vs express-rate-limit'
    case 'limiter-map':
      return 'vs limiter (Map + bucket)'
    case 'limiter-bucket':
      return 'vs limiter (one bucket)'
    default:
      return `vs ${id}`
  }
}

/**
 * Replaces the section of `file` that starts with the line `heading` (up to the next `## `
 * heading), or appends it; every other section is kept. A missing file starts as `intro`.
 */
export function replaceSection(file: string, heading: string, section: string, intro: string): void {
  const current = existsSync(file) ? readFileSync(file, 'utf8') : intro
  const at = current.indexOf(`${heading}\n`)
  let next: string
  if (at < 0) next = `${current.trimEnd()}\n\n${section.trimEnd()}\n`
  else {
    const end = current.indexOf('\n## ', at + heading.length)
    next = `${current.slice(0, at)}${section.trimEnd()}\n${end < 0 ? '' : current.slice(end)}`
  }
  writeFileSync(file, next)
}
