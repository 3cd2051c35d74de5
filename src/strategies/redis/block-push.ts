/**
 * `pushDiffs` for a batch with blocks (`DiffBatch.blocks` or `readBlocks`): the same calls as
 * without (one per hash slot, or per chunk; one for a synchronous hit), running PUSH_BLOCKS or
 * SYNC_PUSH_BLOCKS instead of PUSH or SYNC_PUSH, so a block costs no round trip of its own.
 * A batch without blocks never comes here (redis-strategy.ts keeps its path as it was).
 */
import type { StoreError } from '../../core/errors.js'
import { type CounterRow, type DiffBatch, type WindowPush, windowExpiresAtMs } from '../../core/strategy.js'
import { BlockPlan, blockCallArgs, fillBlockRows } from './block-plan.js'
import type { RowRef } from './call-plan.js'
import { PUSH_BLOCKS, SYNC_PUSH_BLOCKS } from './lua.js'
import { checkCount, oneKeyBlockArgs, replyParts, soleKey } from './one-key.js'
import type { LuaScript } from './scripts.js'

/** What {@link pushBlocks} needs of the strategy. */
export interface BlockContext {
  /** 0 to split by hash slot, else the most names per call. */
  readonly chunkSize: number
  readonly graceMs: number
  /** Where the hash tag starts in a namespace's head. */
  readonly tagStart: number
  head(namespace: string): string
  nonce(): string
  /** One script call; `read` turns its reply into the result. */
  send<T>(script: LuaScript, numKeys: number, keysAndArgs: string[], read: (reply: unknown) => T): Promise<T>
  /** Fails a call whose reply is another call's (and reconnects). */
  desync(what: string, reply: unknown): never
  storeError(err: unknown): StoreError
}

/**
 * Pushes a batch with blocks. One key (a synchronous hit, its blocks if any of the same key):
 * one call, SYNC_PUSH_BLOCKS when it writes one window, else PUSH_BLOCKS, the key's block name
 * last in KEYS. Otherwise one PUSH_BLOCKS per slot (or chunk), all sent at once, each block in
 * the call of its key's slot.
 */
export function pushBlocks(ctx: BlockContext, batch: DiffBatch): Promise<CounterRow[]> {
  const { windows, refresh } = batch
  const blocks = batch.blocks ?? []
  const size = windows.length + refresh.length
  // the key's block name is one more name in the call
  const key = ctx.chunkSize === 0 || size < ctx.chunkSize ? soleKey(batch) : undefined
  if (key === undefined || blocks.some((b) => b.key !== key))
    return size === 0 && blocks.length === 0 ? Promise.resolve([]) : pushManyBlocks(ctx, batch)
  const nonce = ctx.nonce()
  let args: string[]
  try {
    args = oneKeyBlockArgs(batch, key, ctx.head(batch.namespace), nonce, ctx.graceMs)
  } catch (err) {
    return Promise.reject(ctx.storeError(err))
  }
  const refs: readonly RowRef[] = windows.length === 0 ? refresh : [...windows, ...refresh]
  const rowBlock = batch.readBlocks === true ? new Array<number>(size).fill(0) : undefined
  return ctx.send(windows.length === 1 ? SYNC_PUSH_BLOCKS : PUSH_BLOCKS, size + 1, args, (reply) => {
    const rows = new Array<CounterRow>(size)
    fillBlockRows(blockReplyParts(ctx, reply, nonce, size, 1), refs, undefined, rowBlock, rows)
    return rows
  })
}

async function pushManyBlocks(ctx: BlockContext, batch: DiffBatch): Promise<CounterRow[]> {
  const { windows, refresh } = batch
  const rows = new Array<CounterRow>(windows.length + refresh.length)
  const readBlocks = batch.readBlocks === true
  const plan = new BlockPlan(ctx.head(batch.namespace), ctx.tagStart, ctx.chunkSize, batch.nowMs, ctx.graceMs, readBlocks)
  const seq = String(batch.seq)
  const nowMs = String(batch.nowMs)
  try {
    // the blocks first: with chunks, the calls that write them go out before those reading rows
    for (const block of batch.blocks ?? []) plan.block(block)
    for (let i = 0; i < windows.length; i++) {
      const w = windows[i] as WindowPush
      checkCount(w)
      plan.write(w, String(w.count), String(windowExpiresAtMs(w.windowStartMs, w.windowSizeMs, ctx.graceMs)), i)
    }
    for (let j = 0; j < refresh.length; j++) plan.read(refresh[j] as RowRef, windows.length + j)
    const pending: Promise<void>[] = []
    for (const call of plan.calls) {
      const nonce = ctx.nonce()
      const [argv, numKeys] = blockCallArgs(call, nonce, batch.nodeId, seq, nowMs)
      const blockNames = numKeys - call.names.length
      const rowBlock = readBlocks ? call.blocks?.rowBlock : undefined
      pending.push(
        ctx.send(PUSH_BLOCKS, numKeys, argv, (reply) =>
          fillBlockRows(blockReplyParts(ctx, reply, nonce, call.names.length, blockNames), call.refs, call.rowIndex, rowBlock, rows),
        ),
      )
    }
    await Promise.all(pending)
  } catch (err) {
    throw ctx.storeError(err)
  }
  return rows
}

// The parts of a PUSH_BLOCKS or SYNC_PUSH_BLOCKS reply: the nonce, a total and own count per
// key-window, an end per block name.
function blockReplyParts(ctx: BlockContext, reply: unknown, nonce: string, count: number, blockNames: number): string[] {
  return replyParts(reply, nonce, 1 + 2 * count + blockNames) ?? ctx.desync('pushDiffs', reply)
}
