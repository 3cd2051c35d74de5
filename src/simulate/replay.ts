import { MemoryFixedWindow, MemorySlidingLog } from '../algorithms/index.js'
import { ConfigError } from '../core/errors.js'
import { createFakeClock, MemoryStrategy, RateLimiting, type Strategy } from '../index.js'
import { EscrowFleet } from './escrow-fleet.js'
import { CounterFleet } from './fleet.js'
import { seededRandom, type Trace, traceSeconds } from './trace.js'
import { type AccuracyMetrics, ExactTruth } from './truth.js'

/** The algorithms a cell can run. */
export type AlgorithmName = 'fixed-window' | 'sliding-log' | 'counter' | 'counter-escrow'

/** One algorithm of the grid and how it runs. */
export interface AlgorithmEntry {
  readonly name: AlgorithmName
  readonly label: string
  /**
   * True for the service's fixed window and sliding log: every hit is one call to the central
   * store, so the node count and the sync rate do not change their answers (one cell each).
   */
  readonly perHit: boolean
  /** More namespace options for every simulated process (the counter's variants). */
  readonly namespaceOptions?: Readonly<Record<string, unknown>>
  /** A namespace option the engine must accept for this entry to run; it is left out until then. */
  readonly requires?: string
}

/** Every algorithm the simulator knows, in the order tables list them. */
export const ALGORITHMS: readonly AlgorithmEntry[] = [
  { name: 'fixed-window', label: 'fixed window', perHit: true },
  { name: 'sliding-log', label: 'sliding log', perHit: true },
  { name: 'counter', label: 'counter', perHit: false },
  // every process admits only on budget the store granted it (docs/ARCHITECTURE.md, "Escrow"):
  // replayed hit by hit by escrow-fleet.ts, every call to the store counted
  { name: 'counter-escrow', label: 'counter + escrow', perHit: false, namespaceOptions: { escrow: true }, requires: 'escrow' },
]

/** Whether `rl.new()` accepts the namespace option `option` with `value` (a throwaway instance). */
export function engineAccepts(option: string, value: unknown): boolean {
  const rl = RateLimiting.newInstance('simulate-probe')
  try {
    // a periodic namespace on the memory store: the one shape every option of a counter variant accepts
    rl.new({ namespace: 'probe', windowSizes: [1], syncRate: 1, strategy: new MemoryStrategy(), [option]: value } as Parameters<
      RateLimiting['new']
    >[0])
    return true
  } catch (err) {
    if (err instanceof ConfigError) return false
    throw err
  } finally {
    void rl.close()
  }
}

/** The entries of {@link ALGORITHMS} the engine can run now. */
export function availableAlgorithms(): AlgorithmEntry[] {
  return ALGORITHMS.filter((a) => a.requires === undefined || engineAccepts(a.requires, a.namespaceOptions?.[a.requires]))
}

/** The algorithm entry named `name`; a ConfigError naming the known ones when unknown or not available. */
export function algorithmEntry(name: string): AlgorithmEntry {
  const entry = ALGORITHMS.find((a) => a.name === name)
  if (entry === undefined)
    throw new ConfigError(
      'INVALID_OPTION',
      `algorithm must be one of ${ALGORITHMS.map((a) => a.name).join(', ')}, got ${JSON.stringify(name)}`,
    )
  if (!availableAlgorithms().includes(entry))
    throw new ConfigError(
      'INVALID_OPTION',
      `algorithm ${name} needs the engine option "${entry.requires}", which this version does not have`,
    )
  return entry
}

/** What every cell of a run shares. */
export interface ReplaySetup {
  readonly limit: number
  readonly windowSec: number
  /** Whether a denied hit still counts (the engine's and the fixed window's default). @default true */
  readonly countDenied?: boolean
  /** How hits are spread over the processes: in turn, or at random (seeded). @default "round-robin" */
  readonly assign?: 'round-robin' | 'random'
  /** Seed of the random assignment. @default 1 */
  readonly seed?: number
  /** Makes a store for a cell's processes (one per shard of keys, fleet.ts). @default a new MemoryStrategy */
  readonly strategy?: () => Strategy
  /** A key whose true and estimated rates are recorded hit by hit (the report's third chart). */
  readonly track?: number
  /**
   * Told every decision, in time order: the key, its time, the process that decided (0 for the
   * per-hit algorithms), the outcome and the rate decided on (bench/accuracy/explain.ts).
   */
  readonly onHit?: (key: number, t: number, node: number, allowed: boolean, rateBefore: number) => void
  /** Keys per shard of the counter's fleet (fleet.ts). @default 1 */
  readonly shardSize?: number
  /** Shards per RateLimiting instance of a simulated process (fleet.ts); answers do not depend on it. */
  readonly shardsPerInstance?: number
}

/** One cell of the grid. */
export interface CellSpec {
  readonly algorithm: AlgorithmEntry
  /** Processes sharing the limit (1 for the per-hit algorithms). */
  readonly nodes: number
  /** Seconds between syncs (0 for the per-hit algorithms). */
  readonly syncRate: number
}

/** The tracked key's rates, hit by hit: seconds from the trace's start, exact and estimated. */
export interface RateSeries {
  readonly t: number[]
  readonly exact: number[]
  readonly estimated: number[]
}

/** A cell's answer. */
export interface CellResult extends AccuracyMetrics {
  readonly algorithm: AlgorithmName
  readonly label: string
  /** Null for the per-hit algorithms, whose answers do not depend on it. */
  readonly nodes: number | null
  /** Null for the per-hit algorithms. */
  readonly syncRate: number | null
  /**
   * Store calls per second of the trace: one per hit for the per-hit algorithms; for the counter,
   * per process and sync instant, two when it has hits to write (the writes, then the read after
   * the settle time) and one when it only refreshes the keys it holds.
   */
  readonly storeCallsPerSec: number
  /** Key-windows written to the store per second (per-hit algorithms: one per hit). */
  readonly storeRowsPerSec: number
  /** Wall time of the replay, ms. */
  readonly replayMs: number
  readonly series?: RateSeries
}

/** The cells of a grid: each per-hit algorithm once, each counter variant at every nodes × sync rate. */
export function gridCells(algorithms: readonly AlgorithmEntry[], nodes: readonly number[], syncRates: readonly number[]): CellSpec[] {
  const cells: CellSpec[] = []
  for (const algorithm of algorithms) {
    if (algorithm.perHit) {
      cells.push({ algorithm, nodes: 1, syncRate: 0 })
      continue
    }
    for (const n of nodes) for (const s of syncRates) cells.push({ algorithm, nodes: n, syncRate: s })
  }
  return cells
}

/** Called every so many hits with the hits replayed so far in this cell. */
export type ProgressFn = (hitsDone: number) => void

const PROGRESS_EVERY = 1 << 16
const MAX_SERIES = 200_000

/** Replays `trace` through one cell and scores it against the exact log. */
export async function runCell(trace: Trace, cell: CellSpec, setup: ReplaySetup, progress?: ProgressFn): Promise<CellResult> {
  const started = performance.now()
  const { limit, windowSec } = setup
  const windowMs = Math.round(windowSec * 1000)
  const countDenied = setup.countDenied ?? true
  const truth = new ExactTruth(limit, windowMs, trace.keyNames.length)
  const t0 = trace.length > 0 ? (trace.times[0] as number) : 0
  const series: RateSeries | undefined = setup.track === undefined ? undefined : { t: [], exact: [], estimated: [] }
  const seconds = traceSeconds(trace)
  const onHit = setup.onHit
  const record = (i: number, key: number, t: number, allowed: boolean, counted: boolean, rateBefore: number, node = 0) => {
    const exact = truth.record(key, t, allowed, counted, rateBefore)
    onHit?.(key, t, node, allowed, rateBefore)
    if (series !== undefined && key === setup.track && series.t.length < MAX_SERIES) {
      series.t.push((t - t0) / 1000)
      series.exact.push(exact)
      series.estimated.push(rateBefore)
    }
    if (progress !== undefined && (i + 1) % PROGRESS_EVERY === 0) progress(i + 1)
  }
  let load: { callsPerSec: number; rowsPerSec: number }
  if (cell.algorithm.perHit) {
    let now = t0
    const clock = () => now
    const algorithm =
      cell.algorithm.name === 'fixed-window'
        ? new MemoryFixedWindow({ limit, windowMs, clock, countDenied })
        : new MemorySlidingLog({ limit, windowMs, clock })
    const countsDenied = cell.algorithm.name === 'fixed-window' && countDenied
    for (let i = 0; i < trace.length; i++) {
      now = trace.times[i] as number
      const key = trace.keys[i] as number
      const r = algorithm.check(trace.keyNames[key] as string)
      const counted = r.allowed || countsDenied
      record(i, key, now, r.allowed, counted, counted ? r.count - 1 : r.count)
    }
    const perSec = seconds > 0 ? trace.length / seconds : trace.length
    load = { callsPerSec: perSec, rowsPerSec: perSec }
  } else if (cell.algorithm.name === 'counter-escrow') {
    const clock = createFakeClock(t0)
    const fleet = new EscrowFleet({
      nodes: cell.nodes,
      limit,
      windowSec,
      syncRate: cell.syncRate,
      countDenied,
      store: (setup.strategy ?? (() => new MemoryStrategy()))(),
      clock,
      ...(cell.algorithm.namespaceOptions !== undefined ? { namespaceOptions: cell.algorithm.namespaceOptions } : {}),
    })
    await fleet.warmUp(clock, t0)
    const random = setup.assign === 'random' ? seededRandom(setup.seed ?? 1) : undefined
    const n = cell.nodes
    for (let i = 0; i < trace.length; i++) {
      const t = trace.times[i] as number
      await fleet.advanceTo(t)
      clock.set(t)
      const key = trace.keys[i] as number
      const node = random === undefined ? i % n : Math.floor(random() * n)
      const d = await fleet.hit(node, trace.keyNames[key] as string)
      const counted = d.allowed || countDenied
      record(i, key, t, d.allowed, counted, counted ? d.rate - 1 : d.rate, node)
    }
    await fleet.close()
    // calls: grant calls and sync calls; rows: key-windows granted or written (returned)
    load = {
      callsPerSec: seconds > 0 ? fleet.calls / seconds : fleet.calls,
      rowsPerSec: seconds > 0 ? fleet.operations / seconds : fleet.operations,
    }
  } else {
    const clock = createFakeClock(t0)
    const fleet = new CounterFleet(
      {
        limit,
        windowSec,
        nodes: cell.nodes,
        syncRate: cell.syncRate,
        countDenied,
        strategy: setup.strategy ?? (() => new MemoryStrategy()),
        clock,
        ...(setup.shardSize !== undefined ? { shardSize: setup.shardSize } : {}),
        ...(setup.shardsPerInstance !== undefined ? { shardsPerInstance: setup.shardsPerInstance } : {}),
        ...(cell.algorithm.namespaceOptions !== undefined ? { namespaceOptions: cell.algorithm.namespaceOptions } : {}),
      },
      trace.keyNames.length,
    )
    const random = setup.assign === 'random' ? seededRandom(setup.seed ?? 1) : undefined
    const n = cell.nodes
    for (let i = 0; i < trace.length; i++) {
      const t = trace.times[i] as number
      // only a sync awaits: most hits decide with no promise at all
      if (fleet.due(t)) await fleet.advanceTo(t)
      clock.set(t)
      const key = trace.keys[i] as number
      const node = random === undefined ? i % n : Math.floor(random() * n)
      if (fleet.isBehind(node, key)) await fleet.catchUp(node, key)
      fleet.hit(node, key, trace.keyNames[key] as string, t)
      record(i, key, t, fleet.allowed, fleet.counted, fleet.rateBefore, node)
    }
    load = await fleet.finish(seconds)
  }
  progress?.(trace.length)
  return {
    algorithm: cell.algorithm.name,
    label: cell.algorithm.label,
    nodes: cell.algorithm.perHit ? null : cell.nodes,
    syncRate: cell.algorithm.perHit ? null : cell.syncRate,
    ...truth.metrics(),
    storeCallsPerSec: load.callsPerSec,
    storeRowsPerSec: load.rowsPerSec,
    replayMs: performance.now() - started,
    ...(series !== undefined ? { series } : {}),
  }
}

/** Replays every cell in turn; `progress` gets the hits done over all cells and their total. */
export async function runGrid(
  trace: Trace,
  cells: readonly CellSpec[],
  setup: ReplaySetup,
  progress?: (done: number, total: number) => void,
): Promise<CellResult[]> {
  const total = trace.length * cells.length
  const results: CellResult[] = []
  for (let c = 0; c < cells.length; c++) {
    const before = c * trace.length
    results.push(await runCell(trace, cells[c] as CellSpec, setup, progress && ((done) => progress(before + done, total))))
  }
  return results
}
