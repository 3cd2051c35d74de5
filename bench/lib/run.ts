/**
 * The engine benchmark as a function: every subject and key pattern in one process, rounds
 * interleaved, medians out. `bench/engine.bench.ts` prints and records what this returns; the
 * smoke test runs it on tiny inputs.
 */
import { calibrate, compileLoop, type LoopState, type MemoryDelta, measureHeapPerKey, median, perTurnCostNs } from './harness.js'
import { type EngineSource, loadOurs, type Ours } from './load-ours.js'
import { subjects as allSubjects, type PatternId, type Subject, type SubjectKind } from './subjects.js'

/** Sizes and durations of one run. */
export interface BenchConfig {
  /** Measurements per subject and pattern; the median is reported. */
  readonly rounds: number
  /** Wall time of one measurement, ms. */
  readonly targetMs: number
  /** Least time each subject runs before it is measured, ms. */
  readonly warmupMs: number
  /** Keys of the round-robin pattern. */
  readonly manyKeys: number
  /** Keys of the flood pattern (visited in a fixed shuffled order). */
  readonly floodKeys: number
  /** Distinct keys each limiter is filled with for the heap measurement; 0 skips it. */
  readonly memoryKeys: number
  /** Event-loop turns per measurement of a clock's per-turn cost. */
  readonly clockTurns: number
  /** How our engine is loaded: compiled like the published build (default), or src/ through tsx. */
  readonly engine?: EngineSource
  /** Which subjects run (all by default). */
  readonly only?: (subject: Subject) => boolean
  /** Progress lines (to stderr in the CLI). */
  readonly log?: (line: string) => void
}

/** A full run: about two minutes on a 2-core machine. */
export const FULL_CONFIG: BenchConfig = {
  rounds: 9,
  targetMs: 100,
  warmupMs: 150,
  manyKeys: 10_000,
  floodKeys: 1_000_000,
  memoryKeys: 1_000_000,
  clockTurns: 20_000,
}

/** `--quick`: a smoke run of a few seconds, with smaller floods. */
export const QUICK_CONFIG: BenchConfig = {
  rounds: 3,
  targetMs: 5,
  warmupMs: 10,
  manyKeys: 10_000,
  floodKeys: 50_000,
  memoryKeys: 50_000,
  clockTurns: 2_000,
}

/** Medians of one subject in one pattern (or one clock), ns per call. */
export interface Timing {
  readonly id: string
  readonly label: string
  readonly kind: SubjectKind | 'clock'
  readonly pattern: PatternId | 'clock'
  /** ns per call, one per round. */
  readonly samples: readonly number[]
  readonly medianNs: number
  readonly minNs: number
  readonly maxNs: number
  /** Calls per measurement. */
  readonly calls: number
}

/** Heap per key of one subject. */
export interface MemoryResult extends MemoryDelta {
  readonly id: string
  readonly label: string
  readonly kind: SubjectKind
}

/** A key pattern as run. */
export interface PatternInfo {
  readonly id: PatternId
  readonly label: string
  readonly keys: number
}

/** Everything one run measured. */
export interface BenchResult {
  readonly config: BenchConfig
  /** How our engine was loaded. */
  readonly engine: EngineSource
  readonly patterns: readonly PatternInfo[]
  readonly timings: readonly Timing[]
  readonly memory: readonly MemoryResult[]
  readonly clocks: readonly Timing[]
  /** ns a clock adds to an event-loop turn when read once in it (median over rounds). */
  readonly perTurn: readonly { readonly label: string; readonly extraNs: number }[]
}

interface Pattern extends PatternInfo {
  /** The order in which keys are first hit. */
  readonly insertOrder: readonly string[]
  /** The order in which they are visited while measured. */
  readonly visitOrder: readonly string[]
}

/** A fixed shuffle (xorshift32, seeded), so every run and every subject sees the same order. */
function shuffled<T>(items: readonly T[], seed = 0x9e3779b9): T[] {
  const out = [...items]
  let x = seed | 0
  for (let i = out.length - 1; i > 0; i--) {
    x ^= x << 13
    x ^= x >>> 17
    x ^= x << 5
    const j = (x >>> 0) % (i + 1)
    const t = out[i] as T
    out[i] = out[j] as T
    out[j] = t
  }
  return out
}

function keyList(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `user:${i}`)
}

function makePatterns(config: BenchConfig): Pattern[] {
  const hot = ['user:hot']
  const many = keyList(config.manyKeys)
  const flood = keyList(config.floodKeys)
  const fmt = (n: number) => n.toLocaleString('en-US')
  return [
    { id: 'hot', label: 'one hot key', keys: 1, insertOrder: hot, visitOrder: hot },
    { id: 'many', label: `${fmt(many.length)} keys, round-robin`, keys: many.length, insertOrder: many, visitOrder: many },
    // visited in a shuffled order: in insertion order our slots would be read sequentially, which
    // the CPU's prefetcher rewards and real traffic over a million clients does not
    { id: 'flood', label: `${fmt(flood.length)} keys, shuffled`, keys: flood.length, insertOrder: flood, visitOrder: shuffled(flood) },
  ]
}

interface Running {
  readonly id: string
  readonly label: string
  readonly kind: SubjectKind | 'clock'
  readonly run: (n: number) => number | Promise<number>
  readonly samples: number[]
  calls: number
  dispose(): void | Promise<void>
}

/** Warms up, calibrates, then measures every entry once per round, rotating who goes first. */
async function measureInterleaved(entries: Running[], config: BenchConfig): Promise<void> {
  for (const entry of entries) entry.calls = await calibrate(entry.run, config)
  for (let round = 0; round < config.rounds; round++) {
    for (let i = 0; i < entries.length; i++) {
      const entry = entries[(i + round) % entries.length] as Running
      const elapsed = await entry.run(entry.calls)
      entry.samples.push(elapsed / entry.calls)
    }
  }
}

function timingOf(entry: Running, pattern: PatternId | 'clock'): Timing {
  return {
    id: entry.id,
    label: entry.label,
    kind: entry.kind,
    pattern,
    samples: entry.samples,
    medianNs: median(entry.samples),
    minNs: Math.min(...entry.samples),
    maxNs: Math.max(...entry.samples),
    calls: entry.calls,
  }
}

async function runPattern(pattern: Pattern, subjects: readonly Subject[], config: BenchConfig): Promise<Timing[]> {
  const entries: Running[] = []
  for (const subject of subjects) {
    if (!subject.patterns.includes(pattern.id)) continue
    const target = subject.make()
    const loop = compileLoop(subject.isAsync)
    // every key is hit once first, so the measurement sees held keys, not first hits
    await loop(target.op, pattern.insertOrder, pattern.insertOrder.length, { cursor: 0, sink: undefined })
    const state: LoopState = { cursor: 0, sink: undefined }
    entries.push({
      id: subject.id,
      label: subject.label,
      kind: subject.kind,
      run: (n) => loop(target.op, pattern.visitOrder, n, state),
      samples: [],
      calls: 0,
      dispose: () => target.dispose(),
    })
  }
  try {
    await measureInterleaved(entries, config)
  } finally {
    for (const entry of entries) await entry.dispose()
  }
  return entries.map((entry) => timingOf(entry, pattern.id))
}

async function runClocks(
  config: BenchConfig,
  cachedClock: Ours['cachedClock'],
): Promise<{ clocks: Timing[]; perTurn: BenchResult['perTurn'] }> {
  const readers: [string, string, () => number][] = [
    ['date-now', '`Date.now()`', () => Date.now()],
    ['performance-now', '`performance.now()`', () => performance.now()],
    ['cached-clock', '`cachedClock()`, reads in a tight loop (one `Date.now()` per 64)', () => cachedClock()],
  ]
  const keys = ['-']
  const entries: Running[] = readers.map(([id, label, read]) => {
    const loop = compileLoop(false)
    const state: LoopState = { cursor: 0, sink: undefined }
    return { id, label, kind: 'clock', run: (n) => loop(read, keys, n, state), samples: [], calls: 0, dispose: () => undefined }
  })
  await measureInterleaved(entries, config)

  // one read per event-loop turn, as when each request arrives in its own turn
  const turnReaders: [string, (() => number) | undefined][] = [
    ['`Date.now()`, one read per event-loop turn', () => Date.now()],
    [
      '`cachedClock()`, one read per event-loop turn (a `Date.now()` and a 1 ms expiry timer at most once a millisecond)',
      () => cachedClock(),
    ],
  ]
  const extra: number[][] = turnReaders.map(() => [])
  await perTurnCostNs(undefined, config.clockTurns) // warm-up
  for (let round = 0; round < config.rounds; round++) {
    for (let i = 0; i < turnReaders.length; i++) {
      const empty = await perTurnCostNs(undefined, config.clockTurns)
      const withRead = await perTurnCostNs((turnReaders[i] as [string, () => number])[1], config.clockTurns)
      ;(extra[i] as number[]).push(withRead - empty)
    }
  }
  return {
    clocks: entries.map((entry) => timingOf(entry, 'clock')),
    perTurn: turnReaders.map(([label], i) => ({ label, extraNs: median(extra[i] as number[]) })),
  }
}

/** Runs the whole benchmark: clocks, heap per key, then each key pattern. */
export async function runEngineBench(config: BenchConfig): Promise<BenchResult> {
  const log = config.log ?? (() => undefined)
  const engine = await loadOurs(config.engine ?? 'build')
  try {
    return await runAll(config, engine.ours, log)
  } finally {
    engine.cleanup()
  }
}

async function runAll(config: BenchConfig, ours: Ours, log: (line: string) => void): Promise<BenchResult> {
  const subjects = allSubjects(ours).filter(config.only ?? (() => true))
  const patterns = makePatterns(config)

  log('clocks')
  const { clocks, perTurn } = await runClocks(config, ours.cachedClock)

  const memory: MemoryResult[] = []
  if (config.memoryKeys > 0) {
    for (const subject of subjects) {
      if (!subject.memory) continue
      log(`heap per key: ${subject.id}`)
      const delta = await measureHeapPerKey(subject.make, config.memoryKeys)
      memory.push({ id: subject.id, label: subject.label, kind: subject.kind, ...delta })
    }
  }

  const timings: Timing[] = []
  for (const pattern of patterns) {
    log(`pattern: ${pattern.label}`)
    timings.push(...(await runPattern(pattern, subjects, config)))
  }
  return {
    config,
    engine: config.engine ?? 'build',
    patterns: patterns.map(({ id, label, keys }) => ({ id, label, keys })),
    timings,
    memory,
    clocks,
    perTurn,
  }
}
