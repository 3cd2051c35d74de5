import { randomBytes } from 'node:crypto'
import { StoreError } from '../../core/errors.js'
import {
  type CounterRow,
  currentAndPrevious,
  type DiffBatch,
  type EscrowBatch,
  type EscrowReply,
  type Strategy,
  type WindowPush,
  type WindowRef,
  windowExpiresAtMs,
} from '../../core/strategy.js'
import { BUILT_IN_STORES } from '../capabilities.js'
import { type BlockContext, pushBlocks } from './block-push.js'
import { CallPlan, type RowRef, type ScriptCall } from './call-plan.js'
import { RedisEscrow } from './escrow.js'
import { encodeKey, namespaceHead, type ParsedName, windowName } from './key-names.js'
import { keySlot } from './key-slot.js'
import { checkCount, oneKeyArgs, oneWriteArgs, replyParts, soleKey } from './one-key.js'
import { PUSH, RESET, SYNC_PUSH } from './lua.js'
import type { RedisAdapter, RedisNodeAdapter } from './client-adapter.js'
import { type RedisStrategyOptions, resolveRedisOptions } from './options.js'
import { scanNamespace } from './scan.js'
import { evalScript, type LuaScript, redisError, WriteHold } from './scripts.js'

/**
 * The Redis store, for a single node or a Redis Cluster, over ioredis, iovalkey or node-redis
 * (client-adapter.ts).
 *
 * One HASH per key-window, `<prefix>:{<namespace>:<key>}:<size>:<start>`, holding each node's
 * cumulative count and seq, and the running total. A push is one Lua script call (by SHA) per
 * hash slot of the batch, all sent at once; it writes a node's count only when the batch's seq
 * is newer than the one held, so a retried or reordered push never counts twice. Every write
 * sets an absolute expiry that covers the previous window plus `graceMs`. Synchronous mode costs
 * one script call per hit. A key's block is a STRING beside its windows (same hash tag), written
 * and read by the same calls when a batch has blocks. docs/STORES-redis.md has the long form.
 *
 * @example
 *  * import { RedisStrategy } from 'ratelimiting/redis'
 * const strategy = new RedisStrategy({ client: new Redis() })
 * rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0.1, strategy })
 */
export class RedisStrategy implements Strategy {
  readonly name = 'redis'
  readonly supportsDecimals = BUILT_IN_STORES.redis.supportsDecimals
  readonly supportsBlocks = BUILT_IN_STORES.redis.supportsBlocks
  /** First part of every key name. */
  readonly prefix: string
  /** Extra lifetime of a stored window after the two windows a rate can read, ms. */
  readonly graceMs: number
  private readonly client: RedisAdapter
  private readonly ownsClient: boolean
  private readonly scanCount: number
  private readonly chunkSize: number
  private readonly heads = new Map<string, string>()
  // Echoed by every script: a reply carrying another call's nonce means the connection lost
  // track of which reply is whose (replies were dropped); see desync().
  private readonly nonceBase = `${randomBytes(6).toString('base64url')}:`
  private nonceSeq = 0
  // Script calls sent and not answered yet, and the socket writes held while some are.
  private inFlight = 0
  private readonly writes: WriteHold
  // What pushBlocks (block-push.ts) calls back into.
  private readonly blockContext: BlockContext
  // escrow namespaces (escrow.ts): their calls and the epochs seen
  private readonly escrows: RedisEscrow

  constructor(options: RedisStrategyOptions) {
    const resolved = resolveRedisOptions(options)
    this.client = resolved.client
    this.writes = new WriteHold(this.client)
    this.ownsClient = resolved.ownsClient
    this.prefix = resolved.prefix
    this.graceMs = resolved.graceMs
    this.scanCount = resolved.scanCount
    this.chunkSize = resolved.chunkSize
    this.blockContext = {
      chunkSize: this.chunkSize,
      graceMs: this.graceMs,
      tagStart: this.prefix.length + 2,
      head: (namespace) => this.head(namespace),
      nonce: () => this.nonce(),
      send: (script, numKeys, keysAndArgs, read) => this.send(script, numKeys, keysAndArgs, read),
      desync: (what, reply) => this.desync(what, reply),
      storeError: (err) => this.storeError(err),
    }
    this.escrows = new RedisEscrow({
      prefix: this.prefix,
      chunkSize: this.chunkSize,
      graceMs: this.graceMs,
      client: this.client,
      head: (namespace) => this.head(namespace),
      nonce: () => this.nonce(),
      send: (script, numKeys, keysAndArgs, read) => this.send(script, numKeys, keysAndArgs, read),
      desync: (what, reply) => this.desync(what, reply),
      storeError: (err) => this.storeError(err),
    })
  }

  /**
   * An escrow namespace's writes, reads and grants (docs/STORES-redis.md, "Escrow"): one ESCROW
   * script call per hash slot (or per chunk of key-windows with `batchAcrossSlots`), all sent at
   * once, each checking its slot's epoch (the namespace's with `batchAcrossSlots`).
   */
  escrow(batch: EscrowBatch): Promise<EscrowReply> {
    return this.escrows.call(batch)
  }

  pushDiffs(batch: DiffBatch): Promise<CounterRow[]> {
    const { windows, refresh, blocks } = batch
    // blocks go through scripts of their own: this path stays what it was without them
    if ((blocks !== undefined && blocks.length > 0) || batch.readBlocks === true) return pushBlocks(this.blockContext, batch)
    const size = windows.length + refresh.length
    if (size === 0) return Promise.resolve([])
    // a synchronous hit: a few windows of one key, so one slot and one call
    const key = this.chunkSize === 0 || size <= this.chunkSize ? soleKey(batch) : undefined
    if (key === undefined) return this.pushMany(batch)
    // one window written (a synchronous hit): SYNC_PUSH, the lean script; else PUSH
    const nonce = this.nonce()
    let args: string[]
    try {
      const head = this.head(batch.namespace)
      args = windows.length === 1 ? oneWriteArgs(batch, key, head, nonce, this.graceMs) : oneKeyArgs(batch, key, head, nonce, this.graceMs)
    } catch (err) {
      return Promise.reject(this.storeError(err))
    }
    return this.send(windows.length === 1 ? SYNC_PUSH : PUSH, size, args, (reply) => this.oneKeyRows(reply, nonce, windows, refresh))
  }

  private oneKeyRows(reply: unknown, nonce: string, windows: readonly WindowPush[], refresh: readonly WindowRef[]): CounterRow[] {
    const count = windows.length + refresh.length
    const parts = this.replyParts(reply, nonce, count)
    const rows = new Array<CounterRow>(count)
    for (let i = 0; i < count; i++) {
      const ref = (i < windows.length ? windows[i] : refresh[i - windows.length]) as WindowRef
      rows[i] = {
        key: ref.key,
        windowStartMs: ref.windowStartMs,
        windowSizeMs: ref.windowSizeMs,
        count: Number(parts[1 + 2 * i]),
        own: Number(parts[2 + 2 * i]),
      }
    }
    return rows
  }

  // A batch of several keys: one call per hash slot (or chunk), all sent at once.
  private async pushMany(batch: DiffBatch): Promise<CounterRow[]> {
    const { windows, refresh } = batch
    const rows = new Array<CounterRow>(windows.length + refresh.length)
    const plan = this.plan(batch.namespace)
    for (let i = 0; i < windows.length; i++) {
      const w = windows[i] as WindowPush
      checkCount(w)
      plan.write(w, String(w.count), String(windowExpiresAtMs(w.windowStartMs, w.windowSizeMs, this.graceMs)), i)
    }
    for (let j = 0; j < refresh.length; j++) plan.read(refresh[j] as RowRef, windows.length + j)
    const calls = plan.calls
    const seq = String(batch.seq)
    try {
      if (calls.length === 1) await this.runCall(calls[0] as ScriptCall, batch.nodeId, seq, rows)
      else await this.runCalls(calls, batch.nodeId, seq, rows)
    } catch (err) {
      throw this.storeError(err)
    }
    return rows
  }

  async *getCounters(namespace: string, windowSizesMs: readonly number[], nowMs: number, nodeId = ''): AsyncIterable<CounterRow> {
    const head = this.head(namespace)
    const wanted = new Set(currentAndPrevious(nowMs, windowSizesMs).map((w) => `${w.windowSizeMs}:${w.windowStartMs}`))
    try {
      for await (const found of scanNamespace(await this.masters(), head, this.scanCount, (reply) => this.desync('scan', reply))) {
        const names: string[] = []
        const refs: ParsedName[] = []
        for (const { name, parsed } of found) {
          if (!wanted.has(`${parsed.windowSizeMs}:${parsed.windowStartMs}`)) continue
          names.push(name)
          refs.push(parsed)
        }
        if (names.length > 0) yield* await this.readNames(names, refs, nodeId)
      }
    } catch (err) {
      throw this.storeError(err)
    }
  }

  async getWindow(key: string, namespace: string, windowStartMs: number, windowSizeMs: number, nodeId = ''): Promise<CounterRow> {
    const name = windowName(this.head(namespace), encodeKey(key), windowSizeMs, windowStartMs)
    try {
      const [row] = await this.readNames([name], [{ key, windowStartMs, windowSizeMs }], nodeId)
      return row as CounterRow
    } catch (err) {
      throw this.storeError(err)
    }
  }

  async resetKey(namespace: string, key: string, windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    const head = this.head(namespace)
    const encoded = encodeKey(key)
    const names = currentAndPrevious(nowMs, windowSizesMs).map((w) => windowName(head, encoded, w.windowSizeMs, w.windowStartMs))
    // one call: every window of one key shares the hash tag, so the reset is atomic across sizes
    const nonce = this.nonce()
    try {
      const reply = await this.run(RESET, names, [nonce])
      if (reply !== nonce) this.desync('resetKey', reply)
    } catch (err) {
      throw this.storeError(err)
    }
  }

  /**
   * Deletes the namespace's windows that have expired at `nowMs` (window end, next window end,
   * `graceMs`). Redis expires them by itself (every write sets PEXPIREAT), so production code
   * never needs this; it is a SCAN of the namespace for tests and for clocks ahead of the server.
   */
  async purge(namespace: string, _windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    const head = this.head(namespace)
    try {
      for await (const found of scanNamespace(await this.masters(), head, this.scanCount, (reply) => this.desync('scan', reply))) {
        const bySlot = new Map<number, string[]>()
        for (const { name, parsed } of found) {
          if (windowExpiresAtMs(parsed.windowStartMs, parsed.windowSizeMs, this.graceMs) > nowMs) continue
          const slot = this.chunkSize > 0 ? 0 : keySlot(name)
          const names = bySlot.get(slot)
          if (names === undefined) bySlot.set(slot, [name])
          else names.push(name)
        }
        await Promise.all([...bySlot.values()].map((names) => this.client.unlink(names)))
      }
    } catch (err) {
      throw this.storeError(err)
    }
  }

  /**
   * Closes the client if the strategy created it from `url` or `sentinels` (QUIT, waiting at
   * most a second for pending replies, then a hard disconnect so that no reconnect timer keeps
   * the process alive). A client you passed stays open.
   */
  async close(): Promise<void> {
    if (this.ownsClient) await this.client.close?.()
  }

  private head(namespace: string): string {
    let head = this.heads.get(namespace)
    if (head === undefined) {
      head = namespaceHead(this.prefix, namespace)
      this.heads.set(namespace, head)
    }
    return head
  }

  private plan(namespace: string): CallPlan {
    return new CallPlan(this.head(namespace), this.prefix.length + 2, this.chunkSize)
  }

  private nonce(): string {
    return this.nonceBase + String(++this.nonceSeq)
  }

  // Reads key-windows by name, split like a push, all calls sent at once.
  private async readNames(names: readonly string[], refs: readonly RowRef[], nodeId: string): Promise<CounterRow[]> {
    const plan = new CallPlan('', 0, this.chunkSize)
    for (let i = 0; i < names.length; i++) plan.readName(names[i] as string, refs[i] as RowRef, i)
    const rows = new Array<CounterRow>(names.length)
    await this.runCalls(plan.calls, nodeId, '0', rows)
    return rows
  }

  // Sends every call at once (ioredis writes each as it comes, without waiting for replies,
  // node-redis those of an iteration in one write; a cluster client routes each to its slot's
  // master) and fills `rows` from the replies. An ioredis pipeline would save the syscall per
  // call but costs more CPU than it saves (measured: 27 ms instead of 21 ms per sync of 1,000
  // keys), and auto-pipelining stalls on a lost reply.
  private async runCalls(calls: readonly ScriptCall[], nodeId: string, seq: string, rows: CounterRow[]): Promise<void> {
    const pending: Promise<void>[] = []
    for (const call of calls) pending.push(this.runCall(call, nodeId, seq, rows))
    await Promise.all(pending)
  }

  private argv(call: ScriptCall, nonce: string, nodeId: string, seq: string): string[] {
    const argv = call.names.concat(nonce, nodeId, seq, String(call.writes))
    for (const arg of call.writeArgs) argv.push(arg)
    return argv
  }

  private runCall(call: ScriptCall, nodeId: string, seq: string, rows: CounterRow[]): Promise<void> {
    const nonce = this.nonce()
    const numKeys = call.names.length
    return this.send(PUSH, numKeys, this.argv(call, nonce, nodeId, seq), (reply) =>
      this.fillRows(reply, nonce, numKeys, call.refs, call.rowIndex, rows),
    )
  }

  // One PUSH or SYNC_PUSH call (evalScript: EVALSHA, EVAL on NOSCRIPT), `read` applied to its
  // reply in the same reaction; failures become StoreErrors. Counts the calls in flight. With
  // calls already waiting for replies (many hits in flight), holds the writes until the end of
  // this event-loop iteration, or until 16 per socket are held (WriteHold): one syscall (and one
  // read in Redis) for many calls the iteration's I/O callbacks set off (a batch of replies, or
  // the requests of many HTTP connections), instead of one each. A lone call is written at once.
  // On a cluster client, every master's connection is held the same way.
  private send<T>(script: LuaScript, numKeys: number, keysAndArgs: string[], read: (reply: unknown) => T): Promise<T> {
    if (this.inFlight > 0) this.writes.hold()
    this.inFlight++
    const reply = evalScript(
      this.client,
      script,
      numKeys,
      keysAndArgs,
      (reply) => {
        this.inFlight--
        return read(reply)
      },
      (err) => {
        this.inFlight--
        throw this.storeError(err)
      },
    )
    this.writes.written()
    return reply
  }

  // The totals of a PUSH reply: the nonce, then per key-window its total and own count.
  private replyParts(reply: unknown, nonce: string, count: number): string[] {
    return replyParts(reply, nonce, 1 + 2 * count) ?? this.desync('pushDiffs', reply)
  }

  private fillRows(
    reply: unknown,
    nonce: string,
    count: number,
    refs: readonly RowRef[],
    rowIndex: readonly number[],
    rows: CounterRow[],
  ): void {
    const parts = this.replyParts(reply, nonce, count)
    for (let i = 0; i < count; i++) {
      const ref = refs[i] as RowRef
      rows[rowIndex[i] as number] = {
        key: ref.key,
        windowStartMs: ref.windowStartMs,
        windowSizeMs: ref.windowSizeMs,
        count: Number(parts[1 + 2 * i]),
        own: Number(parts[2 + 2 * i]),
      }
    }
  }

  private run(script: LuaScript, keys: readonly string[], args: readonly string[]): Promise<unknown> {
    return evalScript(this.client, script, keys.length, [...keys, ...args], (reply) => reply)
  }

  private async masters(): Promise<readonly RedisNodeAdapter[]> {
    const client = this.client
    let masters = await client.scanNodes()
    if (masters.length === 0 && client.cluster) {
      // a cluster client learns its masters on connecting: one round trip makes it connect
      const nonce = this.nonce()
      const reply = await this.run(RESET, [], [nonce])
      if (reply !== nonce) this.desync('cluster ping', reply)
      masters = await client.scanNodes()
    }
    if (masters.length === 0) throw new StoreError('STORE_UNAVAILABLE', this.name, 'the cluster client knows no master node')
    return masters
  }

  // A reply that is not the one asked for: replies on this connection are no longer matched to
  // their commands (some were lost). Only a new connection fixes that, so reconnect the client;
  // the pushes are idempotent, so commands ioredis resends after reconnecting are harmless.
  private desync(what: string, reply: unknown): never {
    this.client.reconnect?.()
    const shape = Array.isArray(reply)
      ? `an array of ${reply.length}`
      : typeof reply === 'string'
        ? `"${reply.slice(0, 40)}"`
        : typeof reply
    throw new StoreError('STORE_REPLY_LOST', this.name, `${what}: the reply belongs to another command (got ${shape}); reconnecting`)
  }

  private storeError(err: unknown): StoreError {
    return redisError(err, this.name)
  }
}
