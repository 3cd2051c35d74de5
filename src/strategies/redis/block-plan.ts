/**
 * Script calls of a batch with blocks (`DiffBatch.blocks` or `readBlocks`), for PUSH_BLOCKS: the
 * same split as {@link CallPlan} (one call per hash slot, or chunks on a single server), plus, in
 * each call, the block names of its keys (same hash tag, so the same slot) and the block writes.
 * A batch without blocks never comes here: it keeps PUSH and its arguments as they were.
 */
import type { BlockWrite, CounterRow } from '../../core/strategy.js'
import { CallPlan, type CallBlocks, newCall, type RowRef, type ScriptCall } from './call-plan.js'
import { blockName } from './key-names.js'

/**
 * The untilMs and PX arguments of a block write: the end as given (`0` lifts) and a relative
 * expiry `graceMs` after it, measured from the batch's clock (a clock ahead of or behind the
 * server's moves the end, not the duration). At least 1 ms, at most 2^53 - 1 (well within what SET PX takes).
 */
export function blockWriteArgs(block: BlockWrite, nowMs: number, graceMs: number): [untilMs: string, px: string] {
  const until = block.untilMs
  if (typeof until !== 'number' || !Number.isFinite(until) || until < 0)
    throw new RangeError(`redis: untilMs of the block of ${JSON.stringify(block.key)} must be a finite number >= 0, got ${String(until)}`)
  if (until === 0) return ['0', '0']
  return [String(until), String(Math.min(Number.MAX_SAFE_INTEGER, Math.max(1, Math.ceil(until - nowMs + graceMs))))]
}

function blocksOf(call: ScriptCall): CallBlocks {
  let blocks = call.blocks
  if (blocks === undefined) {
    blocks = { names: [], byKey: new Map(), writeArgs: [], rowBlock: [] }
    call.blocks = blocks
  }
  return blocks
}

/** Builds the PUSH_BLOCKS calls of one batch: add the blocks first, then the writes, then the reads. */
export class BlockPlan extends CallPlan {
  private readonly nowMs: number
  private readonly graceMs: number
  private readonly readBlocks: boolean

  /**
   * @param head the namespace's name head, `<prefix>:{<namespace>:`
   * @param tagStart where the hash tag starts in `head` (after the brace)
   * @param chunkSize 0 to split by hash slot, else the most names per call (block names count)
   * @param readBlocks whether every row reads its key's block
   */
  constructor(head: string, tagStart: number, chunkSize: number, nowMs: number, graceMs: number, readBlocks: boolean) {
    super(head, tagStart, chunkSize)
    this.nowMs = nowMs
    this.graceMs = graceMs
    this.readBlocks = readBlocks
  }

  /**
   * Adds a block write to the call of its key (the call of its key's windows, when the batch has
   * some: the script writes the blocks before it reads a row). With chunks, on one server whose
   * connection runs the calls in order, it goes into the first calls, before any row is read.
   */
  block(block: BlockWrite): void {
    const [untilMs, px] = blockWriteArgs(block, this.nowMs, this.graceMs)
    const call = this.place(block.key)
    const blocks = blocksOf(call)
    blocks.writeArgs.push(String(this.blockIndex(blocks, this.lastEncoded) + 1), untilMs, px)
  }

  override write(ref: RowRef, count: string, expireAtMs: string, rowIndex: number): void {
    super.write(ref, count, expireAtMs, rowIndex)
    if (this.readBlocks) this.rowBlock()
  }

  override read(ref: RowRef, rowIndex: number): void {
    super.read(ref, rowIndex)
    if (this.readBlocks) this.rowBlock()
  }

  // The row just placed reads its key's block, in its own call.
  private rowBlock(): void {
    const blocks = blocksOf(this.lastCall as ScriptCall)
    blocks.rowBlock.push(this.blockIndex(blocks, this.lastEncoded))
  }

  private blockIndex(blocks: CallBlocks, encoded: string): number {
    let index = blocks.byKey.get(encoded)
    if (index === undefined) {
      index = blocks.names.length
      blocks.names.push(blockName(this.head, encoded))
      blocks.byKey.set(encoded, index)
    }
    return index
  }

  protected override chunk(): ScriptCall {
    let call = this.calls[this.calls.length - 1]
    if (call === undefined || call.names.length + (call.blocks?.names.length ?? 0) >= this.chunkSize) {
      call = newCall()
      this.calls.push(call)
    }
    return call
  }
}

/**
 * KEYS and ARGV of a PUSH_BLOCKS call, and the number of KEYS: the key-windows, the block names,
 * then nonce, nodeId, seq, n, b, nowMs, w, the window writes and the block writes.
 */
export function blockCallArgs(call: ScriptCall, nonce: string, nodeId: string, seq: string, nowMs: string): [string[], number] {
  const blocks = call.blocks
  const names = blocks === undefined ? call.names : call.names.concat(blocks.names)
  const blockWrites = blocks?.writeArgs ?? []
  const argv = names.concat(nonce, nodeId, seq, String(call.writes), String(names.length - call.names.length), nowMs)
  argv.push(String(blockWrites.length / 3))
  for (const arg of call.writeArgs) argv.push(arg)
  for (const arg of blockWrites) argv.push(arg)
  return [argv, names.length]
}

/**
 * Fills `rows` from the parts of a PUSH_BLOCKS or SYNC_PUSH_BLOCKS reply (`nonce t1 own1 … b1 …`,
 * checked by the caller): row `i` of the call goes to `rows[rowIndex[i]]` (to `rows[i]` without
 * `rowIndex`), with the end of block name `rowBlock[i]` when the batch reads blocks.
 */
export function fillBlockRows(
  parts: readonly string[],
  refs: readonly RowRef[],
  rowIndex: readonly number[] | undefined,
  rowBlock: readonly number[] | undefined,
  rows: CounterRow[],
): void {
  const first = 1 + 2 * refs.length
  for (let i = 0; i < refs.length; i++) {
    const { key, windowStartMs, windowSizeMs } = refs[i] as RowRef
    const count = Number(parts[1 + 2 * i])
    const own = Number(parts[2 + 2 * i])
    rows[rowIndex === undefined ? i : (rowIndex[i] as number)] =
      rowBlock === undefined
        ? { key, windowStartMs, windowSizeMs, count, own }
        : { key, windowStartMs, windowSizeMs, count, own, blockedUntilMs: Number(parts[first + (rowBlock[i] as number)]) }
  }
}
