import type { BlockWrite, CounterRow, WindowRef } from './strategy.js'

/**
 * The longest block, ms (1e15, about 31,700 years): its end, epoch ms, stays an exact integer
 * in a double (2^53) and in every store's column (PostgreSQL's bigint refused a later end, and a
 * block the store refuses would fail every push of the namespace).
 */
export const MAX_BLOCK_MS = 1e15

/** Whether `ms` is a block duration the stores can hold: a positive number up to {@link MAX_BLOCK_MS}. */
export function isBlockMs(ms: unknown): ms is number {
  return typeof ms === 'number' && ms > 0 && ms <= MAX_BLOCK_MS
}

/** What a valid block duration is, for an error message naming the bad one. */
export const BLOCK_MS_RULE = `a positive number of ms up to ${MAX_BLOCK_MS} (about 31,700 years)`

/**
 * A namespace's blocks (docs/ARCHITECTURE.md, "Blocks"): which keys are denied whatever their
 * counts, until when, as this process knows it; and, in a synced namespace, the block writes
 * (set or lift) the store has not acknowledged yet.
 *
 * - A block only grows here and in the store (the later end wins), so processes that block a
 *   key at once never shorten each other's block; a lift (`unblock`) removes it everywhere.
 * - An op not yet acknowledged is sent with every push until one succeeds (a failed push leaves
 *   it pending: nothing lost); rows read meanwhile say nothing about that key (they may predate
 *   the op), and once acknowledged, the store's answer is what this process holds.
 * - Memory is bounded: at most `maxKeys` blocks, `maxKeys` pending ops and `maxKeys` keys to
 *   refresh; past that, ended blocks go first, then the oldest (a dropped block of a synced
 *   namespace is read again from the store at the key's next sync).
 */
export class Blocks {
  // key -> when its block ends, epoch ms
  private readonly until = new Map<string, number>()
  // key -> the op to send: a block's end, or 0 for a lift (synced namespaces only)
  private readonly pending = new Map<string, number>()
  // keys decided as blocked since the last sync: it reads their block back (an unblock elsewhere)
  private readonly touched = new Set<string>()
  private readonly synced: boolean
  private readonly maxKeys: number
  private nextScanMs = 0

  constructor(synced: boolean, maxKeys: number) {
    this.synced = synced
    this.maxKeys = maxKeys
  }

  /** Blocks held (ended ones included until they are looked at or pruned). */
  get size(): number {
    return this.until.size
  }

  /** Block ops not yet acknowledged by the store. */
  get pendingCount(): number {
    return this.pending.size
  }

  /** When `key`'s block ends, or 0 when it is not blocked at `nowMs` (an ended block is dropped). */
  endOf(key: string, nowMs: number): number {
    const until = this.until.get(key)
    if (until === undefined) return 0
    if (until > nowMs) return until
    this.until.delete(key)
    return 0
  }

  /** Like {@link endOf}, and notes a blocked key for the next sync to read its block back. */
  check(key: string, nowMs: number): number {
    const until = this.endOf(key, nowMs)
    if (until !== 0) this.touch(key)
    return until
  }

  /** Notes `key` for the next sync to read its block (a key looked at without being counted, so not queued by its tables). */
  touch(key: string): void {
    if (this.synced && !this.touched.has(key) && this.touched.size < this.maxKeys) this.touched.add(key)
  }

  /** Blocks `key` until `untilMs` (never earlier than a block it has); returns the block's end. */
  block(key: string, untilMs: number, nowMs: number): number {
    const held = this.endOf(key, nowMs)
    const end = held > untilMs ? held : untilMs
    if (held === 0) this.makeRoom(nowMs)
    this.until.set(key, end)
    if (this.synced) this.queue(key, end)
    return end
  }

  /** Lifts `key`'s block (here, and in the store with the next push). */
  lift(key: string): void {
    this.until.delete(key)
    if (this.synced) this.queue(key, 0)
  }

  /** The op pending for `key`, as a batch's `blocks`, or undefined. */
  pendingFor(key: string): BlockWrite[] | undefined {
    const untilMs = this.pending.get(key)
    return untilMs === undefined ? undefined : [{ key, untilMs }]
  }

  /** Every pending op, as a batch's `blocks`. */
  allPending(): BlockWrite[] {
    const out: BlockWrite[] = []
    for (const [key, untilMs] of this.pending) out.push({ key, untilMs })
    return out
  }

  /** The store has applied `sent`: ops not replaced since are no longer pending. */
  acked(sent: readonly BlockWrite[] | undefined): void {
    if (sent === undefined) return
    for (const op of sent) if (this.pending.get(op.key) === op.untilMs) this.pending.delete(op.key)
  }

  /** Takes the store's word on the blocks of `rows` (read with `readBlocks`), but not over a pending op. */
  learn(rows: readonly CounterRow[], nowMs: number): void {
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i] as CounterRow
      const until = row.blockedUntilMs
      if (until === undefined || this.pending.has(row.key)) continue
      if (until > nowMs) {
        if (!this.until.has(row.key)) this.makeRoom(nowMs)
        this.until.set(row.key, until)
      } else this.until.delete(row.key)
    }
  }

  /**
   * Reads, for the sync being collected, of the keys looked at since the last one (a block or a
   * lift made elsewhere is learned) and of those whose op it sends (the store's answer may be a
   * later end another process wrote).
   */
  takeTouched(windowStartMs: number, windowSizeMs: number, refresh: WindowRef[]): void {
    for (const key of this.touched) if (!this.pending.has(key)) refresh.push({ key, windowStartMs, windowSizeMs })
    for (const key of this.pending.keys()) refresh.push({ key, windowStartMs, windowSizeMs })
    this.touched.clear()
  }

  private queue(key: string, untilMs: number): void {
    if (!this.pending.has(key) && this.pending.size >= this.maxKeys) {
      // the oldest op goes: a store down for long under a flood of blocks
      const oldest = this.pending.keys().next()
      if (oldest.done !== true) this.pending.delete(oldest.value)
    }
    this.pending.set(key, untilMs)
  }

  // Room for one more block: ended ones go (one scan a second at most, so a flood of blocks costs
  // no scan per hit), then the oldest.
  private makeRoom(nowMs: number): void {
    const until = this.until
    if (until.size < this.maxKeys) return
    if (nowMs >= this.nextScanMs) {
      this.nextScanMs = nowMs + 1000
      for (const [key, end] of until) if (end <= nowMs) until.delete(key)
      if (until.size < this.maxKeys) return
    }
    const oldest = until.keys().next()
    if (oldest.done !== true) until.delete(oldest.value)
  }
}
