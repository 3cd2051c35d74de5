import type { WindowTable } from './counter-table.js'
import type { CounterRow } from './strategy.js'
import { previousWeight, slidingRate, windowStartMs } from './window.js'

// Synchronous mode reads a key's previous (closed) window from the store at most once per
// period of this length (a tenth of the window for windows under 10 s), and in between uses the
// value it read: a late push or a reset of that window by another process is seen within it.
const PREVIOUS_REFRESH_MS = 1000

/** Keys of one window table whose previous window was read from the store in the current period. */
interface Reads {
  readonly table: WindowTable
  readonly periodMs: number
  period: number
  start: number
  readonly keys: Set<string>
}

/**
 * Which keys' previous windows a synchronous namespace has read recently: a synchronous hit
 * skips reading a closed window again within `min(1 s, window / 10)` (docs/ARCHITECTURE.md,
 * "One hit"). Bounded: a period's set is dropped when the next period (or window) starts.
 */
export class PreviousReads {
  private readonly reads: Reads[]

  constructor(tables: readonly WindowTable[]) {
    this.reads = tables.map((table) => ({
      table,
      periodMs: Math.min(PREVIOUS_REFRESH_MS, table.sizeMs / 10),
      period: Number.NaN,
      start: Number.NaN,
      keys: new Set<string>(),
    }))
  }

  /** Whether `key`'s previous window in `table` was read from the store in the current period. */
  has(table: WindowTable, key: string, nowMs: number): boolean {
    const reads = this.of(table, nowMs)
    return reads !== undefined && reads.keys.has(key)
  }

  /** Records the previous windows a synchronous push read back. */
  note(rows: readonly CounterRow[], nowMs: number): void {
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i] as CounterRow
      const reads = this.reads.find((r) => r.table.sizeMs === row.windowSizeMs)
      if (reads === undefined || row.windowStartMs !== windowStartMs(nowMs, reads.table.sizeMs) - reads.table.sizeMs) continue
      this.of(reads.table, nowMs)?.keys.add(row.key)
    }
  }

  // The reads of `table` in the current period; a new period (or window) starts empty.
  private of(table: WindowTable, nowMs: number): Reads | undefined {
    const all = this.reads
    for (let i = 0; i < all.length; i++) {
      const reads = all[i] as Reads
      if (reads.table !== table) continue
      // a period boundary is a window boundary too when periodMs divides the size; the window
      // start is checked as well, so that reads never outlive the window they were made in
      const period = Math.floor(nowMs / reads.periodMs)
      const start = windowStartMs(nowMs, table.sizeMs)
      if (period !== reads.period || start !== reads.start) {
        reads.period = period
        reads.start = start
        reads.keys.clear()
      }
      return reads
    }
    return undefined
  }
}

/**
 * The rate of `key` in `table` as the store answered one push (synchronous mode): concurrent
 * hits of this process that were sent later are not in it, so the store's order decides between
 * concurrent hits. The previous window is the store's answer, or when the push did not read it
 * (it was read recently, see {@link PreviousReads}) the value held since. Without rows (the store
 * failed, onStoreError "local") it is the local estimate.
 */
export function rowsRate(table: WindowTable, key: string, rows: readonly CounterRow[] | undefined, nowMs: number): number {
  if (rows === undefined) return table.rate(key, nowMs)
  const size = table.sizeMs
  const start = windowStartMs(nowMs, size)
  let current: number | undefined
  let previous: number | undefined
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i] as CounterRow
    if (row.key !== key || row.windowSizeMs !== size) continue
    if (row.windowStartMs === start) current = row.count
    else if (row.windowStartMs === start - size) previous = row.count
  }
  if (current === undefined) return table.rate(key, nowMs)
  if (previous === undefined) previous = table.counts(key, nowMs).previous
  return slidingRate(current, previous, previousWeight(nowMs, size))
}
