/**
 * The arguments of a push of one key (what a synchronous hit sends: one script call), without
 * blocks (SYNC_PUSH, PUSH) and with them (SYNC_PUSH_BLOCKS, PUSH_BLOCKS).
 */
import { type DiffBatch, type WindowPush, type WindowRef, windowExpiresAtMs } from '../../core/strategy.js'
import { blockWriteArgs } from './block-plan.js'
import { blockName, encodeKey, windowName } from './key-names.js'

/**
 * The key of every window written and read by `batch` when they share one (a synchronous hit:
 * one call), else undefined.
 */
export function soleKey(batch: DiffBatch): string | undefined {
  const { windows, refresh } = batch
  const key = (windows.length > 0 ? windows[0] : refresh[0])?.key
  for (let i = 0; i < windows.length; i++) if ((windows[i] as WindowPush).key !== key) return undefined
  for (let i = 0; i < refresh.length; i++) if ((refresh[i] as WindowRef).key !== key) return undefined
  return key
}

/**
 * The parts of a PUSH-family reply, one string: the nonce, then `expected - 1` numbers; undefined
 * when it is not that (a reply meant for another call).
 */
export function replyParts(reply: unknown, nonce: string, expected: number): string[] | undefined {
  const parts = typeof reply === 'string' ? reply.split(' ') : undefined
  return parts === undefined || parts[0] !== nonce || parts.length !== expected ? undefined : parts
}

/** Refuses a count Redis cannot hold (RangeError, a STORE_ERROR once wrapped). */
export function checkCount(w: WindowPush): void {
  if (typeof w.count !== 'number' || !Number.isFinite(w.count))
    throw new RangeError(`redis: count of ${JSON.stringify(w.key)} must be a finite number, got ${String(w.count)}`)
}

/**
 * KEYS and ARGV of a SYNC_PUSH call (a synchronous hit: one window written, the key's others
 * read): the names (the written one first), nonce, nodeId, seq, count, expire-at.
 */
export function oneWriteArgs(batch: DiffBatch, key: string, head: string, nonce: string, graceMs: number): string[] {
  const w = batch.windows[0] as WindowPush
  const refresh = batch.refresh
  checkCount(w)
  const encoded = encodeKey(key)
  const args = [windowName(head, encoded, w.windowSizeMs, w.windowStartMs)]
  for (let i = 0; i < refresh.length; i++) {
    const r = refresh[i] as WindowRef
    args.push(windowName(head, encoded, r.windowSizeMs, r.windowStartMs))
  }
  args.push(nonce, batch.nodeId, String(batch.seq), String(w.count), String(windowExpiresAtMs(w.windowStartMs, w.windowSizeMs, graceMs)))
  return args
}

/**
 * KEYS and ARGV of a PUSH call for a batch of one key's windows: its names (written ones first),
 * nonce, nodeId, seq, the number written, then count and expire-at of each written window.
 */
export function oneKeyArgs(batch: DiffBatch, key: string, head: string, nonce: string, graceMs: number): string[] {
  const { windows, refresh } = batch
  const encoded = encodeKey(key)
  const args: string[] = []
  for (let i = 0; i < windows.length; i++) {
    const w = windows[i] as WindowPush
    checkCount(w)
    args.push(windowName(head, encoded, w.windowSizeMs, w.windowStartMs))
  }
  for (let i = 0; i < refresh.length; i++) {
    const r = refresh[i] as WindowRef
    args.push(windowName(head, encoded, r.windowSizeMs, r.windowStartMs))
  }
  args.push(nonce, batch.nodeId, String(batch.seq), String(windows.length))
  for (let i = 0; i < windows.length; i++) {
    const w = windows[i] as WindowPush
    args.push(String(w.count), String(windowExpiresAtMs(w.windowStartMs, w.windowSizeMs, graceMs)))
  }
  return args
}

/**
 * KEYS and ARGV of a SYNC_PUSH_BLOCKS call (one window written, the key's block written or read
 * too), or else of a PUSH_BLOCKS call with the key's one block name, for a batch of one key whose
 * blocks (if any) are all of that key: `oneWriteArgs` or `oneKeyArgs` with the block name last in
 * KEYS, nowMs and the block writes in ARGV.
 */
export function oneKeyBlockArgs(batch: DiffBatch, key: string, head: string, nonce: string, graceMs: number): string[] {
  const { windows, refresh, nowMs } = batch
  const blocks = batch.blocks ?? []
  const sync = windows.length === 1
  const args = sync ? oneWriteArgs(batch, key, head, nonce, graceMs) : oneKeyArgs(batch, key, head, nonce, graceMs)
  // before ARGV (after the key-windows): the block name
  args.splice(windows.length + refresh.length, 0, blockName(head, encodeKey(key)))
  const nowArg = String(nowMs)
  if (sync) args.push(nowArg)
  else {
    // after nonce, nodeId, seq, n: b (one block name), nowMs, w
    args.splice(windows.length + refresh.length + 5, 0, '1', nowArg, String(blocks.length))
  }
  for (const block of blocks) {
    const [untilMs, px] = blockWriteArgs(block, nowMs, graceMs)
    if (sync) args.push(untilMs, px)
    else args.push('1', untilMs, px)
  }
  return args
}
