/**
 * Blocks in memcached (`DiffBatch.blocks`, `readBlocks`): one item per blocked key,
 * `<prefix>b:<hash(namespace, key)>`, holding the block's end (epoch ms, decimal ASCII) and
 * expiring `graceMs` after it. docs/STORES-memcached.md, "Blocks".
 */
import { StoreError } from '../../core/errors.js'
import { type DiffBatch, type FoldedBlock, foldBlockWrites } from '../../core/strategy.js'
import type { MemcachedClient, MetaCommand, MetaReply } from './client.js'
import { casOf, describe } from './key-index.js'
import { exptime, type KeySpace } from './keys.js'

/**
 * CAS rounds a write of a later end may lose before the push fails. Every writer only ever
 * raises the stored end, so a lost round means a later end landed meanwhile, and the next read
 * usually finds it later than ours: the bound is reached only under a storm of ever later ends.
 */
const MAX_BLOCK_ATTEMPTS = 10

/** What a batch does to one key's block ({@link foldBlockWrites}), and the key's item. */
interface KeyWrite extends FoldedBlock {
  readonly item: string
}

/** A later-end write still to settle, with the item as last read (value and CAS). */
interface Unsettled {
  readonly key: string
  readonly write: KeyWrite
  readonly ttl: number
  readonly seen: MetaReply | undefined
}

/**
 * The blocks of one batch. `writes` go first in the batch's pipeline: per key, a lift (`md`),
 * then an `add` of the new end followed by a read with CAS (`mg v c`), which shows whether the
 * stored end is now at least ours. `reads` go last, one `mg v` per row key the batch did not
 * write. {@link settle} then finishes, with CAS rounds, the writes that met an earlier stored
 * end, so a block is never shortened and the common case (no block stored yet) costs no round
 * trip of its own.
 */
export class BatchBlocks {
  /** Commands to send before any row's command. */
  readonly writes: MetaCommand[] = []
  /** Commands to send after the rows' commands (empty without `readBlocks`). */
  readonly reads: MetaCommand[] = []
  private readonly client: MemcachedClient
  private readonly nowMs: number
  private readonly graceMs: number
  private readonly written = new Map<string, KeyWrite>()
  private readonly readAt = new Map<string, number>()
  /** Each key's end once settled or read: what its rows carry before the `nowMs` check. */
  private readonly ends = new Map<string, number>()

  /** `rowKeys`: the keys of the rows the batch answers, when it reads blocks. */
  constructor(client: MemcachedClient, keys: KeySpace, batch: DiffBatch, graceMs: number, rowKeys: readonly string[]) {
    this.client = client
    this.nowMs = batch.nowMs
    this.graceMs = graceMs
    // Folded per key, so that a key's commands are one lift and one add: a batch that blocks and
    // lifts the same key ends as the memory store would, whatever the CAS rounds do afterwards.
    for (const b of foldBlockWrites(batch.blocks ?? [])) this.written.set(b.key, { ...b, item: keys.block(batch.namespace, b.key) })
    for (const w of this.written.values()) {
      if (w.lift) this.writes.push({ key: w.item, line: `md ${w.item}` })
      if (w.untilMs > 0) this.writes.push(this.add(w, this.ttlOf(w)), { key: w.item, line: `mg ${w.item} v c` })
    }
    if (batch.readBlocks !== true) return
    for (const key of rowKeys) {
      if (this.written.has(key) || this.readAt.has(key)) continue
      const item = keys.block(batch.namespace, key)
      this.readAt.set(key, this.reads.length)
      this.reads.push({ key: item, line: `mg ${item} v` })
    }
  }

  /**
   * Takes the replies of `writes` and `reads` and settles the later-end writes that met an
   * earlier stored end: each is set with the CAS its read showed (or added, if the item has
   * gone meanwhile) and read again, until the stored end is at least ours. Rejects on a refused
   * command, or after {@link MAX_BLOCK_ATTEMPTS} lost rounds.
   */
  async settle(writeReplies: readonly MetaReply[], readReplies: readonly MetaReply[]): Promise<void> {
    let unsettled: Unsettled[] = []
    let at = 0
    for (const [key, w] of this.written) {
      if (w.lift) {
        const deleted = writeReplies[at++]
        if (deleted?.code !== 'HD' && deleted?.code !== 'NF')
          throw new StoreError('STORE_ERROR', 'memcached', `block lift refused: ${describe(deleted)}`)
      }
      if (w.untilMs === 0) {
        this.ends.set(key, 0)
        continue
      }
      refused(writeReplies[at])
      const u: Unsettled = { key, write: w, ttl: this.ttlOf(w), seen: writeReplies[at + 1] }
      at += 2
      if (!this.isSettled(u)) unsettled.push(u)
    }
    for (let attempt = 1; unsettled.length > 0; attempt++) {
      if (attempt >= MAX_BLOCK_ATTEMPTS)
        throw new StoreError(
          'STORE_ERROR',
          'memcached',
          `${unsettled.length} block writes lost ${MAX_BLOCK_ATTEMPTS} CAS races in a row (other writers kept changing them)`,
        )
      const commands: MetaCommand[] = []
      for (const u of unsettled) {
        const cas = u.seen?.code === 'VA' ? casOf(u.seen) : undefined
        const data = String(u.write.untilMs)
        const item = u.write.item
        commands.push(
          cas === undefined ? this.add(u.write, u.ttl) : { key: item, line: `ms ${item} ${data.length} C${cas} T${u.ttl}`, data },
          { key: item, line: `mg ${item} v c` },
        )
      }
      const replies = await this.client.exec(commands)
      const next: Unsettled[] = []
      for (const [j, u] of unsettled.entries()) {
        // HD, or NS/EX/NF (someone wrote or deleted it meanwhile): the read after it decides
        refused(replies[2 * j])
        const again = { ...u, seen: replies[2 * j + 1] }
        if (!this.isSettled(again)) next.push(again)
      }
      unsettled = next
    }
    for (const [key, i] of this.readAt) this.ends.set(key, endOf(readReplies[i]))
  }

  /** A row's `blockedUntilMs`, after {@link settle}: the key's block end if it is later than `nowMs`, else 0. */
  blockedUntilMs(key: string): number {
    const end = this.ends.get(key) ?? 0
    return end > this.nowMs ? end : 0
  }

  // The item must outlive the block: it expires graceMs after the end (exptime's rules: at least
  // 2 s, absolute beyond 30 days).
  private ttlOf(w: KeyWrite): number {
    return exptime(w.untilMs + this.graceMs, this.nowMs)
  }

  private add(w: KeyWrite, ttl: number): MetaCommand {
    const data = String(w.untilMs)
    return { key: w.item, line: `ms ${w.item} ${data.length} ME T${ttl}`, data }
  }

  /** True, with the end recorded, when the item as read holds an end at least as late as ours. */
  private isSettled(u: Unsettled): boolean {
    if (u.seen?.code === 'EN') return false
    const end = endOf(u.seen)
    if (end < u.write.untilMs) return false
    this.ends.set(u.key, end)
    return true
  }
}

/** The end a block item holds: 0 for a miss or a value that is not a number (overwritten as absent). */
function endOf(reply: MetaReply | undefined): number {
  if (reply?.code === 'EN') return 0
  if (reply?.code !== 'VA' || reply.value === undefined)
    throw new StoreError('STORE_ERROR', 'memcached', `block read failed: ${describe(reply)}`)
  const end = Number(reply.value.toString('latin1'))
  return Number.isFinite(end) ? end : 0
}

function refused(reply: MetaReply | undefined): void {
  if (reply === undefined || reply.code === 'ERROR')
    throw new StoreError('STORE_ERROR', 'memcached', `block write refused: ${describe(reply)}`)
}
