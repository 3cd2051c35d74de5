import { channel } from 'node:diagnostics_channel'
import type { Clock } from './clock.js'
import type { WindowTable } from './counter-table.js'
import type { StoreError } from './errors.js'
import type { ResolvedNamespaceOptions } from './options.js'
import type { EscrowLink } from './escrow-link.js'
import type { StoreLink } from './store-link.js'
import { ioTimers } from './io-timers.js'
import type { WindowPush, WindowRef } from './strategy.js'
import { windowStartMs } from './window.js'

/** Published after every periodic sync: `{ namespace, durationMs, windows, refreshed, error? }`. */
export const syncChannel = channel('ratelimiting:sync')

// After a failed synchronous hit, unsynced hits are retried on this delay.
const RETRY_DELAY_MS = 1000
// Every periodic sync may refresh this many idle keys per window size (besides those hit since
// the last sync), however few keys are in use: below that, a refresh is one batch anyway.
const MIN_IDLE_REFRESH = 256

/**
 * When a synced namespace talks to its store in the background: the periodic timer (aligned to
 * wall-clock multiples of `syncRate`), `sync()` on demand (never two cycles at once), the retry
 * of a synchronous hit whose write failed, and the final flush. docs/ARCHITECTURE.md, "One sync".
 */
export class SyncLoop {
  /** Completed sync cycles (periodic mode, plus flushes). */
  syncs = 0
  /** Epoch ms of the last sync that reached the store, 0 if none yet. */
  lastSyncAtMs = 0
  /** Key-windows with unsynced hits at the last sync. */
  pendingWindows = 0
  /** Unsynced hits at the last sync. */
  pendingHits = 0
  private readonly link: StoreLink
  private readonly tables: readonly WindowTable[]
  private readonly options: ResolvedNamespaceOptions
  private readonly clock: Clock
  private timer: NodeJS.Timeout | undefined
  private retryTimer: NodeJS.Timeout | undefined
  private running: Promise<void> | undefined
  private queued: Promise<void> | undefined
  private queuedAll = false
  private closed = false

  constructor(link: StoreLink, tables: readonly WindowTable[], options: ResolvedNamespaceOptions, clock: Clock) {
    this.link = link
    this.tables = tables
    this.options = options
    this.clock = clock
    link.onWriteFailed = () => this.scheduleRetry()
    // escrow: the store lost its reservations; every process writes its hits again within the learning period
    if (link.escrow !== undefined) link.escrow.onEpochLost = () => void this.sync(false).catch(() => undefined)
    this.arm()
  }

  /**
   * Runs one cycle now; never two at once (a call during one runs once it ends, and calls
   * meanwhile share that run). With `all` it refreshes every held key; without, only what a
   * timer-driven sync refreshes.
   */
  sync(all: boolean, settleMs = 0): Promise<void> {
    if (this.queued !== undefined) {
      // a full sync asked for while a timer-driven one waits: the one that runs is full
      if (all) this.queuedAll = true
      return this.queued
    }
    if (this.running !== undefined) {
      this.queuedAll = all
      const queued = this.running
        .catch(() => undefined)
        .then(() => {
          this.queued = undefined
          return this.runCycle(true, this.queuedAll, settleMs)
        })
      this.queued = queued
      return queued
    }
    return this.runCycle(true, all, settleMs)
  }

  /** Stops the timers, waits for a running cycle, and pushes every unsynced hit. */
  async flush(): Promise<void> {
    this.closed = true
    ioTimers.clearTimeout(this.timer)
    ioTimers.clearTimeout(this.retryTimer)
    this.timer = undefined
    this.retryTimer = undefined
    await this.queued?.catch(() => undefined)
    await this.running?.catch(() => undefined)
    await this.runCycle(false, true)
  }

  private runCycle(withRefresh: boolean, all: boolean, settleMs = 0): Promise<void> {
    const run = this.cycle(withRefresh, all, settleMs).finally(() => {
      this.running = undefined
      this.arm()
    })
    this.running = run
    return run
  }

  /**
   * One sync: writes every window with unsynced hits and reads back the key-windows due (with
   * `all`, every held one; see WindowTable.collect). With `settleMs` (timer-driven syncs) the
   * reads wait that long after the writes, as Kong's `sleep(sync_rate / 20)` does: the fleet syncs
   * at the same instants, and reading in the same call as the write would give the first process
   * to write the others' previous round. A failed cycle queues its writes for the next one.
   */
  private async cycle(withRefresh: boolean, all: boolean, settleMs: number): Promise<void> {
    const started = Date.now()
    const nowMs = this.clock()
    const windows: WindowPush[] = []
    const refresh: WindowRef[] = []
    // a full sync visits every held key: no budget of idle ones to work out
    const escrow = this.options.escrow
    for (const table of this.tables)
      table.collect(nowMs, windows, withRefresh && !escrow ? refresh : undefined, all || escrow ? 0 : this.idleBudget(table), all)
    const first = this.tables[0]
    // keys decided as blocked since the last sync: their block is read back (a lift elsewhere)
    if (withRefresh && first !== undefined) this.link.blocks?.takeTouched(windowStartMs(nowMs, first.sizeMs), first.sizeMs, refresh)
    this.pendingWindows = windows.length
    let hits = 0
    for (const w of windows) if (w.diff > 0) hits += w.diff
    this.pendingHits = hits
    if (escrow) return this.escrowCycle(windows, nowMs, started)
    const blocks = this.link.hasPendingBlocks
    if (windows.length === 0 && refresh.length === 0 && !blocks) return
    let error: StoreError | undefined
    try {
      if (settleMs > 0 && withRefresh) {
        if (windows.length > 0 || blocks) await this.link.send(windows, [], nowMs, true)
        // not unref'd: whoever awaits this cycle (a sync() queued behind it, close()) must not
        // see the process exit under it; it lasts syncRate / 20
        await new Promise<void>((resolve) => ioTimers.setTimeout(resolve, settleMs))
        const reads: WindowRef[] = windows.map((w) => ({ key: w.key, windowStartMs: w.windowStartMs, windowSizeMs: w.windowSizeMs }))
        for (const r of refresh) reads.push(r)
        await this.link.send([], reads, this.clock())
      } else {
        await this.link.send(windows, refresh, nowMs, true)
      }
      this.syncs++
      this.lastSyncAtMs = nowMs
    } catch (err) {
      // the writes may not have landed: the next cycle visits their keys again
      for (const w of windows) this.link.tableOf(w.windowSizeMs)?.requeue(w.key)
      error = this.link.report(err)
      throw error
    } finally {
      if (syncChannel.hasSubscribers) {
        syncChannel.publish({
          namespace: this.link.namespace,
          durationMs: Date.now() - started,
          windows: windows.length,
          refreshed: refresh.length,
          error,
        })
      }
    }
  }

  // An escrow sync: its writes (or, with none, an empty call while keys are held: the lease and
  // the store's epoch) in one call per batch; nothing is read back. A process holding no key
  // still calls every half learning period, so the store counts it among the processes (the
  // `share` policy divides the limit by them) before its first grant.
  private async escrowCycle(windows: readonly WindowPush[], nowMs: number, started: number): Promise<void> {
    const link = this.link.escrow as EscrowLink
    if (windows.length === 0 && this.tables.every((t) => t.size === 0) && nowMs - this.lastSyncAtMs < link.learnMs / 2) return
    let error: StoreError | undefined
    try {
      await link.sendEscrow(windows, nowMs)
      this.syncs++
      this.lastSyncAtMs = nowMs
    } catch (err) {
      for (const w of windows) link.tableOf(w.windowSizeMs)?.requeueEscrow(w.key)
      error = this.link.report(err)
      throw error
    } finally {
      if (syncChannel.hasSubscribers)
        syncChannel.publish({
          namespace: this.link.namespace,
          durationMs: Date.now() - started,
          windows: windows.length,
          refreshed: 0,
          error,
        })
    }
  }

  // Idle keys one timer-driven sync refreshes in `table`: enough for every held key to be
  // refreshed once per idleRefreshMs, but no more than the keys queued for this sync (at least
  // MIN_IDLE_REFRESH), so that a sync costs in proportion to the keys in use, not to those held.
  private idleBudget(table: WindowTable): number {
    const syncs = this.options.idleRefreshMs / (this.options.syncRate * 1000)
    const due = Math.ceil(table.size / Math.max(1, syncs))
    return Math.max(MIN_IDLE_REFRESH, Math.min(due, table.queued))
  }

  private arm(): void {
    const { mode, autoSync, syncRate } = this.options
    if (this.closed || mode !== 'periodic' || !autoSync || this.timer !== undefined) return
    const rateMs = syncRate * 1000
    // aligned to wall-clock multiples of the rate, so a fleet syncs at about the same instants
    const delay = rateMs - (Date.now() % rateMs)
    this.timer = ioTimers.setTimeout(() => {
      this.timer = undefined
      // reported through onError and the channel
      this.sync(false, Math.max(1, rateMs / 20)).catch(() => undefined)
    }, delay)
    this.timer.unref()
  }

  private scheduleRetry(): void {
    if (this.closed || this.retryTimer !== undefined || this.options.mode !== 'synchronous') return
    this.retryTimer = ioTimers.setTimeout(() => {
      this.retryTimer = undefined
      this.runCycle(false, true).catch(() => this.scheduleRetry())
    }, RETRY_DELAY_MS)
    this.retryTimer.unref()
  }
}
