import { channel } from 'node:diagnostics_channel'
import type { Blocks } from './blocks.js'
import type { WindowTable } from './counter-table.js'
import { StoreError, toStoreError } from './errors.js'
import type { ResolvedNamespaceOptions } from './options.js'
import { PreviousReads } from './previous-reads.js'
import { EscrowLink } from './escrow-link.js'
import type { EscrowTable } from './escrow-table.js'
import type { BlockWrite, CounterRow, DiffBatch, Strategy, WindowPush, WindowRef } from './strategy.js'
import { deadline, withTimeout } from './timeout.js'

/** Published with every store failure: `{ namespace, error }`. */
export const storeErrorChannel = channel('ratelimiting:store-error')

/** Resolves a strategy name to an object; set by the package's entry point. */
export interface StrategyResolver {
  create(name: string, options: Record<string, unknown>): Strategy | Promise<Strategy>
  supportsDecimals(name: string): boolean
  supportsBlocks(name: string): boolean
}

/**
 * A synced namespace's link to its store: loads a strategy given by name, numbers every batch
 * (`seq`), bounds every call by `storeTimeoutMs`, applies the rows that come back to the tables,
 * and reports every failure (`onError`, the `ratelimiting:store-error` channel, a count).
 */
export class StoreLink {
  readonly namespace: string
  readonly nodeId: string
  /** Store calls that failed (syncs, synchronous hits, fetches, resets). */
  storeErrors = 0
  /** Called when a synchronous hit's write failed: the sync loop retries it. */
  onWriteFailed: () => void = () => undefined
  /** The namespace's blocks, once blocking is on: pushes carry their pending ops and read blocks back. */
  blocks: Blocks | undefined
  private readonly options: ResolvedNamespaceOptions
  private readonly tables: readonly WindowTable[]
  private readonly resolveStrategy: StrategyResolver
  private readonly previous: PreviousReads
  private strategy: Strategy | undefined
  private loading: Promise<Strategy> | undefined
  private fetching: Promise<void> | undefined
  private seq = 0
  /** The escrow half of the link, in an escrow namespace (escrow-link.ts). */
  readonly escrow: EscrowLink | undefined
  constructor(options: ResolvedNamespaceOptions, nodeId: string, tables: readonly WindowTable[], resolveStrategy: StrategyResolver) {
    this.options = options
    this.namespace = options.namespace
    this.nodeId = nodeId
    this.tables = tables
    this.resolveStrategy = resolveStrategy
    this.previous = new PreviousReads(tables)
    if (typeof options.strategy === 'object') this.strategy = options.strategy
    this.escrow = options.escrow ? new EscrowLink(this, tables as readonly EscrowTable[], options) : undefined
  }

  /** The seq of the next call: one sequence for every call of this node, pushes and grants alike (they write the same registers). */
  nextSeq(): number {
    return ++this.seq
  }

  /** The store's name for messages, before it is loaded too. */
  get strategyName(): string {
    return this.strategy?.name ?? (typeof this.options.strategy === 'string' ? this.options.strategy : 'strategy')
  }

  /** The strategy, made from its name on first use (a failed load is retried on the next call). */
  load(): Promise<Strategy> {
    if (this.strategy !== undefined) return Promise.resolve(this.strategy)
    if (this.loading === undefined) {
      const spec = this.options.strategy
      this.loading = (async () => {
        if (typeof spec !== 'string') throw new Error(`namespace "${this.namespace}" has no strategy`)
        const strategy = await this.resolveStrategy.create(spec, this.options.strategyOpts)
        this.strategy = strategy
        return strategy
      })()
      this.loading.catch(() => {
        this.loading = undefined
      })
    }
    return this.loading
  }

  /** Counts and publishes a store failure; returns it as a {@link StoreError}. */
  report(err: unknown): StoreError {
    const error = toStoreError(this.strategyName, err)
    this.storeErrors++
    if (storeErrorChannel.hasSubscribers) storeErrorChannel.publish({ namespace: this.namespace, error })
    this.options.onError?.(error)
    return error
  }

  /**
   * One round trip for one key (synchronous mode): writes its unsynced windows in `tables`,
   * reads back the rest (a previous window only when not read recently), and resolves with the
   * store's rows. On failure the hits stay local and unsynced (`onWriteFailed` retries them) and
   * it resolves with undefined; with `onStoreError` "allow"/"deny" the StoreError is rethrown for
   * the caller to decide. With `write` (a hit or an increment), the current windows are written
   * even when their count equals the acknowledged one: an earlier push of the key (a denied hit
   * taken back) may still be in flight, and only a write lets the store order this hit after it.
   */
  pushKey(key: string, tables: readonly WindowTable[], nowMs: number, write = false): Promise<CounterRow[] | undefined> {
    const windows: WindowPush[] = []
    const refresh: WindowRef[] = []
    for (let i = 0; i < tables.length; i++) {
      const table = tables[i] as WindowTable
      table.collectKey(key, nowMs, windows, refresh, this.previous.has(table, key, nowMs), write)
    }
    const blocks = this.blocks?.pendingFor(key)
    return this.exchange(windows, refresh, nowMs, blocks, (rows, err) => {
      if (rows === undefined) return this.pushKeyFailed(err, windows, blocks)
      try {
        this.applyRows(rows, nowMs, true, blocks)
        this.previous.note(rows, nowMs)
      } catch (applyError) {
        return this.pushKeyFailed(applyError, windows, blocks)
      }
      return rows
    })
  }

  /** Writes and reads back every window of `key` now; rejects with the failure, unreported. */
  private pushKeyNow(key: string, nowMs: number): Promise<void> {
    const windows: WindowPush[] = []
    const refresh: WindowRef[] = []
    for (const table of this.tables) table.collectKey(key, nowMs, windows, refresh)
    const blocks = this.blocks?.pendingFor(key)
    return this.exchange(windows, refresh, nowMs, blocks, (rows, err) => {
      if (rows === undefined) throw err
      this.applyRows(rows, nowMs, true, blocks)
    })
  }

  /**
   * Sends writes and reads in batches of `batchSize` key-windows, applying each answer. With
   * `withBlocks`, the first batch also carries every pending block op (and is sent for them alone).
   */
  async send(windows: readonly WindowPush[], refresh: readonly WindowRef[], nowMs: number, withBlocks = false): Promise<void> {
    const strategy = await this.load()
    const batchSize = this.options.batchSize
    let blocks = withBlocks ? this.blocks?.allPending() : undefined
    if (blocks?.length === 0) blocks = undefined
    let w = 0
    let r = 0
    while (w < windows.length || r < refresh.length || blocks !== undefined) {
      const writes = windows.slice(w, w + batchSize)
      w += writes.length
      const reads = refresh.slice(r, r + batchSize - writes.length)
      r += reads.length
      const batch = this.batch(writes, reads, nowMs, blocks)
      const rows = await withTimeout(strategy.pushDiffs(batch), this.options.storeTimeoutMs, strategy.name, 'pushDiffs')
      this.applyRows(rows, nowMs, false, blocks)
      blocks = undefined
    }
  }

  /** Whether block ops wait for the store. */
  get hasPendingBlocks(): boolean {
    return this.blocks !== undefined && this.blocks.pendingCount > 0
  }

  /**
   * Loads every stored counter of the namespace (current and previous windows at `nowMs`): the
   * warm-up of a new process. One fetch at a time, bounded by `timeoutMs` as a whole.
   */
  fetch(nowMs: number, timeoutMs: number): Promise<void> {
    if (this.fetching === undefined) {
      this.fetching = this.fetchAll(nowMs, timeoutMs).finally(() => {
        this.fetching = undefined
      })
    }
    return this.fetching
  }

  /** Resets `key` in the store, and reads the reset totals back. */
  async resetKey(key: string, nowMs: () => number, covering?: () => void): Promise<void> {
    try {
      const strategy = await this.load()
      // Push first so the store's reset covers this process's hits too, then read back the
      // reset totals so the local view agrees with the store. `covering` sees the counts the
      // push sends.
      covering?.()
      await this.pushKeyNow(key, nowMs())
      const reset = strategy.resetKey(this.namespace, key, this.options.windowSizesMs, nowMs())
      await withTimeout(reset, this.options.storeTimeoutMs, strategy.name, 'resetKey')
      await this.pushKeyNow(key, nowMs())
    } catch (err) {
      throw this.report(err)
    }
  }

  /** Closes the strategy when it was made here from a name (never a strategy object the user passed). */
  async close(): Promise<void> {
    if (typeof this.options.strategy === 'string' && this.strategy !== undefined) await this.strategy.close()
  }

  /** The table of a window size in ms. */
  tableOf(sizeMs: number): WindowTable | undefined {
    const tables = this.tables
    for (let i = 0; i < tables.length; i++) if ((tables[i] as WindowTable).sizeMs === sizeMs) return tables[i]
    return undefined
  }

  // The batch of one push: the blocks fields only once blocking is on (the batch keeps its shape otherwise).
  private batch(windows: WindowPush[], refresh: WindowRef[], nowMs: number, blocks: BlockWrite[] | undefined): DiffBatch {
    const seq = this.nextSeq()
    if (this.blocks === undefined) return { namespace: this.namespace, nodeId: this.nodeId, seq, nowMs, windows, refresh }
    const batch = { namespace: this.namespace, nodeId: this.nodeId, seq, nowMs, windows, refresh, readBlocks: true }
    return blocks === undefined ? batch : { ...batch, blocks }
  }

  private applyRows(rows: readonly CounterRow[], nowMs: number, create: boolean, sentBlocks?: readonly BlockWrite[]): void {
    for (const row of rows) this.tableOf(row.windowSizeMs)?.apply(row, nowMs, create)
    const blocks = this.blocks
    if (blocks !== undefined) {
      blocks.acked(sentBlocks)
      blocks.learn(rows, nowMs)
    }
  }

  /**
   * One batch of one key's windows, and `settle` called once with the rows or the failure (a
   * throw, a rejection, or the deadline). No async function and one promise reaction: this is
   * the whole client-side cost of a synchronous hit besides the strategy's own.
   */
  private exchange<T>(
    windows: WindowPush[],
    refresh: WindowRef[],
    nowMs: number,
    blocks: BlockWrite[] | undefined,
    settle: (rows: CounterRow[] | undefined, err: unknown) => T | Promise<T>,
  ): Promise<T> {
    const strategy = this.strategy
    if (strategy === undefined)
      return this.load().then(
        () => this.exchange(windows, refresh, nowMs, blocks, settle),
        (err: unknown) => settle(undefined, err),
      )
    return new Promise<T>((resolve, reject) => {
      let done = false
      const finish = (rows: CounterRow[] | undefined, err: unknown) => {
        if (done) return
        done = true
        try {
          resolve(settle(rows, err))
        } catch (thrown) {
          reject(thrown)
        }
      }
      let sent: Promise<CounterRow[]>
      try {
        sent = strategy.pushDiffs(this.batch(windows, refresh, nowMs, blocks))
      } catch (err) {
        finish(undefined, err)
        return
      }
      const bound = deadline(this.options.storeTimeoutMs, strategy.name, 'pushDiffs', (err) => finish(undefined, err))
      sent.then(
        (rows) => {
          bound.settle()
          finish(rows, undefined)
        },
        (err: unknown) => {
          bound.settle()
          finish(undefined, err)
        },
      )
    })
  }

  // A failed synchronous push: the hits stay local and unsynced (retried later); resolves with
  // undefined (onStoreError "local") or rejects with the StoreError for the caller to decide.
  private pushKeyFailed(err: unknown, windows: readonly WindowPush[], blocks: BlockWrite[] | undefined): Promise<undefined> {
    const error = this.report(err)
    if (windows.length > 0 || blocks !== undefined) this.onWriteFailed()
    return this.options.onStoreError !== 'local' ? Promise.reject(error) : Promise.resolve(undefined)
  }

  private async fetchAll(nowMs: number, timeoutMs: number): Promise<void> {
    const deadlineMs = Date.now() + timeoutMs
    try {
      const strategy = await this.load()
      const rows = strategy.getCounters(this.namespace, this.options.windowSizesMs, nowMs, this.nodeId)
      const iterator = rows[Symbol.asyncIterator]()
      try {
        for (;;) {
          const left = deadlineMs - Date.now()
          if (left <= 0) throw new StoreError('STORE_TIMEOUT', strategy.name, `fetch timed out after ${timeoutMs} ms`)
          const next = await withTimeout(iterator.next(), left, strategy.name, `fetch (timeout ${timeoutMs} ms)`)
          if (next.done === true) break
          this.tableOf(next.value.windowSizeMs)?.apply(next.value, nowMs, true)
        }
      } finally {
        // stop a half-read iteration (a timeout) without waiting on a dead store
        void Promise.resolve(iterator.return?.()).catch(() => undefined)
      }
    } catch (err) {
      throw this.report(err)
    }
  }
}
