import { ConfigError, StoreError } from '../../core/errors.js'
import {
  type CounterRow,
  currentAndPrevious,
  type DiffBatch,
  type Strategy,
  type WindowRef,
  windowExpiresAtMs,
} from '../../core/strategy.js'
import { BUILT_IN_STORES } from '../capabilities.js'
import { MemcachedClient, type MetaCommand, type MetaReply } from './client.js'
import { BatchBlocks } from './blocks.js'
import { casOf, describe, KeyIndex } from './key-index.js'
import { compactLog, exptime, indexEntry, KeySpace, logEntry, logTotal, nodeTag, type ParsedLog, parseLog } from './keys.js'

/** Options of {@link MemcachedStrategy}. Give `servers` or `client`. */
export interface MemcachedStrategyOptions {
  /** `host:port` of each memcached (1.6 or later: the strategy speaks the meta protocol). */
  readonly servers?: readonly string[]
  /** A {@link MemcachedClient} you own (shared between strategies); never closed by the strategy. */
  readonly client?: MemcachedClient
  /** Prefix of every key: printable ASCII without spaces, at most 64 characters. @default "rl:" */
  readonly prefix?: string
  /** How long a window outlives the two windows a rate can read, ms. @default 10_000 */
  readonly graceMs?: number
  /** Longest wait for the replies of one call, ms (with `servers`). @default 1000 */
  readonly timeoutMs?: number
  /** Shards of a window's key index (read by `getCounters`); each holds up to 1 MB of keys. @default 16 */
  readonly indexShards?: number
  /** A window log is compacted once it holds this many entries more than it has nodes. @default 32 */
  readonly compactAfter?: number
  /** Called with failures of background work (index appends, compaction); the strategy never prints. */
  readonly onError?: (error: Error) => void
}

// Item writes: `add` then `append` of the same entry, pipelined. Whatever the item's state, at
// least one of the two stores the entry (both do on a miss: a duplicate entry is harmless).
// Only when the item vanishes between them (expiry, eviction) do both fail: retried.
const MAX_WRITE_ATTEMPTS = 3
const MAX_RESET_ATTEMPTS = 10
const READ_PAGE = 512

interface Pending {
  /** The window log's key. */
  readonly item: string
  /** The index shard that lists the key-window. */
  readonly index: string
  readonly entry: string
  readonly indexEntry: string
  readonly ttl: number
  /** Whether this push carries the index append too. */
  readonly withIndex: boolean
}

function isWritten(reply: MetaReply | undefined): boolean {
  return reply?.code === 'HD'
}

/**
 * A central store in memcached. memcached has no hashes and no scripts, so each key-window is one
 * item holding an append-only log of `node,seq,count;` entries: a push appends this node's
 * cumulative count under the batch's seq, and a reader keeps each node's newest entry and sums
 * them. Appends commute and repeat harmlessly, so a retried, duplicated or reordered push never
 * counts twice, and a lost one is carried by the next. A push is one pipelined round trip per
 * server (the writes and the read-back travel together). Logs are compacted with CAS when they
 * grow. Decimal values are refused (counts are kept as integers). Blocks are one item per key,
 * written and read in the same pipeline (./blocks.ts).
 *
 * @example
 * const store = new MemcachedStrategy({ servers: ['127.0.0.1:11211'] })
 * rl.new({ namespace: 'api', windowSizesMs: [60], syncRate: 0.1, strategy: store })
 */
export class MemcachedStrategy implements Strategy {
  readonly name = 'memcached'
  readonly supportsDecimals = BUILT_IN_STORES.memcached.supportsDecimals
  readonly supportsBlocks = BUILT_IN_STORES.memcached.supportsBlocks
  readonly client: MemcachedClient
  readonly keys: KeySpace
  private readonly ownsClient: boolean
  private readonly graceMs: number
  private readonly compactAfter: number
  private readonly onError: ((error: Error) => void) | undefined
  /** Key-windows this strategy has added to an index, by window, until the window expires. */
  private readonly index: KeyIndex
  private readonly compacting = new Set<string>()
  private readonly background = new Set<Promise<unknown>>()
  private closed = false

  constructor(options: MemcachedStrategyOptions) {
    if (typeof options !== 'object' || options === null) throw new ConfigError('INVALID_OPTION', 'memcached: options must be an object')
    const { servers, client } = options
    if ((servers === undefined) === (client === undefined))
      throw new ConfigError('INVALID_OPTION', 'memcached: give exactly one of servers (["host:port"]) or client (a MemcachedClient)')
    if (client !== undefined) {
      if (!(client instanceof MemcachedClient)) throw new ConfigError('INVALID_OPTION', 'memcached: client must be a MemcachedClient')
      this.client = client
      this.ownsClient = false
    } else {
      this.client = new MemcachedClient({
        servers: servers as readonly string[],
        ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
      })
      this.ownsClient = true
    }
    const prefix = options.prefix ?? 'rl:'
    if (typeof prefix !== 'string' || !/^[\x21-\x7e]{0,64}$/.test(prefix))
      throw new ConfigError(
        'INVALID_OPTION',
        `memcached: prefix must be printable ASCII without spaces, at most 64 characters, got ${JSON.stringify(prefix)}`,
      )
    this.keys = new KeySpace(prefix)
    const graceMs = options.graceMs ?? 10_000
    if (typeof graceMs !== 'number' || !Number.isFinite(graceMs) || graceMs < 0)
      throw new ConfigError('INVALID_OPTION', `memcached: graceMs must be a finite number >= 0, got ${String(options.graceMs)}`)
    this.graceMs = graceMs
    const indexShards = options.indexShards ?? 16
    if (typeof indexShards !== 'number' || !Number.isInteger(indexShards) || indexShards < 1 || indexShards > 1024)
      throw new ConfigError(
        'INVALID_OPTION',
        `memcached: indexShards must be an integer from 1 to 1024, got ${String(options.indexShards)}`,
      )
    this.index = new KeyIndex(this.client, this.keys, indexShards)
    const compactAfter = options.compactAfter ?? 32
    if (typeof compactAfter !== 'number' || !Number.isInteger(compactAfter) || compactAfter < 1)
      throw new ConfigError('INVALID_OPTION', `memcached: compactAfter must be a positive integer, got ${String(options.compactAfter)}`)
    this.compactAfter = compactAfter
    if (options.onError !== undefined && typeof options.onError !== 'function')
      throw new ConfigError('INVALID_OPTION', 'memcached: onError must be a function')
    this.onError = options.onError
  }

  async pushDiffs(batch: DiffBatch): Promise<CounterRow[]> {
    if (this.closed) throw new StoreError('STORE_UNAVAILABLE', this.name, 'strategy is closed')
    for (const w of batch.windows) {
      if (!Number.isSafeInteger(w.count))
        throw new StoreError(
          'STORE_ERROR',
          this.name,
          `count ${w.count} of key ${JSON.stringify(w.key)} is not an integer: the memcached strategy holds whole counts only (supportsDecimals is false)`,
        )
    }
    this.index.prune(batch.nowMs)
    // one entry per key-window: two entries of one seq would leave the log's answer to chance
    let windows = batch.windows
    if (windows.length > 1) {
      const unique = new Map<string, DiffBatch['windows'][number]>()
      for (const w of windows) unique.set(`${w.windowSizeMs}\u0000${w.windowStartMs}\u0000${w.key}`, w)
      if (unique.size < windows.length) windows = [...unique.values()]
    }
    const tag = nodeTag(batch.nodeId)
    // Blocks ride in the same pipeline: their writes ahead of every row's command, their reads
    // after. Without blocks and readBlocks, the pipeline is the same as before blocks existed.
    const blocks =
      (batch.blocks !== undefined && batch.blocks.length > 0) || batch.readBlocks === true
        ? new BatchBlocks(this.client, this.keys, batch, this.graceMs, rowKeys(windows, batch.refresh))
        : undefined
    const commands: MetaCommand[] = blocks === undefined ? [] : [...blocks.writes]
    const pending: Pending[] = []
    for (const w of windows) {
      const item = this.keys.window(batch.namespace, w.key, w.windowSizeMs, w.windowStartMs)
      const expiresAtMs = windowExpiresAtMs(w.windowStartMs, w.windowSizeMs, this.graceMs)
      const p: Pending = {
        item,
        index: this.index.shardOf(batch.namespace, w.key, w.windowSizeMs, w.windowStartMs),
        entry: logEntry(tag, batch.seq, w.count),
        indexEntry: indexEntry(w.key),
        ttl: exptime(expiresAtMs, batch.nowMs),
        withIndex: this.index.mark(batch.namespace, w.key, w.windowSizeMs, w.windowStartMs, expiresAtMs),
      }
      pending.push(p)
      this.writeCommands(commands, p.item, p.entry, p.ttl)
      if (p.withIndex) this.writeCommands(commands, p.index, p.indexEntry, p.ttl)
    }
    const reads: Array<{ ref: WindowRef; item: string }> = pending.map((p, i) => ({ ref: windows[i] as WindowRef, item: p.item }))
    for (const r of batch.refresh)
      reads.push({
        ref: r,
        item: this.keys.window(batch.namespace, r.key, r.windowSizeMs, r.windowStartMs),
      })
    for (const r of reads) commands.push({ key: r.item, line: `mg ${r.item} v c` })
    if (blocks !== undefined) for (const c of blocks.reads) commands.push(c)

    // one round trip per server: the block writes, the writes, then the read-back of every window
    const replies = await this.client.exec(commands)
    let at = blocks?.writes.length ?? 0
    let failed: number[] = []
    for (const [i, p] of pending.entries()) {
      this.checkWrite(replies[at], replies[at + 1])
      if (!isWritten(replies[at]) && !isWritten(replies[at + 1])) failed.push(i)
      at += 2
      if (p.withIndex) {
        // the index serves getCounters only: a refused append (a full shard) does not fail the push
        const refused = [replies[at], replies[at + 1]].find((r) => r?.code === 'ERROR')
        if (refused !== undefined) this.report(new StoreError('STORE_ERROR', this.name, `index append refused: ${describe(refused)}`))
        at += 2
      }
    }
    const readReplies = replies.slice(at, at + reads.length)
    if (blocks !== undefined) await blocks.settle(replies.slice(0, blocks.writes.length), replies.slice(at + reads.length))
    for (let attempt = 1; failed.length > 0; attempt++) {
      if (attempt >= MAX_WRITE_ATTEMPTS)
        throw new StoreError(
          'STORE_ERROR',
          this.name,
          `${failed.length} window logs vanished while being written, ${MAX_WRITE_ATTEMPTS} times in a row`,
        )
      const retry: MetaCommand[] = []
      const writes = failed.map((i) => pending[i] as Pending)
      for (const p of writes) this.writeCommands(retry, p.item, p.entry, p.ttl)
      for (const p of writes) retry.push({ key: p.item, line: `mg ${p.item} v c` })
      const again = await this.client.exec(retry)
      const next: number[] = []
      for (const [j, i] of failed.entries()) {
        if (!isWritten(again[2 * j]) && !isWritten(again[2 * j + 1])) next.push(i)
        else readReplies[i] = again[2 * failed.length + j] as MetaReply // the fresh read-back
      }
      failed = next
    }

    const rows: CounterRow[] = []
    const reindex: MetaCommand[] = []
    for (const [i, r] of reads.entries()) {
      const reply = readReplies[i]
      const log = this.readLog(reply)
      const row = this.row(r.ref, log, tag)
      const written = i < windows.length ? (windows[i] as DiffBatch['windows'][number]) : undefined
      // a write is answered in its place in the node's sequence, even when a newer entry of this
      // node is in the log already (the same as the newest when it is the newest)
      rows.push(written === undefined ? row : { ...row, count: row.count - row.own + written.count, own: written.count })
      if (log === undefined || reply === undefined) continue
      const p = pending[i]
      // A log without an older entry of ours was (re)created by this push: after a restart or an
      // eviction its index entry is gone too, so it is added again.
      if (p !== undefined && !p.withIndex && !hasOlderEntry(log.raw, tag, batch.seq))
        this.writeCommands(reindex, p.index, p.indexEntry, p.ttl)
      this.maybeCompact(r.item, log.parsed, reply, r.ref, batch.nowMs)
    }
    if (reindex.length > 0) await this.client.exec(reindex).catch((err: unknown) => this.report(err))
    if (blocks !== undefined && batch.readBlocks === true)
      return rows.map((row) => ({ ...row, blockedUntilMs: blocks.blockedUntilMs(row.key) }))
    return rows
  }

  async *getCounters(namespace: string, windowSizesMs: readonly number[], nowMs: number, nodeId = ''): AsyncIterable<CounterRow> {
    const tag = nodeTag(nodeId)
    for (const { windowSizeMs: size, windowStartMs } of currentAndPrevious(nowMs, windowSizesMs)) {
      const keys = await this.index.keysOf(namespace, size, windowStartMs)
      for (let i = 0; i < keys.length; i += READ_PAGE) {
        const page = keys.slice(i, i + READ_PAGE)
        const items = page.map((k) => this.keys.window(namespace, k, size, windowStartMs))
        const replies = await this.client.exec(items.map((item) => ({ key: item, line: `mg ${item} v` })))
        for (const [j, key] of page.entries()) {
          const log = this.readLog(replies[j])
          if (log !== undefined) yield this.row({ key, windowStartMs, windowSizeMs: size }, log, tag)
        }
      }
    }
  }

  async getWindow(key: string, namespace: string, windowStartMs: number, windowSizeMs: number, nodeId = ''): Promise<CounterRow> {
    const item = this.keys.window(namespace, key, windowSizeMs, windowStartMs)
    const [reply] = await this.client.exec([{ key: item, line: `mg ${item} v` }])
    return this.row({ key, windowStartMs, windowSizeMs }, this.readLog(reply), nodeTag(nodeId))
  }

  /**
   * Rewrites each window's log with CAS: the entries compacted and an offset of minus their sum,
   * so the total reads zero. A concurrent append makes the CAS fail and the reset is redone.
   */
  async resetKey(namespace: string, key: string, windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    for (const { windowSizeMs: size, windowStartMs } of currentAndPrevious(nowMs, windowSizesMs)) {
      const item = this.keys.window(namespace, key, size, windowStartMs)
      const ttl = exptime(windowExpiresAtMs(windowStartMs, size, this.graceMs), nowMs)
      for (let attempt = 0; ; attempt++) {
        if (attempt >= MAX_RESET_ATTEMPTS)
          throw new StoreError('STORE_ERROR', this.name, `reset of ${JSON.stringify(key)} lost ${MAX_RESET_ATTEMPTS} CAS races in a row`)
        const [reply] = await this.client.exec([{ key: item, line: `mg ${item} v c` }])
        const log = this.readLog(reply)
        const cas = casOf(reply)
        if (log === undefined || cas === undefined) break
        let nodes = 0
        for (const e of log.parsed.nodes.values()) nodes += e.count
        const data = compactLog(log.parsed, -nodes)
        const [stored] = await this.client.exec([
          {
            key: item,
            line: `ms ${item} ${data.length} C${cas} T${ttl}`,
            data,
          },
        ])
        if (stored?.code === 'HD' || stored?.code === 'NF') break
        if (stored?.code !== 'EX') throw new StoreError('STORE_ERROR', this.name, `reset of ${JSON.stringify(key)}: ${describe(stored)}`)
      }
    }
  }

  async close(): Promise<void> {
    if (this.closed) return
    this.closed = true
    await Promise.allSettled([...this.background])
    if (this.ownsClient) this.client.close()
  }

  private writeCommands(out: MetaCommand[], key: string, data: string, ttl: number): void {
    out.push({ key, line: `ms ${key} ${data.length} ME T${ttl}`, data }, { key, line: `ms ${key} ${data.length} MA`, data })
  }

  private checkWrite(add: MetaReply | undefined, append: MetaReply | undefined): void {
    for (const reply of [add, append]) {
      if (reply?.code === 'ERROR') throw new StoreError('STORE_ERROR', this.name, `write refused: ${describe(reply)}`)
    }
  }

  private readLog(reply: MetaReply | undefined): { parsed: ParsedLog; raw: string } | undefined {
    if (reply === undefined || reply.code === 'EN') return undefined
    if (reply.code !== 'VA' || reply.value === undefined) throw new StoreError('STORE_ERROR', this.name, `read failed: ${describe(reply)}`)
    const raw = reply.value.toString('latin1')
    return { parsed: parseLog(raw), raw }
  }

  private row(ref: WindowRef, log: { parsed: ParsedLog } | undefined, tag: string): CounterRow {
    if (log === undefined)
      return {
        key: ref.key,
        windowStartMs: ref.windowStartMs,
        windowSizeMs: ref.windowSizeMs,
        count: 0,
        own: 0,
      }
    return {
      key: ref.key,
      windowStartMs: ref.windowStartMs,
      windowSizeMs: ref.windowSizeMs,
      count: logTotal(log.parsed),
      own: log.parsed.nodes.get(tag)?.count ?? 0,
    }
  }

  /** Rewrites a long log to one entry per node, with CAS so no concurrent append is lost. */
  private maybeCompact(item: string, log: ParsedLog, reply: MetaReply, ref: WindowRef, nowMs: number): void {
    if (log.entries <= log.nodes.size + 1 + this.compactAfter || this.compacting.has(item) || this.closed) return
    const cas = casOf(reply)
    if (cas === undefined) return
    this.compacting.add(item)
    const data = compactLog(log)
    const ttl = exptime(windowExpiresAtMs(ref.windowStartMs, ref.windowSizeMs, this.graceMs), nowMs)
    const run = this.client
      .exec([{ key: item, line: `ms ${item} ${data.length} C${cas} T${ttl}`, data }])
      .then(
        () => undefined, // EX: someone appended meanwhile; a later read compacts
        (err: unknown) => this.report(err),
      )
      .finally(() => {
        this.compacting.delete(item)
        this.background.delete(run)
      })
    this.background.add(run)
  }

  private report(err: unknown): void {
    this.onError?.(err instanceof Error ? err : new Error(String(err)))
  }
}

/** The keys of a batch's rows, in order: the windows written, then those refreshed. */
function rowKeys(windows: readonly WindowRef[], refresh: readonly WindowRef[]): string[] {
  const keys: string[] = []
  for (const w of windows) keys.push(w.key)
  for (const r of refresh) keys.push(r.key)
  return keys
}

function hasOlderEntry(raw: string, tag: string, seq: number): boolean {
  const mark = `${tag},`
  let from = 0
  for (;;) {
    const at = raw.indexOf(mark, from)
    if (at < 0) return false
    if (at === 0 || raw.charCodeAt(at - 1) === 59 /* ; */) {
      const end = raw.indexOf(',', at + mark.length)
      if (Number(raw.slice(at + mark.length, end)) !== seq) return true
    }
    from = at + mark.length
  }
}
