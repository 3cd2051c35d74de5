import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import { ALGORITHMS, type CellResult, type CellSpec, type ReplaySetup, runCell, runGrid } from './replay.js'
import type { Trace } from './trace.js'

/**
 * The grid's cells on worker threads, `jobs` at a time: cells share nothing (each has its own
 * store, clock and fleet), so a cell replays alike on any thread, and a grid takes about its
 * slowest thread's share of the time instead of the sum. The trace is shared, not copied: its
 * times and keys in SharedArrayBuffers, its key names cloned once per thread.
 *
 * This module is also the workers' entry: a thread made here imports it and serves cells. Run as
 * TypeScript source (through tsx, as the tests and benches do), a worker registers tsx first: a
 * worker thread does not inherit the `--import tsx` hooks of its parent.
 */

/** Threads a grid uses by default: one per CPU the process may use. */
export function defaultJobs(): number {
  return typeof os.availableParallelism === 'function' ? os.availableParallelism() : os.cpus().length
}

/** Options of {@link runGridParallel}. */
export interface ParallelOptions {
  /** Cells replayed at once, each on a worker thread (1: in turn, on one). @default {@link defaultJobs} */
  readonly jobs?: number
  /** Called as cells progress with the hits done over all cells and their total. */
  readonly progress?: (done: number, total: number) => void
}

const KIND = 'ratelimiting-simulate-cells'

// A worker's young generation, MB (V8 sizes it at three semi-spaces: 64 MB ones). A replay makes
// short-lived objects by the million (rows, batches, promises of every sync), and with room for
// them it scavenges less often: a 16-process counter cell of the 1,000,000-line bench took 19.1 s
// with Node's defaults, and with `node --max-semi-space-size=N` (the main thread's equivalent)
// 16.0 s for 16, 15.2 s for 32, 13.9 s for 64, 14.8 s for 128.
const YOUNG_GENERATION_MB = 192

// What a worker gets once: the trace (times and keys shared) and the setup's data.
interface WorkerInput {
  readonly kind: typeof KIND
  readonly times: Float64Array
  readonly keys: Int32Array
  readonly keyNames: readonly string[]
  readonly length: number
  readonly setup: Omit<ReplaySetup, 'strategy'>
}

// main -> worker: replay one cell; worker -> main: its progress, then its result or its failure
interface CellJob {
  readonly index: number
  readonly algorithm: string
  readonly nodes: number
  readonly syncRate: number
}
type WorkerMessage =
  | { readonly type: 'progress'; readonly index: number; readonly done: number }
  | { readonly type: 'result'; readonly index: number; readonly result: CellResult }
  | { readonly type: 'error'; readonly index: number; readonly message: string; readonly stack?: string }

/**
 * Replays every cell, `jobs` at a time on worker threads, and answers the results in the order
 * of `cells` (identical to {@link runGrid}'s). One job is one worker too, for its young generation
 * (see {@link YOUNG_GENERATION_MB}). With a setup whose store is a function (which no thread can be
 * sent), or no cells, it is {@link runGrid} on this thread.
 */
export async function runGridParallel(
  trace: Trace,
  cells: readonly CellSpec[],
  setup: ReplaySetup,
  options: ParallelOptions = {},
): Promise<CellResult[]> {
  const jobs = Math.max(1, Math.min(options.jobs ?? defaultJobs(), cells.length))
  if (cells.length === 0 || setup.strategy !== undefined) return runGrid(trace, cells, setup, options.progress)
  const input: WorkerInput = {
    kind: KIND,
    times: shared(trace.times, Float64Array),
    keys: shared(trace.keys, Int32Array),
    keyNames: trace.keyNames,
    length: trace.length,
    setup,
  }
  // the costliest cells first, so that no thread is left with a long one at the end
  const queue = cells.map((_, i) => i).sort((a, b) => cost(cells[b] as CellSpec) - cost(cells[a] as CellSpec) || a - b)
  const results = new Array<CellResult | undefined>(cells.length)
  const done = new Float64Array(cells.length)
  const total = trace.length * cells.length
  let doneSum = 0
  const workers: Worker[] = []
  try {
    await new Promise<void>((resolve, reject) => {
      let running = 0
      let failed = false
      const fail = (err: Error) => {
        if (failed) return
        failed = true
        reject(err)
      }
      const next = (worker: Worker) => {
        const index = queue.shift()
        if (index === undefined) {
          if (--running === 0 && !failed) resolve()
          return
        }
        const cell = cells[index] as CellSpec
        const job: CellJob = { index, algorithm: cell.algorithm.name, nodes: cell.nodes, syncRate: cell.syncRate }
        worker.postMessage(job)
      }
      for (let w = 0; w < jobs; w++) {
        const worker = spawn(input)
        workers.push(worker)
        running++
        worker.on('message', (m: WorkerMessage) => {
          if (m.type === 'error') {
            const err = new Error(m.message)
            if (m.stack !== undefined) err.stack = m.stack
            return fail(err)
          }
          doneSum += (m.type === 'result' ? trace.length : m.done) - (done[m.index] as number)
          done[m.index] = m.type === 'result' ? trace.length : m.done
          options.progress?.(doneSum, total)
          if (m.type === 'result') {
            results[m.index] = m.result
            next(worker)
          }
        })
        worker.on('error', fail)
        worker.on('exit', (code) => {
          if (code !== 0) fail(new Error(`a simulate worker thread exited with code ${code}`))
        })
        next(worker)
      }
    })
  } finally {
    await Promise.all(workers.map((w) => w.terminate()))
  }
  return results as CellResult[]
}

// A relative cost, to start the slow cells first: the counter with several processes syncs one
// to two times a hit.
function cost(cell: CellSpec): number {
  if (cell.algorithm.perHit) return 1
  if (cell.nodes === 1) return 3
  return 10 + cell.nodes / 4
}

// The array itself when its memory is shared already, else a copy in shared memory.
function shared<T extends Float64Array | Int32Array>(array: T, Type: { new (buffer: SharedArrayBuffer): T }): T {
  if (array.buffer instanceof SharedArrayBuffer) return array
  const copy = new Type(new SharedArrayBuffer(array.length * array.BYTES_PER_ELEMENT))
  copy.set(array)
  return copy
}

// A worker thread importing this module. Its entry is a script that imports it, after
// registering tsx's hooks when this module is TypeScript source.
function spawn(input: WorkerInput): Worker {
  const url = import.meta.url
  const target = JSON.stringify(url)
  const boot = url.endsWith('.ts')
    ? `import(${JSON.stringify(tsxApi(url))}).then((tsx) => tsx.register()).then(() => import(${target}))`
    : `import(${target})`
  return new Worker(boot, { eval: true, workerData: input, resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB } })
}

// The URL of tsx's ESM API (its "./esm/api" export for import), found from `from`: tsx skips
// registering its hooks in a worker thread (privatenumber/tsx#354), so a worker calls its register().
function tsxApi(from: string): string {
  const pkg = createRequire(from).resolve('tsx/package.json')
  const { exports } = JSON.parse(readFileSync(pkg, 'utf8')) as { exports: Record<string, { import: { default: string } }> }
  const entry = exports['./esm/api']?.import.default
  if (entry === undefined) throw new Error(`${pkg} has no ./esm/api export`)
  return pathToFileURL(path.join(path.dirname(pkg), entry)).href
}

// In a worker made by spawn(): replay the cells it is sent, one at a time.
function serve(input: WorkerInput): void {
  const port = parentPort
  if (port === null) return
  const trace: Trace = { times: input.times, keys: input.keys, keyNames: input.keyNames, length: input.length }
  port.on('message', (job: CellJob) => {
    const algorithm = ALGORITHMS.find((a) => a.name === job.algorithm)
    const post = (m: WorkerMessage) => port.postMessage(m)
    if (algorithm === undefined) return post({ type: 'error', index: job.index, message: `unknown algorithm ${job.algorithm}` })
    const cell: CellSpec = { algorithm, nodes: job.nodes, syncRate: job.syncRate }
    runCell(trace, cell, input.setup, (n) => post({ type: 'progress', index: job.index, done: n })).then(
      (result) => post({ type: 'result', index: job.index, result }),
      (err: unknown) =>
        post({
          type: 'error',
          index: job.index,
          message: err instanceof Error ? err.message : String(err),
          ...(err instanceof Error && err.stack !== undefined ? { stack: err.stack } : {}),
        }),
    )
  })
}

if (!isMainThread && (workerData as Partial<WorkerInput> | null)?.kind === KIND) serve(workerData as WorkerInput)
