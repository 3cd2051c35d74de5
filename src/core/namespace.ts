import { randomUUID } from 'node:crypto'
import { channel } from 'node:diagnostics_channel'
import { type Clock, cachedClock } from './clock.js'
import type { CounterDict, DictStats, WindowTable } from './counter-table.js'
import { StoreError, toStoreError, usageRangeError, usageTypeError } from './errors.js'
import type { OnStoreError, ResolvedNamespaceOptions, SyncMode } from './options.js'
import type { CounterRow, Strategy, WindowPush, WindowRef } from './strategy.js'
import { deadline, withTimeout } from './timeout.js'
import { previousWeight, windowStartSec } from './window.js'

/** Published with every store failure: `{ namespace, error }`. */
export const storeErrorChannel = channel('ratelimiting:store-error')
/** Published after every periodic sync: `{ namespace, durationMs, windows, refreshed, error? }`. */
export const syncChannel = channel('ratelimiting:sync')

// After a failed synchronous hit, unsynced hits are retried on this delay.
const RETRY_DELAY_MS = 1000
// Synchronous mode reads a key's previous (closed) window from the store at most once per
// period of this length (a tenth of the window for windows under 10 s), and in between uses the
// value it read: a late push or a reset of that window by another process is seen within it.
const PREVIOUS_REFRESH_MS = 1000

/** Keys of one window table whose previous window was read from the store in the current period. */
interface PreviousReads {
  readonly table: WindowTable
  readonly periodMs: number
  period: number
  start: number
  readonly keys: Set<string>
}

/** What a namespace reports about itself. */
export interface NamespaceStats {
  readonly namespace: string
  readonly mode: SyncMode
  /** Completed sync cycles (periodic mode, plus flushes). */
  readonly syncs: number
  /** Store calls that failed (syncs, synchronous hits, fetches). */
  readonly storeErrors: number
  /** Epoch ms of the last sync that reached the store, 0 if none yet. */
  readonly lastSyncAtMs: number
  /** Key-windows with unsynced hits at the last sync. */
  readonly pendingWindows: number
  /** Unsynced hits at the last sync. */
  readonly pendingHits: number
  readonly dict: DictStats
}

/** Resolves a strategy name to an object; set by the package's entry point. */
export interface StrategyResolver {
  create(name: string, options: Record<string, unknown>): Strategy | Promise<Strategy>
  supportsDecimals(name: string): boolean
}

/**
 * One namespace: its window tables, its sync mode and its link to a strategy. Users reach it
 * through `RateLimiting`; the decisions in `limiter.ts` use its tables directly.
 */
export class Namespace {
  readonly name: string
  readonly mode: SyncMode
  readonly syncRate: number
  readonly windowSizes: readonly number[]
  readonly tables: readonly WindowTable[]
  readonly clock: Clock
  readonly nodeId: string
  readonly onStoreError: OnStoreError
  readonly dict: CounterDict
  /** Whether the namespace's store holds decimal counts; decimal values are refused when not. */
  readonly decimals: boolean
  private readonly options: ResolvedNamespaceOptions
  private readonly resolveStrategy: StrategyResolver
  private strategy: Strategy | undefined
  private strategyLoading: Promise<Strategy> | undefined
  private readonly ownsStrategy: boolean
  private seq = 0
  private timer: NodeJS.Timeout | undefined
  private retryTimer: NodeJS.Timeout | undefined
  private running: Promise<void> | undefined
  private queued: Promise<void> | undefined
  private fetching: Promise<void> | undefined
  private closed = false
  private syncs = 0
  private storeErrors = 0
  private lastSyncAtMs = 0
  private pendingWindows = 0
  private pendingHits = 0
  private readonly previousReads: PreviousReads[]

  constructor(options: ResolvedNamespaceOptions, dict: CounterDict, resolveStrategy: StrategyResolver) {
    this.options = options
    this.name = options.namespace
    this.mode = options.mode
    this.syncRate = options.syncRate
    this.windowSizes = options.windowSizes
    this.clock = options.clock ?? cachedClock
    this.nodeId = options.nodeId ?? randomUUID()
    this.onStoreError = options.onStoreError
    this.dict = dict
    this.resolveStrategy = resolveStrategy
    const synced = options.mode !== 'local'
    this.tables = options.windowSizes.map((size) => dict.addTable(options.namespace, size, synced))
    this.previousReads = this.tables.map((table) => ({
      table,
      periodMs: Math.min(PREVIOUS_REFRESH_MS, table.sizeMs / 10),
      period: Number.NaN,
      start: Number.NaN,
      keys: new Set<string>(),
    }))
    this.ownsStrategy = typeof options.strategy === 'string'
    if (synced && typeof options.strategy === 'object') this.strategy = options.strategy
    this.decimals =
      !synced ||
      (typeof options.strategy === 'object'
        ? options.strategy.supportsDecimals
        : resolveStrategy.supportsDecimals(options.strategy as string))
    this.arm()
  }

  /** The table of one window size; a size the namespace does not list is a RangeError. */
  table(windowSize: number): WindowTable {
    const tables = this.tables
    for (let i = 0; i < tables.length; i++) {
      const t = tables[i] as WindowTable
      if (t.sizeSec === windowSize) return t
    }
    throw usageRangeError(
      'UNKNOWN_WINDOW_SIZE',
      `window size ${String(windowSize)} is not one of namespace "${this.name}"'s windowSizes [${this.windowSizes.join(', ')}]`,
    )
  }

  /** Checks a hit's key and value; cheap enough for every hit. */
  check(key: unknown, value: unknown): void {
    if (typeof key !== 'string') throw usageTypeError('INVALID_KEY', `key must be a string, got ${typeof key}`)
    if (typeof value !== 'number') throw usageTypeError('INVALID_VALUE', `value must be a number, got ${typeof value}`)
    // value - value is NaN exactly for NaN and ±Infinity
    if (value - value !== 0) throw usageRangeError('INVALID_VALUE', `value must be finite, got ${value}`)
    if (!this.decimals && !Number.isInteger(value))
      throw usageRangeError(
        'INVALID_VALUE',
        `value must be an integer: the ${this.strategy?.name ?? String(this.options.strategy)} strategy of namespace "${this.name}" cannot hold decimals, got ${value}`,
      )
  }

  increment(key: string, windowSize: number, value: number): number | Promise<number> {
    this.check(key, value)
    const table = this.table(windowSize)
    const nowMs = this.clock()
    if (this.mode !== 'synchronous') return table.add(key, value, nowMs)
    table.add(key, value, nowMs)
    return this.pushKey(key, [table], nowMs).then((rows) => this.rowsRate(table, key, rows, nowMs))
  }

  slidingWindow(key: string, windowSize: number, curDiff?: number): number | Promise<number> {
    if (typeof key !== 'string') throw usageTypeError('INVALID_KEY', `key must be a string, got ${typeof key}`)
    if (curDiff !== undefined && (typeof curDiff !== 'number' || curDiff - curDiff !== 0))
      throw usageRangeError('INVALID_VALUE', `curDiff must be a finite number, got ${String(curDiff)}`)
    const table = this.table(windowSize)
    const nowMs = this.clock()
    if (this.mode !== 'synchronous') return table.rate(key, nowMs, curDiff)
    return this.pushKey(key, [table], nowMs).then((rows) =>
      curDiff === undefined ? this.rowsRate(table, key, rows, nowMs) : table.rate(key, nowMs, curDiff),
    )
  }

  /**
   * The rate of `key` as the store answered one push: concurrent hits of this process that were
   * sent later are not in it, so the store's order decides between concurrent hits. The previous
   * window is the store's answer, or when the push did not read it (read less than
   * PREVIOUS_REFRESH_MS ago) the value held since. Without rows (the store failed, onStoreError
   * "local") it is the local estimate.
   */
  rowsRate(table: WindowTable, key: string, rows: readonly CounterRow[] | undefined, nowMs: number): number {
    if (rows === undefined) return table.rate(key, nowMs)
    const size = table.sizeSec
    const start = windowStartSec(nowMs, size)
    let current: number | undefined
    let previous: number | undefined
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i] as CounterRow
      if (row.key !== key || row.windowSize !== size) continue
      if (row.windowStart === start) current = row.count
      else if (row.windowStart === start - size) previous = row.count
    }
    if (current === undefined) return table.rate(key, nowMs)
    if (previous === undefined) previous = table.counts(key, nowMs).previous
    return current + previous * previousWeight(nowMs, table.sizeMs)
  }

  /**
   * One round trip for one key (synchronous mode): writes its unsynced windows in `tables`,
   * reads back the rest, and resolves with the store's rows. On failure the hits stay local and
   * unsynced (a retry is scheduled) and it resolves with undefined; with `onStoreError`
   * "allow"/"deny" the StoreError is rethrown for the caller to decide.
   */
  pushKey(key: string, tables: readonly WindowTable[], nowMs: number): Promise<CounterRow[] | undefined> {
    const windows: WindowPush[] = []
    const refresh: WindowRef[] = []
    for (let i = 0; i < tables.length; i++) {
      const table = tables[i] as WindowTable
      table.collectKey(key, nowMs, windows, refresh, this.previousRead(table, key, nowMs))
    }
    const strategy = this.strategy
    if (strategy === undefined)
      return this.loadStrategy().then(
        (loaded) => this.pushKeyTo(loaded, windows, refresh, nowMs),
        (err: unknown) => this.pushKeyFailed(err, windows),
      )
    return this.pushKeyTo(strategy, windows, refresh, nowMs)
  }

  // The store call of pushKey, without an async function's extra promise and ticks: this is
  // the whole client-side cost of a synchronous hit besides the strategy's own.
  private pushKeyTo(strategy: Strategy, windows: WindowPush[], refresh: WindowRef[], nowMs: number): Promise<CounterRow[] | undefined> {
    let sent: Promise<CounterRow[]>
    try {
      sent = strategy.pushDiffs({ namespace: this.name, nodeId: this.nodeId, seq: ++this.seq, nowMs, windows, refresh })
    } catch (err) {
      return this.pushKeyFailed(err, windows)
    }
    // withTimeout() and a then() in one promise: a hit's reply is one reaction here, not two
    return new Promise<CounterRow[] | undefined>((resolve) => {
      let timedOut = false
      const bound = deadline(this.options.storeTimeoutMs, strategy.name, 'pushDiffs', (err) => {
        timedOut = true
        resolve(this.pushKeyFailed(err, windows))
      })
      sent.then(
        (rows) => {
          bound.settle()
          if (timedOut) return
          try {
            this.applyRows(rows, nowMs, true)
            this.notePreviousReads(rows, nowMs)
          } catch (err) {
            resolve(this.pushKeyFailed(err, windows))
            return
          }
          resolve(rows)
        },
        (err: unknown) => {
          bound.settle()
          if (!timedOut) resolve(this.pushKeyFailed(err, windows))
        },
      )
    })
  }

  // Whether `key`'s previous window in `table` was read from the store in the current period.
  private previousRead(table: WindowTable, key: string, nowMs: number): boolean {
    const reads = this.previousReadsOf(table, nowMs)
    return reads !== undefined && reads.keys.has(key)
  }

  // The reads of `table` in the current period; a new period (or window) starts empty.
  private previousReadsOf(table: WindowTable, nowMs: number): PreviousReads | undefined {
    const all = this.previousReads
    for (let i = 0; i < all.length; i++) {
      const reads = all[i] as PreviousReads
      if (reads.table !== table) continue
      // a period boundary is a window boundary too when periodMs divides the size; the window
      // start is checked as well, so that reads never outlive the window they were made in
      const period = Math.floor(nowMs / reads.periodMs)
      const start = windowStartSec(nowMs, table.sizeSec)
      if (period !== reads.period || start !== reads.start) {
        reads.period = period
        reads.start = start
        reads.keys.clear()
      }
      return reads
    }
    return undefined
  }

  // Records the previous windows a synchronous push read back.
  private notePreviousReads(rows: readonly CounterRow[], nowMs: number): void {
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i] as CounterRow
      const table = this.tableOf(row.windowSize)
      if (table === undefined || row.windowStart !== windowStartSec(nowMs, table.sizeSec) - table.sizeSec) continue
      this.previousReadsOf(table, nowMs)?.keys.add(row.key)
    }
  }

  private tableOf(size: number): WindowTable | undefined {
    const tables = this.tables
    for (let i = 0; i < tables.length; i++) if ((tables[i] as WindowTable).sizeSec === size) return tables[i]
    return undefined
  }

  // A failed synchronous push: the hits stay local and unsynced (retried later); resolves with
  // undefined (onStoreError "local") or rejects with the StoreError for the caller to decide.
  private pushKeyFailed(err: unknown, windows: readonly WindowPush[]): Promise<undefined> {
    const error = this.report(err)
    if (windows.length > 0) this.scheduleRetry()
    return this.onStoreError !== 'local' ? Promise.reject(error) : Promise.resolve(undefined)
  }

  /** Runs one sync cycle now; never two at once (a call during one runs once it ends). */
  sync(): Promise<void> {
    return this.schedule(0)
  }

  /** Queues a cycle behind a running one (never two at once); calls meanwhile share one run. */
  private schedule(settleMs: number): Promise<void> {
    if (this.mode === 'local') return Promise.resolve()
    if (this.queued !== undefined) return this.queued
    if (this.running !== undefined) {
      const queued = this.running
        .catch(() => undefined)
        .then(() => {
          this.queued = undefined
          return this.runCycle(true, settleMs)
        })
      this.queued = queued
      return queued
    }
    return this.runCycle(true, settleMs)
  }

  /**
   * Loads every stored counter of the namespace (current and previous windows at `nowSec`):
   * the warm-up of a new process. One fetch at a time; `timeoutSec` bounds it.
   */
  fetch(nowSec?: number, timeoutSec?: number): Promise<void> {
    if (this.mode === 'local') return Promise.resolve()
    if (nowSec !== undefined && (typeof nowSec !== 'number' || !Number.isFinite(nowSec)))
      throw usageRangeError('INVALID_VALUE', `fetch time must be finite epoch seconds, got ${String(nowSec)}`)
    if (timeoutSec !== undefined && (typeof timeoutSec !== 'number' || !(timeoutSec > 0)))
      throw usageRangeError('INVALID_VALUE', `fetch timeout must be a positive number of seconds, got ${String(timeoutSec)}`)
    if (this.fetching !== undefined) return this.fetching
    const nowMs = nowSec === undefined ? this.clock() : nowSec * 1000
    const timeoutMs = timeoutSec === undefined ? this.options.storeTimeoutMs : timeoutSec * 1000
    this.fetching = this.fetchAll(nowMs, timeoutMs).finally(() => {
      this.fetching = undefined
    })
    return this.fetching
  }

  /** Resets `key` in every window size, here and (when synced) in the store. */
  async resetKey(key: string): Promise<void> {
    if (typeof key !== 'string') throw usageTypeError('INVALID_KEY', `key must be a string, got ${typeof key}`)
    if (this.mode === 'local') {
      for (const table of this.tables) table.forget(key)
      return
    }
    const strategy = this.strategy ?? (await this.loadStrategy())
    const timeoutMs = this.options.storeTimeoutMs
    try {
      // Push first so the store's reset covers this process's hits too, then read back the
      // reset totals so the local view agrees with the store.
      await this.pushKeyStrict(strategy, key, this.clock())
      await withTimeout(strategy.resetKey(this.name, key, this.windowSizes, this.clock()), timeoutMs, strategy.name, 'resetKey')
      await this.pushKeyStrict(strategy, key, this.clock())
    } catch (err) {
      throw this.report(err)
    }
  }

  stats(): NamespaceStats {
    return {
      namespace: this.name,
      mode: this.mode,
      syncs: this.syncs,
      storeErrors: this.storeErrors,
      lastSyncAtMs: this.lastSyncAtMs,
      pendingWindows: this.pendingWindows,
      pendingHits: this.pendingHits,
      dict: this.dict.stats(),
    }
  }

  /** Stops the timers, flushes unsynced hits and closes a strategy it created itself. */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    clearTimeout(this.timer)
    clearTimeout(this.retryTimer)
    this.timer = undefined
    this.retryTimer = undefined
    if (this.mode === 'local') return
    await this.queued?.catch(() => undefined)
    await this.running?.catch(() => undefined)
    let flushError: unknown
    try {
      await this.runCycle(false)
    } catch (err) {
      flushError = err
    }
    if (this.ownsStrategy && this.strategy !== undefined) await this.strategy.close()
    if (flushError !== undefined) throw flushError
  }

  private async pushKeyStrict(strategy: Strategy, key: string, nowMs: number): Promise<void> {
    const windows: WindowPush[] = []
    const refresh: WindowRef[] = []
    for (const table of this.tables) table.collectKey(key, nowMs, windows, refresh)
    const rows = await withTimeout(
      strategy.pushDiffs({ namespace: this.name, nodeId: this.nodeId, seq: ++this.seq, nowMs, windows, refresh }),
      this.options.storeTimeoutMs,
      strategy.name,
      'pushDiffs',
    )
    this.applyRows(rows, nowMs, true)
  }

  private runCycle(withRefresh: boolean, settleMs = 0): Promise<void> {
    const run = this.cycle(withRefresh, settleMs).finally(() => {
      this.running = undefined
      this.arm()
    })
    this.running = run
    return run
  }

  /**
   * One sync: writes every window with unsynced hits and reads back every held key-window.
   * With `settleMs` (timer-driven syncs) the reads wait that long after the writes, as Kong's
   * `sleep(sync_rate / 20)` does: the fleet syncs at the same instants, and reading in the same
   * call as the write would give the first process to write the others' previous round.
   */
  private async cycle(withRefresh: boolean, settleMs: number): Promise<void> {
    const started = Date.now()
    const nowMs = this.clock()
    const windows: WindowPush[] = []
    const refresh: WindowRef[] = []
    for (const table of this.tables) table.collect(nowMs, windows, withRefresh ? refresh : undefined)
    this.pendingWindows = windows.length
    let hits = 0
    for (const w of windows) hits += w.diff
    this.pendingHits = hits
    if (windows.length === 0 && refresh.length === 0) return
    let error: StoreError | undefined
    try {
      const strategy = this.strategy ?? (await this.loadStrategy())
      if (settleMs > 0 && withRefresh) {
        if (windows.length > 0) await this.send(strategy, windows, [], nowMs)
        await new Promise<void>((resolve) => setTimeout(resolve, settleMs).unref())
        const reads: WindowRef[] = windows.map((w) => ({ key: w.key, windowStart: w.windowStart, windowSize: w.windowSize }))
        for (const r of refresh) reads.push(r)
        await this.send(strategy, [], reads, this.clock())
      } else {
        await this.send(strategy, windows, refresh, nowMs)
      }
      this.syncs++
      this.lastSyncAtMs = nowMs
    } catch (err) {
      error = this.report(err)
      throw error
    } finally {
      if (syncChannel.hasSubscribers) {
        syncChannel.publish({
          namespace: this.name,
          durationMs: Date.now() - started,
          windows: windows.length,
          refreshed: refresh.length,
          error,
        })
      }
    }
  }

  /** Sends writes and reads in batches of `batchSize` key-windows, applying each answer. */
  private async send(strategy: Strategy, windows: readonly WindowPush[], refresh: readonly WindowRef[], nowMs: number): Promise<void> {
    const batchSize = this.options.batchSize
    let w = 0
    let r = 0
    while (w < windows.length || r < refresh.length) {
      const writes = windows.slice(w, w + batchSize)
      w += writes.length
      const reads = refresh.slice(r, r + batchSize - writes.length)
      r += reads.length
      const batch = { namespace: this.name, nodeId: this.nodeId, seq: ++this.seq, nowMs, windows: writes, refresh: reads }
      const rows = await withTimeout(strategy.pushDiffs(batch), this.options.storeTimeoutMs, strategy.name, 'pushDiffs')
      this.applyRows(rows, this.clock(), false)
    }
  }

  private async fetchAll(nowMs: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs
    try {
      const strategy = this.strategy ?? (await this.loadStrategy())
      const rows = strategy.getCounters(this.name, this.windowSizes, Math.floor(nowMs / 1000), this.nodeId)
      const iterator = rows[Symbol.asyncIterator]()
      try {
        for (;;) {
          const left = deadline - Date.now()
          if (left <= 0) throw new StoreError('STORE_TIMEOUT', strategy.name, `fetch timed out after ${timeoutMs} ms`)
          const next = await withTimeout(iterator.next(), left, strategy.name, `fetch (timeout ${timeoutMs} ms)`)
          if (next.done === true) break
          this.applyRow(next.value, nowMs, true)
        }
      } finally {
        // stop a half-read iteration (a timeout) without waiting on a dead store
        void Promise.resolve(iterator.return?.()).catch(() => undefined)
      }
    } catch (err) {
      throw this.report(err)
    }
  }

  private applyRows(rows: readonly CounterRow[], nowMs: number, create: boolean): void {
    for (const row of rows) this.applyRow(row, nowMs, create)
  }

  private applyRow(row: CounterRow, nowMs: number, create: boolean): void {
    for (const table of this.tables) {
      if (table.sizeSec === row.windowSize) {
        table.apply(row, nowMs, create)
        return
      }
    }
  }

  private loadStrategy(): Promise<Strategy> {
    if (this.strategyLoading === undefined) {
      const spec = this.options.strategy
      this.strategyLoading = (async () => {
        if (typeof spec !== 'string') throw new Error(`namespace "${this.name}" has no strategy`)
        const strategy = await this.resolveStrategy.create(spec, this.options.strategyOpts)
        this.strategy = strategy
        return strategy
      })()
      // a failed load is retried on the next call
      this.strategyLoading.catch(() => {
        this.strategyLoading = undefined
      })
    }
    return this.strategyLoading
  }

  private report(err: unknown): StoreError {
    const name = this.strategy?.name ?? (typeof this.options.strategy === 'string' ? this.options.strategy : 'strategy')
    const error = toStoreError(name, err)
    this.storeErrors++
    if (storeErrorChannel.hasSubscribers) storeErrorChannel.publish({ namespace: this.name, error })
    this.options.onError?.(error)
    return error
  }

  private arm(): void {
    if (this.closed || this.mode !== 'periodic' || !this.options.autoSync || this.timer !== undefined) return
    const rateMs = this.syncRate * 1000
    // aligned to wall-clock multiples of the rate, so a fleet syncs at about the same instants
    const delay = rateMs - (Date.now() % rateMs)
    this.timer = setTimeout(() => {
      this.timer = undefined
      // reported through onError and the channel
      this.schedule(Math.max(1, rateMs / 20)).catch(() => undefined)
    }, delay)
    this.timer.unref()
  }

  private scheduleRetry(): void {
    if (this.closed || this.retryTimer !== undefined || this.mode !== 'synchronous') return
    this.retryTimer = setTimeout(() => {
      this.retryTimer = undefined
      this.runCycle(false).catch(() => this.scheduleRetry())
    }, RETRY_DELAY_MS)
    this.retryTimer.unref()
  }
}
