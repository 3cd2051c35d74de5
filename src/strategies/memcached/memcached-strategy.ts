import { ConfigError, StoreError } from '../../core/errors.js'
import { type CounterRow, type DiffBatch, type Strategy, type WindowRef, windowExpiresAtMs } from '../../core/strategy.js'
import { windowStartSec } from '../../core/window.js'
import { MemcachedClient, type MetaCommand, type MetaReply } from './client.js'
import { compactLog, exptime, KeySpace, logEntry, logTotal, nodeTag, type ParsedLog, parseLog } from './keys.js'

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
// Only when the item vanishes between them (expiry, eviction, a purge) do both fail: retried.
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
 * grow. Decimal values are refused (counts are kept as integers).
 *
 * @example
 * const store = new MemcachedStrategy({ servers: ['127.0.0.1:11211'] })
 * rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0.1, strategy: store })
 */
export class MemcachedStrategy implements Strategy {
  readonly name = 'memcached'
  readonly supportsDecimals = false
  readonly client: MemcachedClient
  readonly keys: KeySpace
  private readonly ownsClient: boolean
  private readonly graceMs: number
  private readonly indexShards: number
  private readonly compactAfter: number
  private readonly onError: ((error: Error) => void) | undefined
  /** Key-windows this strategy has added to an index, by window, until the window expires. */
  private readonly indexed = new Map<string, { expiresAtMs: number; keys: Set<string> }>()
  /** Window starts written per namespace and size, for `purge`, until they expire. */
  private readonly starts = new Map<string, Map<number, Set<number>>>()
  private readonly compacting = new Set<string>()
  private readonly background = new Set<Promise<unknown>>()
  private nextPruneMs = 0
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
    this.indexShards = indexShards
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
    this.prune(batch.nowMs)
    // one entry per key-window: two entries of one seq would leave the log's answer to chance
    let windows = batch.windows
    if (windows.length > 1) {
      const unique = new Map<string, DiffBatch['windows'][number]>()
      for (const w of windows) unique.set(`${w.windowSize}\u0000${w.windowStart}\u0000${w.key}`, w)
      if (unique.size < windows.length) windows = [...unique.values()]
    }
    const tag = nodeTag(batch.nodeId)
    const commands: MetaCommand[] = []
    const pending: Pending[] = []
    for (const w of windows) {
      const item = this.keys.window(batch.namespace, w.key, w.windowSize, w.windowStart)
      const expiresAtMs = windowExpiresAtMs(w.windowStart, w.windowSize, this.graceMs)
      const p: Pending = {
        item,
        index: this.indexKey(batch.namespace, w.key, w.windowSize, w.windowStart),
        entry: logEntry(tag, batch.seq, w.count),
        indexEntry: `k${Buffer.from(w.key, 'utf8').toString('base64url')} `,
        ttl: exptime(expiresAtMs, batch.nowMs),
        withIndex: this.markIndexed(batch.namespace, w.key, w.windowSize, w.windowStart, expiresAtMs),
      }
      pending.push(p)
      this.writeCommands(commands, p.item, p.entry, p.ttl)
      if (p.withIndex) this.writeCommands(commands, p.index, p.indexEntry, p.ttl)
      this.rememberStart(batch.namespace, w.windowSize, w.windowStart)
    }
    const reads: Array<{ ref: WindowRef; item: string }> = pending.map((p, i) => ({ ref: windows[i] as WindowRef, item: p.item }))
    for (const r of batch.refresh)
      reads.push({
        ref: r,
        item: this.keys.window(batch.namespace, r.key, r.windowSize, r.windowStart),
      })
    for (const r of reads) commands.push({ key: r.item, line: `mg ${r.item} v c` })

    // one round trip per server: the writes, then the read-back of every window
    const replies = await this.client.exec(commands)
    let at = 0
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
    const readReplies = replies.slice(at)
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
      rows.push(this.row(r.ref, log, tag))
      if (log === undefined || reply === undefined) continue
      const p = pending[i]
      // A log without an older entry of ours was (re)created by this push: after a restart or an
      // eviction its index entry is gone too, so it is added again.
      if (p !== undefined && !p.withIndex && !hasOlderEntry(log.raw, tag, batch.seq))
        this.writeCommands(reindex, p.index, p.indexEntry, p.ttl)
      this.maybeCompact(r.item, log.parsed, reply, r.ref, batch.nowMs)
    }
    if (reindex.length > 0) await this.client.exec(reindex).catch((err: unknown) => this.report(err))
    return rows
  }

  async *getCounters(namespace: string, windowSizes: readonly number[], timeSec: number, nodeId = ''): AsyncIterable<CounterRow> {
    const tag = nodeTag(nodeId)
    for (const size of windowSizes) {
      const start = windowStartSec(timeSec * 1000, size)
      for (const windowStart of [start, start - size]) {
        const keys = await this.indexedKeys(namespace, size, windowStart)
        for (let i = 0; i < keys.length; i += READ_PAGE) {
          const page = keys.slice(i, i + READ_PAGE)
          const items = page.map((k) => this.keys.window(namespace, k, size, windowStart))
          const replies = await this.client.exec(items.map((item) => ({ key: item, line: `mg ${item} v` })))
          for (const [j, key] of page.entries()) {
            const log = this.readLog(replies[j])
            if (log !== undefined) yield this.row({ key, windowStart, windowSize: size }, log, tag)
          }
        }
      }
    }
  }

  async getWindow(key: string, namespace: string, windowStart: number, windowSize: number, nodeId = ''): Promise<CounterRow> {
    const item = this.keys.window(namespace, key, windowSize, windowStart)
    const [reply] = await this.client.exec([{ key: item, line: `mg ${item} v` }])
    return this.row({ key, windowStart, windowSize }, this.readLog(reply), nodeTag(nodeId))
  }

  /**
   * Rewrites each window's log with CAS: the entries compacted and an offset of minus their sum,
   * so the total reads zero. A concurrent append makes the CAS fail and the reset is redone.
   */
  async resetKey(namespace: string, key: string, windowSizes: readonly number[], nowMs: number): Promise<void> {
    for (const size of windowSizes) {
      const start = windowStartSec(nowMs, size)
      for (const windowStart of [start, start - size]) {
        const item = this.keys.window(namespace, key, size, windowStart)
        const ttl = exptime(windowExpiresAtMs(windowStart, size, this.graceMs), nowMs)
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
  }

  /**
   * memcached drops windows by their TTL (set on creation to the window's end plus the next
   * window and `graceMs`). `purge` deletes at once the windows this strategy knows of (written
   * through it, or around the present) that have expired at `nowMs`, with their index.
   */
  async purge(namespace: string, windowSizes: readonly number[], nowMs: number): Promise<void> {
    const realNowMs = Date.now()
    for (const size of windowSizes) {
      const candidates = new Set(this.starts.get(namespace)?.get(size) ?? [])
      const current = windowStartSec(realNowMs, size)
      for (let k = -1; k <= 2; k++) candidates.add(current - k * size)
      for (const windowStart of candidates) {
        if (windowExpiresAtMs(windowStart, size, this.graceMs) > nowMs) continue
        const keys = await this.indexedKeys(namespace, size, windowStart)
        const deletes: MetaCommand[] = []
        for (const key of keys) {
          const item = this.keys.window(namespace, key, size, windowStart)
          deletes.push({ key: item, line: `md ${item}` })
        }
        for (let shard = 0; shard < this.indexShards; shard++) {
          const index = this.keys.index(namespace, size, windowStart, shard)
          deletes.push({ key: index, line: `md ${index}` })
        }
        for (let i = 0; i < deletes.length; i += READ_PAGE) await this.client.exec(deletes.slice(i, i + READ_PAGE))
        this.starts.get(namespace)?.get(size)?.delete(windowStart)
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

  private indexKey(namespace: string, key: string, windowSize: number, windowStart: number): string {
    let h = 0
    for (let i = 0; i < key.length; i++) h = (Math.imul(h, 31) + key.charCodeAt(i)) | 0
    return this.keys.index(namespace, windowSize, windowStart, (h >>> 0) % this.indexShards)
  }

  /** True (and remembers it) when this strategy has not yet put the key-window in its index. */
  private markIndexed(namespace: string, key: string, windowSize: number, windowStart: number, expiresAtMs: number): boolean {
    const id = `${namespace}\u0000${windowSize}\u0000${windowStart}`
    let w = this.indexed.get(id)
    if (w === undefined) {
      w = { expiresAtMs, keys: new Set() }
      this.indexed.set(id, w)
    }
    if (w.keys.has(key)) return false
    w.keys.add(key)
    return true
  }

  private rememberStart(namespace: string, windowSize: number, windowStart: number): void {
    let bySize = this.starts.get(namespace)
    if (bySize === undefined) {
      bySize = new Map()
      this.starts.set(namespace, bySize)
    }
    let set = bySize.get(windowSize)
    if (set === undefined) {
      set = new Set()
      bySize.set(windowSize, set)
    }
    set.add(windowStart)
  }

  // Forgets windows that have expired, at most once a second of engine time: the local index
  // memory and the purge candidates stay bounded without a timer.
  private prune(nowMs: number): void {
    if (nowMs < this.nextPruneMs) return
    this.nextPruneMs = nowMs + 1000
    for (const [id, w] of this.indexed) if (w.expiresAtMs <= nowMs) this.indexed.delete(id)
    for (const bySize of this.starts.values()) {
      for (const [size, set] of bySize) {
        for (const start of set) if (windowExpiresAtMs(start, size, this.graceMs) <= nowMs) set.delete(start)
      }
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
        windowStart: ref.windowStart,
        windowSize: ref.windowSize,
        count: 0,
        own: 0,
      }
    return {
      key: ref.key,
      windowStart: ref.windowStart,
      windowSize: ref.windowSize,
      count: logTotal(log.parsed),
      own: log.parsed.nodes.get(tag)?.count ?? 0,
    }
  }

  private async indexedKeys(namespace: string, windowSize: number, windowStart: number): Promise<string[]> {
    const commands: MetaCommand[] = []
    for (let shard = 0; shard < this.indexShards; shard++) {
      const index = this.keys.index(namespace, windowSize, windowStart, shard)
      commands.push({ key: index, line: `mg ${index} v` })
    }
    const replies = await this.client.exec(commands)
    const keys = new Set<string>()
    for (const reply of replies) {
      if (reply.code === 'EN') continue
      if (reply.code !== 'VA' || reply.value === undefined)
        throw new StoreError('STORE_ERROR', this.name, `index read failed: ${describe(reply)}`)
      // entries are `k<base64url of the key> `; the k keeps the empty key apart from the separators
      for (const entry of reply.value.toString('latin1').split(' ')) {
        if (entry.startsWith('k')) keys.add(Buffer.from(entry.slice(1), 'base64url').toString('utf8'))
      }
    }
    return [...keys]
  }

  /** Rewrites a long log to one entry per node, with CAS so no concurrent append is lost. */
  private maybeCompact(item: string, log: ParsedLog, reply: MetaReply, ref: WindowRef, nowMs: number): void {
    if (log.entries <= log.nodes.size + 1 + this.compactAfter || this.compacting.has(item) || this.closed) return
    const cas = casOf(reply)
    if (cas === undefined) return
    this.compacting.add(item)
    const data = compactLog(log)
    const ttl = exptime(windowExpiresAtMs(ref.windowStart, ref.windowSize, this.graceMs), nowMs)
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

function casOf(reply: MetaReply | undefined): string | undefined {
  const flag = reply?.flags.find((f) => f.startsWith('c'))
  return flag === undefined ? undefined : flag.slice(1)
}

function describe(reply: MetaReply | undefined): string {
  if (reply === undefined) return 'no reply'
  return reply.code === 'ERROR' ? reply.flags.join(' ') : `${reply.code} ${reply.flags.join(' ')}`.trim()
}
