import { StoreError } from '../core/errors.js'
import { BUILT_IN_STORES } from './capabilities.js'
import {
  type CounterRow,
  currentAndPrevious,
  type DiffBatch,
  type EscrowBatch,
  type EscrowReply,
  type GrantRow,
  type Strategy,
  type WindowPush,
  windowExpiresAtMs,
} from '../core/strategy.js'
import { previousWeight } from '../core/window.js'

/** Options of {@link MemoryStrategy}. */
export interface MemoryStrategyOptions {
  /** How long a window outlives the two windows a rate can read, ms. @default 10_000 */
  readonly graceMs?: number
}

interface NodeSlot {
  count: number
  seq: number
}

interface StoredWindow {
  readonly namespace: string
  readonly key: string
  readonly windowStartMs: number
  readonly windowSizeMs: number
  readonly nodes: Map<string, NodeSlot>
  /** Set by a reset: minus the total at that moment. */
  offset: number
  /** The sum of the node counts, kept as they change; NaN when it must be summed again. */
  sum: number
  expiresAtMs: number
}

type Fault = { kind: 'down' } | { kind: 'hang'; waiters: Array<() => void> }

// Whole numbers whose sums stay exact in a double.
const EXACT = 2 ** 52

function total(w: StoredWindow): number {
  if (w.sum !== w.sum) {
    let sum = 0
    for (const slot of w.nodes.values()) sum += slot.count
    w.sum = sum
  }
  return w.offset + w.sum
}

// Sets a node's count. The sum follows the change when every number involved is a whole
// number (exactly what summing again gives, whatever the order); otherwise it is summed again on
// the next read, in the nodes' order as before.
function setCount(w: StoredWindow, slot: NodeSlot, count: number): void {
  const sum = w.sum + (count - slot.count)
  w.sum = Number.isInteger(sum) && Number.isInteger(count) && Number.isInteger(slot.count) && sum < EXACT && sum > -EXACT ? sum : Number.NaN
  slot.count = count
}

/**
 * An in-process central store. Several `RateLimiting` instances given the same MemoryStrategy
 * behave like several processes sharing one store, which makes it the reference for the
 * strategy contract and the stand-in for a real store in tests. It can inject faults: a push
 * that fails, a push applied whose reply is lost, an outage, a hang, a restart that loses data.
 *
 * @example
 * const store = new MemoryStrategy()
 * a.new({ namespace: 'api', windowSizes: [60], syncRate: 0.1, strategy: store })
 * b.new({ namespace: 'api', windowSizes: [60], syncRate: 0.1, strategy: store })
 */
export class MemoryStrategy implements Strategy {
  readonly name = 'memory'
  readonly supportsDecimals = BUILT_IN_STORES.memory.supportsDecimals
  readonly supportsBlocks = BUILT_IN_STORES.memory.supportsBlocks
  /** Calls received, by method, for tests and diagnostics. */
  readonly calls = { pushDiffs: 0, getCounters: 0, getWindow: 0, resetKey: 0, purge: 0, escrow: 0 }
  private readonly graceMs: number
  // key -> its stored windows (of every namespace, size and start: a handful), looked up by the
  // key string the caller holds, whose hash the engine has computed already
  private readonly windows = new Map<string, StoredWindow[]>()
  private stored = 0
  // blocks: namespace NUL key -> when the block ends, epoch ms (swept with the windows)
  private readonly blocks = new Map<string, number>()
  // escrow: namespace -> when the store began holding its reservations (docs/ARCHITECTURE.md, "Escrow")
  private readonly epochs = new Map<string, number>()
  // escrow: namespace -> node -> when it last called, epoch ms (the processes a namespace has)
  private readonly callers = new Map<string, Map<string, number>>()
  private fault: Fault | undefined
  private failPushes = 0
  private loseReplies = 0
  private nextSweepMs = 0

  constructor(options: MemoryStrategyOptions = {}) {
    const graceMs = options.graceMs ?? 10_000
    if (typeof graceMs !== 'number' || !Number.isFinite(graceMs) || graceMs < 0)
      throw new RangeError(`graceMs must be a finite number >= 0, got ${String(graceMs)}`)
    this.graceMs = graceMs
  }

  /** Key-windows stored now. */
  get size(): number {
    return this.stored
  }

  /** The next `n` pushes fail before anything is applied. */
  failNextPushes(n = 1): void {
    this.failPushes += n
  }

  /** The next `n` pushes are applied, but their replies are lost (the caller sees an error). */
  loseNextReplies(n = 1): void {
    this.loseReplies += n
  }

  /** Every call fails at once until `up()`. */
  down(): void {
    this.release()
    this.fault = { kind: 'down' }
  }

  /** Every call waits, unanswered, until `up()` (then it fails as if the connection dropped). */
  hang(): void {
    this.release()
    this.fault = { kind: 'hang', waiters: [] }
  }

  /** Ends `down()` or `hang()`. */
  up(): void {
    this.release()
  }

  /** Loses every stored window, as a store restarted without persistence does. */
  restart(): void {
    this.windows.clear()
    this.stored = 0
    this.blocks.clear()
    this.epochs.clear()
    this.callers.clear()
  }

  async pushDiffs(batch: DiffBatch): Promise<CounterRow[]> {
    this.calls.pushDiffs++
    await this.gate()
    if (this.failPushes > 0) {
      this.failPushes--
      throw new StoreError('STORE_UNAVAILABLE', this.name, 'injected failure: push not applied')
    }
    this.sweep(batch.nowMs)
    if (batch.blocks !== undefined) {
      for (const b of batch.blocks) {
        const id = `${batch.namespace}\u0000${b.key}`
        if (b.untilMs === 0) this.blocks.delete(id)
        else if (!((this.blocks.get(id) ?? 0) >= b.untilMs)) this.blocks.set(id, b.untilMs)
      }
    }
    const rows = this.writeAndRead(batch)
    if (this.loseReplies > 0) {
      this.loseReplies--
      throw new StoreError('STORE_REPLY_LOST', this.name, 'injected failure: push applied, reply lost')
    }
    if (batch.readBlocks === true)
      return rows.map((row) => ({ ...row, blockedUntilMs: this.blockOf(batch.namespace, row.key, batch.nowMs) }))
    return rows
  }

  async escrow(batch: EscrowBatch): Promise<EscrowReply> {
    this.calls.escrow++
    await this.gate()
    if (this.failPushes > 0) {
      this.failPushes--
      throw new StoreError('STORE_UNAVAILABLE', this.name, 'injected failure: escrow call not applied')
    }
    this.sweep(batch.nowMs)
    let epochMs = this.epochs.get(batch.namespace)
    if (epochMs === undefined) {
      epochMs = batch.nowMs
      this.epochs.set(batch.namespace, epochMs)
    }
    const learning = batch.nowMs < epochMs + batch.learnMs
    let callers = this.callers.get(batch.namespace)
    if (callers === undefined) this.callers.set(batch.namespace, (callers = new Map()))
    callers.set(batch.nodeId, batch.nowMs)
    for (const [node, lastMs] of callers) if (lastMs <= batch.nowMs - batch.learnMs) callers.delete(node)
    const rows = this.writeAndRead(batch)
    const grants: GrantRow[] = []
    const nodes = callers.size
    for (const g of batch.grants) {
      const stored = this.find(batch.namespace, g.key, g.windowStartMs, g.windowSizeMs) ?? this.add(batch.namespace, g)
      stored.expiresAtMs = windowExpiresAtMs(g.windowStartMs, g.windowSizeMs, this.graceMs)
      const previous = this.find(batch.namespace, g.key, g.windowStartMs - g.windowSizeMs, g.windowSizeMs)
      const previousCount = previous === undefined ? 0 : total(previous)
      let slot = stored.nodes.get(batch.nodeId)
      let refused = false
      if (!learning && (slot === undefined || batch.seq > slot.seq)) {
        if (slot === undefined) {
          slot = { count: 0, seq: batch.seq }
          stored.nodes.set(batch.nodeId, slot)
        }
        slot.seq = batch.seq
        const room = g.limit - (total(stored) + previousCount * previousWeight(batch.nowMs, g.windowSizeMs))
        const need = g.minimum - slot.count
        const wanted = g.wanted ?? g.minimum
        if (need <= room) {
          // the hits that ask, as many as fit, then a share of what is left: a quarter of it split
          // over the processes
          const reach = Math.max(g.minimum, Math.min(wanted, slot.count + Math.floor(Math.max(room, 0))))
          const share = Math.floor((room - Math.max(0, reach - slot.count)) / (4 * nodes))
          const raised = Math.min(g.target, Math.max(slot.count, reach + share))
          if (raised > slot.count) setCount(stored, slot, raised)
        } else {
          refused = true
          // the denied hits count, as the process counts them (countDenied)
          if (g.countRefused === true && wanted > slot.count) setCount(stored, slot, wanted)
        }
      }
      grants.push({
        ...this.row(stored, batch.nodeId),
        previousCount,
        previousOwn: previous?.nodes.get(batch.nodeId)?.count ?? 0,
        nodes: stored.nodes.size,
        ...(refused ? { refused } : {}),
      })
    }
    if (this.loseReplies > 0) {
      this.loseReplies--
      throw new StoreError('STORE_REPLY_LOST', this.name, 'injected failure: escrow call applied, reply lost')
    }
    return { epochMs, learning, nodes, rows, grants }
  }

  // A batch's writes (each node's register, newer seq only), then its reads: one row each, in order.
  private writeAndRead(batch: {
    namespace: string
    nodeId: string
    seq: number
    windows: readonly WindowPush[]
    refresh: DiffBatch['refresh']
  }): CounterRow[] {
    const rows: CounterRow[] = []
    for (const w of batch.windows) {
      const stored = this.find(batch.namespace, w.key, w.windowStartMs, w.windowSizeMs) ?? this.add(batch.namespace, w)
      const slot = stored.nodes.get(batch.nodeId)
      stored.expiresAtMs = windowExpiresAtMs(w.windowStartMs, w.windowSizeMs, this.graceMs)
      if (slot === undefined) {
        const added = { count: 0, seq: batch.seq }
        stored.nodes.set(batch.nodeId, added)
        setCount(stored, added, w.count)
      } else if (batch.seq > slot.seq) {
        setCount(stored, slot, w.count)
        slot.seq = batch.seq
      } else {
        // refused (not newer): answered in its place in the node's sequence, nothing written
        const row = this.row(stored, batch.nodeId)
        rows.push({ ...row, count: row.count - row.own + w.count, own: w.count })
        continue
      }
      rows.push(this.row(stored, batch.nodeId))
    }
    for (const r of batch.refresh) {
      const stored = this.find(batch.namespace, r.key, r.windowStartMs, r.windowSizeMs)
      rows.push(
        stored
          ? this.row(stored, batch.nodeId)
          : { key: r.key, windowStartMs: r.windowStartMs, windowSizeMs: r.windowSizeMs, count: 0, own: 0 },
      )
    }
    return rows
  }

  /** Blocks held now (ended ones go with the next sweep). */
  get blockCount(): number {
    return this.blocks.size
  }

  private blockOf(namespace: string, key: string, nowMs: number): number {
    const until = this.blocks.get(`${namespace}\u0000${key}`)
    return until !== undefined && until > nowMs ? until : 0
  }

  async *getCounters(namespace: string, windowSizesMs: readonly number[], nowMs: number, nodeId = ''): AsyncIterable<CounterRow> {
    this.calls.getCounters++
    await this.gate()
    const wanted = new Set(currentAndPrevious(nowMs, windowSizesMs).map((w) => `${w.windowSizeMs}\u0000${w.windowStartMs}`))
    const rows: CounterRow[] = []
    for (const list of this.windows.values()) {
      for (const w of list)
        if (w.namespace === namespace && wanted.has(`${w.windowSizeMs}\u0000${w.windowStartMs}`)) rows.push(this.row(w, nodeId))
    }
    yield* rows
  }

  async getWindow(key: string, namespace: string, windowStartMs: number, windowSizeMs: number, nodeId = ''): Promise<CounterRow> {
    this.calls.getWindow++
    await this.gate()
    const stored = this.find(namespace, key, windowStartMs, windowSizeMs)
    return stored ? this.row(stored, nodeId) : { key, windowStartMs, windowSizeMs, count: 0, own: 0 }
  }

  async resetKey(namespace: string, key: string, windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    this.calls.resetKey++
    await this.gate()
    for (const w of currentAndPrevious(nowMs, windowSizesMs)) {
      const stored = this.find(namespace, key, w.windowStartMs, w.windowSizeMs)
      if (stored !== undefined) stored.offset -= total(stored)
    }
  }

  async purge(namespace: string, _windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    this.calls.purge++
    await this.gate()
    this.remove((w) => w.namespace === namespace && w.expiresAtMs <= nowMs)
  }

  async close(): Promise<void> {
    this.release()
  }

  private row(w: StoredWindow, nodeId: string): CounterRow {
    return {
      key: w.key,
      windowStartMs: w.windowStartMs,
      windowSizeMs: w.windowSizeMs,
      count: total(w),
      own: w.nodes.get(nodeId)?.count ?? 0,
    }
  }

  // Expired windows go in one pass at most once a second of store time: memory stays bounded
  // without a timer per key.
  private sweep(nowMs: number): void {
    if (nowMs < this.nextSweepMs) return
    this.nextSweepMs = nowMs + 1000
    this.remove((w) => w.expiresAtMs <= nowMs)
    for (const [id, until] of this.blocks) if (until <= nowMs) this.blocks.delete(id)
  }

  private find(namespace: string, key: string, windowStartMs: number, windowSizeMs: number): StoredWindow | undefined {
    const list = this.windows.get(key)
    if (list === undefined) return undefined
    for (let i = 0; i < list.length; i++) {
      const w = list[i] as StoredWindow
      if (w.windowStartMs === windowStartMs && w.windowSizeMs === windowSizeMs && w.namespace === namespace) return w
    }
    return undefined
  }

  private add(namespace: string, w: { key: string; windowStartMs: number; windowSizeMs: number }): StoredWindow {
    const stored: StoredWindow = {
      namespace,
      key: w.key,
      windowStartMs: w.windowStartMs,
      windowSizeMs: w.windowSizeMs,
      nodes: new Map(),
      offset: 0,
      sum: 0,
      expiresAtMs: 0,
    }
    const list = this.windows.get(w.key)
    if (list === undefined) this.windows.set(w.key, [stored])
    else list.push(stored)
    this.stored++
    return stored
  }

  // Drops the stored windows `gone` picks.
  private remove(gone: (w: StoredWindow) => boolean): void {
    for (const [key, list] of this.windows) {
      let kept = 0
      for (const w of list) if (!gone(w)) list[kept++] = w
      this.stored -= list.length - kept
      if (kept === 0) this.windows.delete(key)
      else list.length = kept
    }
  }

  private async gate(): Promise<void> {
    const fault = this.fault
    if (fault === undefined) return
    if (fault.kind === 'down') throw new StoreError('STORE_UNAVAILABLE', this.name, 'injected outage: store is down')
    await new Promise<void>((resolve) => fault.waiters.push(resolve))
    throw new StoreError('STORE_UNAVAILABLE', this.name, 'injected hang: connection dropped')
  }

  private release(): void {
    const fault = this.fault
    this.fault = undefined
    if (fault?.kind === 'hang') for (const wake of fault.waiters) wake()
  }
}
