import type { CounterRow, Strategy } from '../core/strategy.js'

let readSeq = 0

/**
 * Reads one key-window of a store through the one call every store has: a refresh-only
 * `pushDiffs` from `nodeId` (default "reader"), which writes nothing. `own` is `nodeId`'s share.
 *
 * @example
 * const { count } = await readWindow(strategy, { namespace: 'api', key: 'u1', windowStartMs, windowSizeMs: 60_000 })
 */
export async function readWindow(
  strategy: Strategy,
  at: { namespace: string; key: string; windowStartMs: number; windowSizeMs: number; nodeId?: string; nowMs?: number },
): Promise<CounterRow> {
  const rows = await strategy.pushDiffs({
    namespace: at.namespace,
    nodeId: at.nodeId ?? 'reader',
    seq: ++readSeq,
    nowMs: at.nowMs ?? Date.now(),
    windows: [],
    refresh: [{ key: at.key, windowStartMs: at.windowStartMs, windowSizeMs: at.windowSizeMs }],
  })
  const row = rows[0]
  if (rows.length !== 1 || row === undefined) throw new Error(`${strategy.name}: a refresh of one key-window answered ${rows.length} rows`)
  return row
}
