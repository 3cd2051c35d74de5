/**
 * `RedisStrategy.escrow` (docs/STORES-redis.md, "Escrow"): an escrow namespace's batch as one
 * ESCROW script call per group of its key-windows, all sent at once, each with its group's epoch
 * key first in KEYS: per hash slot (a Cluster, or a single server that does not batch across
 * slots), or per chunk of up to `chunkSize` key-windows with one epoch key for the namespace (a
 * single server batching across slots). NamespaceEpochs (escrow-epochs.ts) folds the groups'
 * epochs into the one the engine sees.
 */
import type { StoreError } from '../../core/errors.js'
import {
  type CounterRow,
  type EscrowBatch,
  type EscrowReply,
  type GrantRequest,
  type GrantRow,
  type WindowPush,
  type WindowRef,
  windowExpiresAtMs,
} from '../../core/strategy.js'
import type { RedisAdapter } from './client-adapter.js'
import { type GroupAnswer, NamespaceEpochs } from './escrow-epochs.js'
import { encodeKey, windowName } from './key-names.js'
import { tagSlot } from './key-slot.js'
import { ESCROW } from './lua-escrow.js'
import { checkCount } from './one-key.js'
import type { LuaScript } from './scripts.js'
import { slotTag } from './slot-tags.js'

/** What {@link escrowBatch} needs of the strategy. */
export interface EscrowContext {
  readonly prefix: string
  /** 0 to split by hash slot (an epoch key per slot), else the most key-windows per call (one epoch key). */
  readonly chunkSize: number
  readonly graceMs: number
  readonly client: RedisAdapter
  head(namespace: string): string
  nonce(): string
  /** One script call; `read` turns its reply into the result. */
  send<T>(script: LuaScript, numKeys: number, keysAndArgs: string[], read: (reply: unknown) => T): Promise<T>
  /** Fails a call whose reply is another call's (and reconnects). */
  desync(what: string, reply: unknown): never
  storeError(err: unknown): StoreError
}

// the real clock, as it was when this module loaded (a fake-timer library installed later does not replace it)
const nativeNow = Date.now.bind(Date)

// the group of a namespace batching across slots: one epoch key
const WHOLE = -1

interface EscrowCall {
  readonly group: number
  /** KEYS after the group key: written key-windows, read ones, then two per grant. */
  readonly names: string[]
  readonly writeArgs: string[]
  readonly grantArgs: string[]
  writes: number
  reads: number
  /** Index in the batch's rows of each write and read, then in its grants of each grant. */
  readonly rowIndex: number[]
  readonly rowRefs: WindowRef[]
  readonly grantIndex: number[]
  readonly grantRefs: WindowRef[]
}

function newCall(group: number): EscrowCall {
  return { group, names: [], writeArgs: [], grantArgs: [], writes: 0, reads: 0, rowIndex: [], rowRefs: [], grantIndex: [], grantRefs: [] }
}

function finite(value: unknown, what: string, key: string): number {
  if (typeof value !== 'number' || !Number.isFinite(value))
    throw new RangeError(`redis: ${what} of the grant of ${JSON.stringify(key)} must be a finite number, got ${String(value)}`)
  return value
}

/** The escrow half of one RedisStrategy: the namespaces' epochs, and the arrival order of replies. */
export class RedisEscrow {
  private readonly ctx: EscrowContext
  private readonly namespaces = new Map<string, NamespaceEpochs>()
  private recv = 0
  // the engine's clock and the real one at the first call, and whether they ever drifted apart
  private clockBase: { readonly engine: number; readonly real: number } | undefined
  private fakeClock = false

  constructor(ctx: EscrowContext) {
    this.ctx = ctx
  }

  /** One escrow batch: its calls sent at once; rejects with a StoreError if any fails. */
  async call(batch: EscrowBatch): Promise<EscrowReply> {
    const ctx = this.ctx
    let epochs = this.namespaces.get(batch.namespace)
    if (epochs === undefined) this.namespaces.set(batch.namespace, (epochs = new NamespaceEpochs()))
    const { nowMs, learnMs } = batch
    let calls: EscrowCall[]
    let args: string[][]
    const head = ctx.head(batch.namespace)
    try {
      if (typeof learnMs !== 'number' || !Number.isFinite(learnMs) || learnMs < 0)
        throw new RangeError(`redis: learnMs must be a finite number >= 0, got ${String(learnMs)}`)
      calls = this.plan(batch, head, epochs)
      const ttl = String(epochs.ttlMs(ctx.graceMs, learnMs))
      const hint = String(ctx.chunkSize > 0 ? 0 : epochs.hint(nowMs, learnMs))
      const common = [batch.nodeId, String(batch.seq), String(nowMs), String(learnMs), ttl, hint]
      const real = this.realClock(nowMs) ? '1' : '0'
      const encodedNamespace = head.slice(ctx.prefix.length + 2, -1)
      args = calls.map((call) => {
        const a = [this.groupKey(call.group, encodedNamespace), ...call.names, '', ...common, epochs.renewOf(call.group), real]
        a.push(String(call.writes), String(call.reads), ...call.writeArgs, ...call.grantArgs)
        return a
      })
    } catch (err) {
      throw ctx.storeError(err)
    }
    const rows = new Array<CounterRow>(batch.windows.length + batch.refresh.length)
    const grants = new Array<GrantRow>(batch.grants.length)
    const answers = new Array<GroupAnswer>(calls.length)
    const pending: Promise<void>[] = []
    for (let c = 0; c < calls.length; c++) {
      const call = calls[c] as EscrowCall
      const a = args[c] as string[]
      const nonce = ctx.nonce()
      a[1 + call.names.length] = nonce
      pending.push(
        ctx.send(ESCROW, 1 + call.names.length, a, (reply) => {
          answers[c] = this.read(reply, nonce, call, rows, grants)
        }),
      )
    }
    try {
      await Promise.all(pending)
    } catch (err) {
      throw ctx.storeError(err)
    }
    const masterOf = (group: number) => this.masterOf(group)
    const folded = epochs.fold(answers, masterOf, nowMs, ctx.graceMs, learnMs)
    // rows of parts that may hold what the store lost: answered as holding nothing
    for (const c of folded.unknown) {
      const call = calls[c] as EscrowCall
      for (const i of call.rowIndex) rows[i] = { ...(rows[i] as CounterRow), count: 0, own: 0 }
      for (const i of call.grantIndex) grants[i] = { ...(grants[i] as GrantRow), count: 0, own: 0, previousCount: 0, previousOwn: 0 }
    }
    return { epochMs: folded.epochMs, learning: folded.learning, nodes: folded.nodes, rows, grants }
  }

  // Whether the engine's clock is the real one: it has moved as the real clock since the first
  // call (within a second: a sync's clock is read before it collects its keys). A clock that
  // ever jumped (a test's, a fake-timer library's) is not, for good. With the real clock, a new
  // epoch also learns for learnMs on the server's clock (lua-escrow.ts).
  private realClock(nowMs: number): boolean {
    const real = nativeNow()
    const base = this.clockBase
    if (base === undefined) {
      this.clockBase = { engine: nowMs, real }
      return false
    }
    if (Math.abs(nowMs - base.engine - (real - base.real)) > 1000) this.fakeClock = true
    return !this.fakeClock
  }

  // The calls of a batch: by slot or by chunk, writes then reads then grants in each; a sync's
  // call (no grants) also probes one group per master not called lately (NamespaceEpochs.probes).
  private plan(batch: EscrowBatch, head: string, epochs: NamespaceEpochs): EscrowCall[] {
    const { chunkSize, graceMs } = this.ctx
    const tagHead = head.slice(this.ctx.prefix.length + 2)
    const calls: EscrowCall[] = []
    const bySlot = new Map<number, EscrowCall>()
    const encoded = new Map<string, string>()
    const place = (key: string, names: number): [EscrowCall, string] => {
      let enc = encoded.get(key)
      if (enc === undefined) encoded.set(key, (enc = encodeKey(key)))
      let call: EscrowCall | undefined
      if (chunkSize > 0) {
        call = calls[calls.length - 1]
        if (call === undefined || (call.names.length > 0 && call.names.length + names > chunkSize)) calls.push((call = newCall(WHOLE)))
      } else {
        const slot = tagSlot(tagHead + enc)
        call = bySlot.get(slot)
        if (call === undefined) {
          bySlot.set(slot, (call = newCall(slot)))
          calls.push(call)
        }
      }
      return [call, enc]
    }
    batch.windows.forEach((w: WindowPush, i) => {
      checkCount(w)
      epochs.noteSize(w.windowSizeMs)
      const [call, enc] = place(w.key, 1)
      call.names.push(windowName(head, enc, w.windowSizeMs, w.windowStartMs))
      call.writeArgs.push(String(w.count), String(windowExpiresAtMs(w.windowStartMs, w.windowSizeMs, graceMs)))
      call.writes++
      call.rowIndex.push(i)
      call.rowRefs.push(w)
    })
    batch.refresh.forEach((r: WindowRef, j) => {
      const [call, enc] = place(r.key, 1)
      call.names.push(windowName(head, enc, r.windowSizeMs, r.windowStartMs))
      call.reads++
      call.rowIndex.push(batch.windows.length + j)
      call.rowRefs.push(r)
    })
    batch.grants.forEach((g: GrantRequest, i) => {
      const target = finite(g.target, 'target', g.key)
      const limit = finite(g.limit, 'limit', g.key)
      const minimum = finite(g.minimum, 'minimum', g.key)
      epochs.noteSize(g.windowSizeMs)
      const [call, enc] = place(g.key, 2)
      call.names.push(
        windowName(head, enc, g.windowSizeMs, g.windowStartMs),
        windowName(head, enc, g.windowSizeMs, g.windowStartMs - g.windowSizeMs),
      )
      call.grantArgs.push(
        String(target),
        String(limit),
        String(minimum),
        String(g.windowSizeMs),
        String(windowExpiresAtMs(g.windowStartMs, g.windowSizeMs, graceMs)),
        g.countRefused === true ? '1' : '0',
        String(g.wanted === undefined ? minimum : finite(g.wanted, 'wanted', g.key)),
      )
      call.grantIndex.push(i)
      call.grantRefs.push(g)
    })
    if (chunkSize > 0) {
      if (calls.length === 0) calls.push(newCall(WHOLE))
      return calls
    }
    if (batch.grants.length === 0) {
      const called = new Set(bySlot.keys())
      for (const group of epochs.probes(called, (g) => this.masterOf(g), batch.nowMs, batch.learnMs)) calls.push(newCall(group))
      // nothing to send: a group heard from before answers the epoch, or, with none, the namespace's own slot
      if (calls.length === 0) calls.push(newCall(epochs.lastGroup() ?? tagSlot(tagHead)))
    }
    return calls
  }

  private groupKey(group: number, encodedNamespace: string): string {
    const { prefix } = this.ctx
    return group === WHOLE ? `${prefix}:{${encodedNamespace}}:escrow` : `${prefix}:{${slotTag(group)}}:escrow:${encodedNamespace}`
  }

  private masterOf(group: number): string {
    return group === WHOLE || !this.ctx.client.cluster ? '' : (this.ctx.client.masterOf?.(group) ?? '')
  }

  // One reply: `nonce epoch generation learning nodes`, a row per write and read, six fields per grant.
  private read(reply: unknown, nonce: string, call: EscrowCall, rows: CounterRow[], grants: GrantRow[]): GroupAnswer {
    const parts = typeof reply === 'string' ? reply.split(' ') : undefined
    const expected = 5 + 2 * (call.writes + call.reads) + 6 * call.grantIndex.length
    if (parts === undefined || parts[0] !== nonce || parts.length !== expected) return this.ctx.desync('escrow', reply)
    const recv = ++this.recv
    let p = 5
    for (let i = 0; i < call.rowIndex.length; i++, p += 2) {
      const ref = call.rowRefs[i] as WindowRef
      rows[call.rowIndex[i] as number] = {
        key: ref.key,
        windowStartMs: ref.windowStartMs,
        windowSizeMs: ref.windowSizeMs,
        count: Number(parts[p]),
        own: Number(parts[p + 1]),
      }
    }
    for (let i = 0; i < call.grantIndex.length; i++, p += 6) {
      const ref = call.grantRefs[i] as WindowRef
      const row: GrantRow = {
        key: ref.key,
        windowStartMs: ref.windowStartMs,
        windowSizeMs: ref.windowSizeMs,
        count: Number(parts[p]),
        own: Number(parts[p + 1]),
        previousCount: Number(parts[p + 2]),
        previousOwn: Number(parts[p + 3]),
        nodes: Number(parts[p + 4]),
      }
      grants[call.grantIndex[i] as number] = parts[p + 5] === '1' ? { ...row, refused: true } : row
    }
    return {
      group: call.group,
      epoch: parts[1] as string,
      generation: Number(parts[2]),
      learning: parts[3] === '1',
      nodes: Number(parts[4]),
      grants: call.grantIndex.length > 0,
      recv,
    }
  }
}
