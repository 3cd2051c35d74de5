import { randomBytes } from 'node:crypto'
import { Blocks } from './blocks.js'
import { type Clock, cachedClock, wallClock } from './clock.js'
import type { CounterDict, DictStats } from './counter-dict.js'
import { WindowTable } from './counter-table.js'
import { ConfigError, usageRangeError, usageTypeError } from './errors.js'
import type { OnStoreError, ResolvedNamespaceOptions, SyncMode } from './options.js'
import { rowsRate } from './previous-reads.js'
import { ResetFloors } from './refund.js'
import type { EscrowLink } from './escrow-link.js'
import { EscrowTable } from './escrow-table.js'
import { StoreLink, type StrategyResolver } from './store-link.js'
import type { CounterRow } from './strategy.js'
import { SyncLoop } from './sync-loop.js'

// MAX_HIT_VALUE (window.ts), as a constant of this module: V8 folds a module's own constants on
// the hot path, not imported ones (bench/engine.bench.ts).
const MAX_HIT = 2 ** 53 - 1

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

/**
 * One namespace: its window tables, its sync mode, and (when it syncs) its {@link StoreLink} and
 * {@link SyncLoop}. Users reach it through `RateLimiting`; the decisions in `limiter.ts` use its
 * tables directly.
 */
export class Namespace {
  readonly name: string
  readonly mode: SyncMode
  readonly syncRate: number
  /** Window sizes in seconds, as the API names them. */
  readonly windowSizes: readonly number[]
  readonly tables: readonly WindowTable[]
  readonly clock: Clock
  readonly nodeId: string
  readonly onStoreError: OnStoreError
  readonly dict: CounterDict
  /** Whether hits are admitted against budgets granted by the store (docs/ARCHITECTURE.md, "Escrow"). */
  readonly escrow: boolean
  /** Whether the namespace's store holds decimal counts; decimal values are refused when not. */
  readonly decimals: boolean
  /** The namespace's blocks, once blocking is on (undefined: no hit pays for blocking). */
  blocks: Blocks | undefined
  private readonly options: ResolvedNamespaceOptions
  private readonly link: StoreLink | undefined
  private readonly loop: SyncLoop | undefined
  private readonly strategyKeepsBlocks: boolean
  /** What synced resets covered, which refunds leave counted (made by the first reset). */
  resetFloors: ResetFloors | undefined
  private closed = false
  // made on the first watchClose(): pending acquires (acquire.ts) reject when the namespace closes
  private closeWatchers: Set<() => void> | undefined

  constructor(options: ResolvedNamespaceOptions, dict: CounterDict, resolveStrategy: StrategyResolver) {
    this.options = options
    this.name = options.namespace
    this.mode = options.mode
    this.syncRate = options.syncRate
    this.windowSizes = options.windowSizes
    // A synchronous decision waits on a store round trip anyway: Date.now() costs nothing next to
    // it, while the cached clock's expiry timer wakes an event loop that mostly waits on the store
    // (docs/BENCHMARKS-redis.md, "The default clock").
    this.clock = options.clock ?? (options.mode === 'synchronous' ? wallClock : cachedClock)
    this.nodeId = options.nodeId ?? newNodeId()
    this.onStoreError = options.onStoreError
    this.dict = dict
    const synced = options.mode !== 'local'
    const periodic = options.mode === 'periodic'
    // an escrow table queues no hit: its syncs write what returns budget, nothing is read back
    this.escrow = options.escrow
    this.tables = options.windowSizesMs.map((ms) =>
      options.escrow
        ? new EscrowTable(dict, options.namespace, ms, synced)
        : new WindowTable(dict, options.namespace, ms, synced, periodic),
    )
    const strategy = options.strategy
    this.decimals =
      !synced || (typeof strategy === 'object' ? strategy.supportsDecimals : resolveStrategy.supportsDecimals(strategy as string))
    this.strategyKeepsBlocks =
      !synced || (typeof strategy === 'object' ? strategy.supportsBlocks === true : resolveStrategy.supportsBlocks(strategy as string))
    if (synced) {
      this.link = new StoreLink(options, this.nodeId, this.tables, resolveStrategy)
      this.loop = new SyncLoop(this.link, this.tables, options, this.clock)
    }
    if (options.blocking) this.enableBlocking('blocking: true')
  }

  /**
   * Turns blocking on (a limiter with `blockMs`, `block()`, `unblock()`, option `blocking`): from
   * now on every decision of the namespace looks its key up in {@link blocks}. A synced namespace
   * whose store does not keep blocks refuses (a block would hold in one process only).
   */
  enableBlocking(why: string): Blocks {
    if (this.blocks !== undefined) return this.blocks
    if (!this.strategyKeepsBlocks)
      throw new ConfigError(
        'INVALID_OPTION',
        `${why}: the ${this.link?.strategyName ?? 'given'} strategy of namespace "${this.name}" does not keep blocks (its supportsBlocks is not true), so a block would hold in one process only`,
      )
    const blocks = new Blocks(this.mode !== 'local', this.dict.maxKeys)
    this.blocks = blocks
    if (this.link !== undefined) this.link.blocks = blocks
    return blocks
  }

  /** The table of a window size in seconds, compared in whole ms; undefined when not listed. */
  findTable(windowSize: number): WindowTable | undefined {
    const ms = Math.round(windowSize * 1000)
    for (const t of this.tables) if (t.sizeMs === ms && Math.abs(windowSize * 1000 - ms) <= 1e-6 * ms) return t
    return undefined
  }

  /** The table of one window size (seconds); a size the namespace does not list is a RangeError. */
  table(windowSize: number): WindowTable {
    const tables = this.tables
    for (let i = 0; i < tables.length; i++) {
      const t = tables[i] as WindowTable
      if (t.sizeSec === windowSize) return t
    }
    return this.tableSlow(windowSize)
  }

  /** Checks a hit's key and value, and that the namespace is open; cheap enough for every hit. */
  check(key: unknown, value: unknown): void {
    if (this.closed) throw this.closedError()
    if (typeof key !== 'string') throw usageTypeError('INVALID_KEY', `key must be a string, got ${typeof key}`)
    if (typeof value !== 'number')
      throw usageTypeError('INVALID_VALUE', `value must be a number, got ${typeof value} ${JSON.stringify(value)}`)
    // one test on the hot path: false for NaN, ±Infinity and anything beyond ±(2^53 - 1)
    if (!(value <= MAX_HIT && value >= -MAX_HIT))
      throw usageRangeError(
        'INVALID_VALUE',
        value - value !== 0 ? `value must be finite, got ${value}` : `value must be between -(2^53 - 1) and 2^53 - 1, got ${value}`,
      )
    if (!this.decimals && !Number.isInteger(value))
      throw usageRangeError(
        'INVALID_VALUE',
        `value must be an integer: the ${this.link?.strategyName ?? 'local'} strategy of namespace "${this.name}" cannot hold decimals, got ${value}`,
      )
  }

  increment(key: string, windowSize: number, value: number): number | Promise<number> {
    this.check(key, value)
    const table = this.table(windowSize)
    const nowMs = this.clock()
    if (this.mode !== 'synchronous') return table.add(key, value, nowMs)
    table.add(key, value, nowMs)
    return this.pushKey(key, [table], nowMs, value !== 0).then((rows) => rowsRate(table, key, rows, nowMs))
  }

  slidingWindow(key: string, windowSize: number, curDiff?: number): number | Promise<number> {
    if (this.closed) throw this.closedError()
    if (typeof key !== 'string') throw usageTypeError('INVALID_KEY', `key must be a string, got ${typeof key}`)
    if (curDiff !== undefined && (typeof curDiff !== 'number' || curDiff - curDiff !== 0))
      throw usageRangeError('INVALID_VALUE', `curDiff must be a finite number, got ${String(curDiff)}`)
    const table = this.table(windowSize)
    const nowMs = this.clock()
    if (this.mode !== 'synchronous') return table.rate(key, nowMs, curDiff)
    return this.pushKey(key, [table], nowMs).then((rows) =>
      curDiff === undefined ? rowsRate(table, key, rows, nowMs) : table.rate(key, nowMs, curDiff),
    )
  }

  /** Escrow: the store link's escrow half (grants, the lease, the processes seen). */
  get escrowLink(): EscrowLink {
    return (this.link as StoreLink).escrow as EscrowLink
  }

  /** One round trip for one key (synchronous mode); see {@link StoreLink.pushKey}. */
  pushKey(key: string, tables: readonly WindowTable[], nowMs: number, write = false): Promise<CounterRow[] | undefined> {
    return (this.link as StoreLink).pushKey(key, tables, nowMs, write)
  }

  /**
   * Runs one sync cycle now; never two at once (a call during one runs once it ends). With `all`
   * (the default, and what `rl.sync()` does) it refreshes every held key; without, only what a
   * timer-driven sync refreshes (keys hit since the last sync, near their limit, and a slice of
   * the idle ones).
   */
  sync(all = true): Promise<void> {
    if (this.closed) return Promise.reject(this.closedError())
    return this.loop?.sync(all) ?? Promise.resolve()
  }

  /**
   * Loads every stored counter of the namespace (current and previous windows at `nowSec`):
   * the warm-up of a new process. One fetch at a time; `timeoutSec` bounds it.
   */
  fetch(nowSec?: number, timeoutSec?: number): Promise<void> {
    if (this.closed) throw this.closedError()
    if (this.link === undefined) return Promise.resolve()
    if (nowSec !== undefined && (typeof nowSec !== 'number' || !Number.isFinite(nowSec)))
      throw usageRangeError('INVALID_VALUE', `fetch time must be finite epoch seconds, got ${String(nowSec)}`)
    if (timeoutSec !== undefined && (typeof timeoutSec !== 'number' || !(timeoutSec > 0)))
      throw usageRangeError('INVALID_VALUE', `fetch timeout must be a positive number of seconds, got ${String(timeoutSec)}`)
    const nowMs = nowSec === undefined ? this.clock() : nowSec * 1000
    return this.link.fetch(nowMs, timeoutSec === undefined ? this.options.storeTimeoutMs : timeoutSec * 1000)
  }

  /** Resets `key` in every window size, here and (when synced) in the store. */
  async resetKey(key: string): Promise<void> {
    if (this.closed) throw this.closedError()
    if (typeof key !== 'string') throw usageTypeError('INVALID_KEY', `key must be a string, got ${typeof key}`)
    // a reset lifts the key's block too (fleet-wide with the reset's push)
    this.blocks?.lift(key)
    if (this.link === undefined) {
      for (const table of this.tables) table.forget(key)
      return
    }
    // what the reset covers stays counted: a refund cannot take it back (a failed reset keeps
    // the floors too, since the store may have taken it in)
    const floors = (this.resetFloors ??= new ResetFloors(this.dict.maxKeys))
    await this.link.resetKey(key, this.clock, () => floors.record(key, this.tables, this.clock()))
  }

  stats(): NamespaceStats {
    const loop = this.loop
    return {
      namespace: this.name,
      mode: this.mode,
      syncs: loop?.syncs ?? 0,
      storeErrors: this.link?.storeErrors ?? 0,
      lastSyncAtMs: loop?.lastSyncAtMs ?? 0,
      pendingWindows: loop?.pendingWindows ?? 0,
      pendingHits: loop?.pendingHits ?? 0,
      dict: this.dict.stats(),
    }
  }

  /** Calls `watcher` when the namespace closes, before the final flush (pending acquires reject then). */
  watchClose(watcher: () => void): void {
    ;(this.closeWatchers ??= new Set()).add(watcher)
  }

  /** Undoes {@link watchClose}. */
  unwatchClose(watcher: () => void): void {
    this.closeWatchers?.delete(watcher)
  }

  /** Stops the timers, flushes unsynced hits and closes a strategy it created itself. */
  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    if (this.closeWatchers !== undefined) for (const watcher of [...this.closeWatchers]) watcher()
    if (this.loop === undefined || this.link === undefined) return
    let flushError: unknown
    try {
      await this.loop.flush()
    } catch (err) {
      flushError = err
    }
    await this.link.close()
    if (flushError !== undefined) throw flushError
  }

  // A size given another way than at new() (0.30000000000000004 for 0.3): compared in whole ms.
  private tableSlow(windowSize: unknown): WindowTable {
    if (typeof windowSize !== 'number')
      throw usageTypeError(
        'UNKNOWN_WINDOW_SIZE',
        `window size must be a number of seconds, got ${typeof windowSize} ${JSON.stringify(windowSize)}`,
      )
    const table = this.findTable(windowSize)
    if (table !== undefined) return table
    throw usageRangeError(
      'UNKNOWN_WINDOW_SIZE',
      `window size ${String(windowSize)} is not one of namespace "${this.name}"'s windowSizes [${this.windowSizes.join(', ')}]`,
    )
  }

  /** The error of any use of a closed namespace. */
  private closedError(): RangeError {
    return usageRangeError(
      'NAMESPACE_CLOSED',
      `namespace "${this.name}" is closed (its instance's close() was called); define it again with new() and make a new limiter`,
    )
  }
}

/**
 * A random node id: 96 bits, 16 characters of base64url. The stores keep it in every key-window
 * this process writes (Redis: two hash fields per window; PostgreSQL: a column of the row and of
 * its primary key), so it is short: with a UUID's 36 characters a Redis key-window written by 8
 * processes took 856 bytes, with these 536 (bench/redis-memory.bench.ts). Two of n live
 * processes share one id with a chance of about n² / 2^97.
 */
export function newNodeId(): string {
  return randomBytes(12).toString('base64url')
}
