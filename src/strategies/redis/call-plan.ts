/**
 * Splits a batch of key-windows into script calls: one per Redis Cluster hash slot (every key of
 * a call in one slot, which any Redis accepts), or, for a single unsharded server that allows
 * it, chunks of up to `chunkSize` key-windows whatever their slots.
 */
import { encodeKey, windowName } from './key-names.js'
import { keySlot, tagSlot } from './key-slot.js'

/** Identifies the row a name answers for. */
export interface RowRef {
  readonly key: string
  readonly windowStartMs: number
  readonly windowSizeMs: number
}

/** One script call: its key names (those written first) and where each row goes. */
export interface ScriptCall {
  readonly names: string[]
  /** Count and expire-at of each written name, in order. */
  readonly writeArgs: string[]
  /** Index in the batch's rows of each name, in order. */
  readonly rowIndex: number[]
  readonly refs: RowRef[]
  /** The first `writes` names are written, the rest only read. */
  writes: number
  /** The call's block names and writes, in a batch with blocks (see block-plan.ts). */
  blocks?: CallBlocks
}

/** The blocks side of a {@link ScriptCall}: what PUSH_BLOCKS takes besides the key-windows. */
export interface CallBlocks {
  /** Block names, after the key-windows in KEYS. */
  readonly names: string[]
  /** Index in `names` of each encoded key's block name. */
  readonly byKey: Map<string, number>
  /** Per block write: the index of its name (from 1, as Lua counts), untilMs, PX. */
  readonly writeArgs: string[]
  /** With readBlocks: per row of the call, the index in `names` of its key's block name. */
  readonly rowBlock: number[]
}

/** An empty call. */
export function newCall(): ScriptCall {
  return { names: [], writeArgs: [], rowIndex: [], refs: [], writes: 0 }
}

/** Builds the script calls of one batch; add every write before the first read. */
export class CallPlan {
  readonly calls: ScriptCall[] = []
  protected readonly head: string
  private readonly tagHead: string
  protected readonly chunkSize: number
  // made on the second key: a synchronous hit has one key and needs neither
  private bySlot: Map<number, ScriptCall> | undefined
  private placed: Map<string, { encoded: string; call: ScriptCall }> | undefined
  // a synchronous hit sends a few windows of one key: the last key placed skips the map
  private lastKey: string | undefined
  protected lastEncoded = ''
  protected lastCall: ScriptCall | undefined
  private firstSlot = 0

  /**
   * @param head the namespace's name head, `<prefix>:{<namespace>:`
   * @param tagStart where the hash tag starts in `head` (after the brace)
   * @param chunkSize 0 to split by hash slot, else the most key-windows per call
   */
  constructor(head: string, tagStart: number, chunkSize: number) {
    this.head = head
    this.tagHead = head.slice(tagStart)
    this.chunkSize = chunkSize
  }

  /** Adds a key-window to write. */
  write(ref: RowRef, count: string, expireAtMs: string, rowIndex: number): void {
    const call = this.place(ref.key)
    call.names.push(windowName(this.head, this.lastEncoded, ref.windowSizeMs, ref.windowStartMs))
    call.writeArgs.push(count, expireAtMs)
    call.rowIndex.push(rowIndex)
    call.refs.push(ref)
    call.writes++
  }

  /** Adds a key-window to read back. */
  read(ref: RowRef, rowIndex: number): void {
    const call = this.place(ref.key)
    call.names.push(windowName(this.head, this.lastEncoded, ref.windowSizeMs, ref.windowStartMs))
    call.rowIndex.push(rowIndex)
    call.refs.push(ref)
  }

  /** Adds a key-window to read back by its full name (as SCAN found it). */
  readName(name: string, ref: RowRef, rowIndex: number): void {
    const call = this.chunkSize > 0 ? this.chunk() : this.slotCall(keySlot(name))
    call.names.push(name)
    call.rowIndex.push(rowIndex)
    call.refs.push(ref)
  }

  /** The call of `key` (made if needed); sets `lastEncoded` to the escaped key. */
  protected place(key: string): ScriptCall {
    if (key === this.lastKey) {
      const last = this.lastCall as ScriptCall
      if (this.chunkSize === 0 || last.names.length < this.chunkSize) return last
    }
    let call: ScriptCall
    let encoded: string
    if (this.chunkSize > 0) {
      encoded = encodeKey(key)
      call = this.chunk()
    } else {
      if (this.lastKey !== undefined && this.placed === undefined) {
        this.placed = new Map([[this.lastKey, { encoded: this.lastEncoded, call: this.lastCall as ScriptCall }]])
      }
      const seen = this.placed?.get(key)
      if (seen !== undefined) {
        encoded = seen.encoded
        call = seen.call
      } else {
        encoded = encodeKey(key)
        call = this.slotCall(tagSlot(this.tagHead + encoded))
        this.placed?.set(key, { encoded, call })
      }
    }
    this.lastKey = key
    this.lastEncoded = encoded
    this.lastCall = call
    return call
  }

  private slotCall(slot: number): ScriptCall {
    if (this.calls.length === 0) {
      this.firstSlot = slot
      const call = newCall()
      this.calls.push(call)
      return call
    }
    if (this.bySlot === undefined) this.bySlot = new Map([[this.firstSlot, this.calls[0] as ScriptCall]])
    let call = this.bySlot.get(slot)
    if (call === undefined) {
      call = newCall()
      this.bySlot.set(slot, call)
      this.calls.push(call)
    }
    return call
  }

  /** The last call, or a new one when it is full. */
  protected chunk(): ScriptCall {
    let call = this.calls[this.calls.length - 1]
    if (call === undefined || call.names.length >= this.chunkSize) {
      call = newCall()
      this.calls.push(call)
    }
    return call
  }
}
