/**
 * The arguments of a push of one key (what a synchronous hit sends: one script call).
 */
import { type DiffBatch, type WindowPush, type WindowRef, windowExpiresAtMs } from '../../core/strategy.js'
import { encodeKey, windowName } from './key-names.js'

function checkCount(w: WindowPush): void {
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
