import { randomBytes } from 'node:crypto'
import { Redis } from 'ioredis'
import { ConfigError, StoreError } from '../../core/errors.js'
import { type CounterRow, type DiffBatch, type Strategy, type WindowPush, type WindowRef, windowExpiresAtMs } from '../../core/strategy.js'
import { windowStartSec } from '../../core/window.js'
import { CallPlan, type RowRef, type ScriptCall } from './call-plan.js'
import { encodeKey, namespaceHead, namespacePattern, type ParsedName, parseWindowName, windowName } from './key-names.js'
import { keySlot } from './key-slot.js'
import { type LuaScript, PUSH, RESET } from './lua.js'

/**
 * The commands the strategy sends on one connection. An ioredis `Redis` has them; so does each
 * master of an ioredis `Cluster`. Bring any client that does (a small adapter is enough).
 */
export interface RedisCommands {
  evalsha(sha: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>
  eval(script: string, numKeys: number, ...keysAndArgs: string[]): Promise<unknown>
  scan(cursor: string, matchToken: 'MATCH', pattern: string, countToken: 'COUNT', count: number): Promise<[string, string[]]>
  unlink(...keys: string[]): Promise<number>
}

/**
 * What the strategy needs from a client: an ioredis `Redis` or `Cluster` fits as it is.
 * A cluster client is recognised by its `nodes('master')` method (SCAN runs on every master).
 */
export interface RedisClientLike extends RedisCommands {
  /** Closes the connection; called by `close()` only on a client the strategy created from `url`. */
  quit(): Promise<unknown>
  /** Called with `true` to reconnect when replies arrive out of order (see docs/STORES-redis.md). */
  disconnect?(reconnect?: boolean): void
  /** The connection state; `close()` sends QUIT only when it is "ready". */
  readonly status?: string
  /** A cluster client's master connections. */
  nodes?(role: 'master'): RedisCommands[]
}

/** Options of {@link RedisStrategy}: give `client` or `url`, not both. */
export interface RedisStrategyOptions {
  /** An ioredis `Redis` or `Cluster` you own; the strategy never closes it. */
  readonly client?: RedisClientLike
  /**
   * A `redis://` or `rediss://` URL: the strategy creates an ioredis `Redis` and closes it on
   * `close()`. For a Redis Cluster pass `client: new Cluster([...])`.
   */
  readonly url?: string
  /** First part of every key name; no braces (they would break the hash tag). @default "rl" */
  readonly prefix?: string
  /** How long a window outlives the two windows a rate can read, ms (covers clock skew). @default 10_000 */
  readonly graceMs?: number
  /** COUNT hint of each SCAN step in `getCounters` and `purge`. @default 1000 */
  readonly scanCount?: number
  /**
   * For a single, unsharded Redis server only: send a sync as script calls of up to 512
   * key-windows whatever their hash slots, instead of one call per slot. Fewer commands per sync
   * (2 instead of about 1,000 for 1,000 keys); refused with a cluster client, and a sharding
   * proxy (Redis Enterprise, Envoy, serverless offerings) would answer CROSSSLOT.
   * @default false
   */
  readonly batchAcrossSlots?: boolean
}

// Most key-windows in one script call when batching across slots: bounds the time one call holds Redis.
const CHUNK_SIZE = 512

function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT')
}

function isPositiveInteger(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value > 0
}

/**
 * The Redis store, for a single node or a Redis Cluster, over ioredis.
 *
 * One HASH per key-window, `<prefix>:{<namespace>:<key>}:<size>:<start>`, holding each node's
 * cumulative count and seq, and the running total. A push is one Lua script call (by SHA) per
 * hash slot of the batch, all sent at once; it writes a node's count only when the batch's seq
 * is newer than the one held, so a retried or reordered push never counts twice. Every write
 * sets an absolute expiry that covers the previous window plus `graceMs`. Synchronous mode costs
 * one script call per hit. docs/STORES-redis.md has the long form.
 *
 * @example
 * import { Redis } from 'ioredis'
 * import { RedisStrategy } from 'ratelimiting/redis'
 * const strategy = new RedisStrategy({ client: new Redis() })
 * rl.new({ namespace: 'api', windowSizes: [60], syncRate: 0.1, strategy })
 */
export class RedisStrategy implements Strategy {
  readonly name = 'redis'
  // counts are stored as the shortest decimal that round-trips (String(n)), totals as doubles
  readonly supportsDecimals = true
  /** First part of every key name. */
  readonly prefix: string
  /** Extra lifetime of a stored window after the two windows a rate can read, ms. */
  readonly graceMs: number
  private readonly client: RedisClientLike
  private readonly ownsClient: boolean
  private readonly scanCount: number
  private readonly chunkSize: number
  private readonly heads = new Map<string, string>()
  // Echoed by every script: a reply carrying another call's nonce means the connection lost
  // track of which reply is whose (replies were dropped); see desync().
  private readonly nonceBase = `${randomBytes(6).toString('base64url')}:`
  private nonceSeq = 0
  // Script calls sent and not answered yet, and whether the socket is corked until the next tick.
  private inFlight = 0
  private corked = false

  constructor(options: RedisStrategyOptions) {
    if (typeof options !== 'object' || options === null) throw new ConfigError('INVALID_OPTION', 'redis: options must be an object')
    const { client, url, prefix = 'rl', graceMs = 10_000, scanCount = 1000, batchAcrossSlots = false } = options
    if (client !== undefined && url !== undefined) throw new ConfigError('INVALID_OPTION', 'redis: give either client or url, not both')
    if (typeof prefix !== 'string' || prefix.length === 0 || /[{}]/.test(prefix))
      throw new ConfigError('INVALID_OPTION', `redis: prefix must be a non-empty string without braces, got ${JSON.stringify(prefix)}`)
    if (typeof graceMs !== 'number' || !Number.isFinite(graceMs) || graceMs < 0)
      throw new ConfigError('INVALID_OPTION', `redis: graceMs must be a finite number >= 0, got ${String(graceMs)}`)
    if (!isPositiveInteger(scanCount))
      throw new ConfigError('INVALID_OPTION', `redis: scanCount must be a positive integer, got ${String(scanCount)}`)
    if (client !== undefined) {
      if (typeof client !== 'object' || client === null || typeof client.evalsha !== 'function' || typeof client.scan !== 'function')
        throw new ConfigError(
          'INVALID_OPTION',
          'redis: client must be an ioredis Redis or Cluster (an object with evalsha, eval, scan, unlink)',
        )
      const keyPrefix = clientKeyPrefix(client)
      if (keyPrefix)
        throw new ConfigError(
          'INVALID_OPTION',
          `redis: the client has keyPrefix ${JSON.stringify(keyPrefix)}, which SCAN does not apply; use the strategy's prefix option instead`,
        )
      this.client = client
      this.ownsClient = false
    } else if (url !== undefined) {
      if (typeof url !== 'string' || !/^rediss?:\/\//.test(url))
        throw new ConfigError('INVALID_OPTION', `redis: url must be a redis:// or rediss:// URL, got ${JSON.stringify(url)}`)
      // One retry per command: an outage fails calls fast (the engine re-pushes on the next
      // sync) instead of queueing every sync in memory until the server is back. No
      // auto-pipelining: it sends one batch per connection at a time, so a single lost reply
      // would stall every later call until the connection drops.
      const redis = new Redis(url, { maxRetriesPerRequest: 1 })
      // failures reach callers through the failed calls (the engine's onError); without a
      // listener ioredis would print every connection error
      redis.on('error', () => undefined)
      this.client = redis as unknown as RedisClientLike
      this.ownsClient = true
    } else {
      throw new ConfigError('INVALID_OPTION', 'redis: needs client (an ioredis Redis or Cluster) or url')
    }
    if (typeof batchAcrossSlots !== 'boolean')
      throw new ConfigError('INVALID_OPTION', `redis: batchAcrossSlots must be a boolean, got ${String(batchAcrossSlots)}`)
    if (batchAcrossSlots && typeof this.client.nodes === 'function')
      throw new ConfigError(
        'INVALID_OPTION',
        'redis: batchAcrossSlots cannot be used with a cluster client (every script call must stay in one slot)',
      )
    this.prefix = prefix
    this.graceMs = graceMs
    this.scanCount = scanCount
    this.chunkSize = batchAcrossSlots ? CHUNK_SIZE : 0
  }

  pushDiffs(batch: DiffBatch): Promise<CounterRow[]> {
    const { windows, refresh } = batch
    const size = windows.length + refresh.length
    if (size === 0) return Promise.resolve([])
    // a synchronous hit: a few windows of one key, so one slot and one call
    const key = (windows.length > 0 ? windows[0] : refresh[0])?.key as string
    let oneKey = this.chunkSize === 0 || size <= this.chunkSize
    for (let i = 0; oneKey && i < windows.length; i++) oneKey = (windows[i] as WindowPush).key === key
    for (let i = 0; oneKey && i < refresh.length; i++) oneKey = (refresh[i] as WindowRef).key === key
    if (!oneKey) return this.pushMany(batch)
    let args: string[]
    try {
      args = this.oneKeyArgs(batch, key)
    } catch (err) {
      return Promise.reject(this.storeError(err))
    }
    const nonce = args[size] as string
    // send() inlined: one promise reaction per hit instead of two
    if (this.inFlight > 0 && !this.corked) this.cork()
    this.inFlight++
    return this.client.evalsha(PUSH.sha, size, ...args).then(
      (reply) => {
        this.inFlight--
        return this.oneKeyRows(reply, nonce, windows, refresh)
      },
      (err: unknown) => {
        if (!isNoScript(err)) {
          this.inFlight--
          throw this.storeError(err)
        }
        return this.client
          .eval(PUSH.source, size, ...args)
          .finally(() => {
            this.inFlight--
          })
          .then(
            (reply) => this.oneKeyRows(reply, nonce, windows, refresh),
            (evalErr: unknown) => {
              throw this.storeError(evalErr)
            },
          )
      },
    )
  }

  // KEYS and ARGV of one call for a batch of one key's windows: its names (written ones first),
  // nonce, nodeId, seq, the number written, then count and expire-at of each written window.
  private oneKeyArgs(batch: DiffBatch, key: string): string[] {
    const { windows, refresh } = batch
    const head = this.head(batch.namespace)
    const encoded = encodeKey(key)
    const args: string[] = []
    for (let i = 0; i < windows.length; i++) {
      const w = windows[i] as WindowPush
      if (typeof w.count !== 'number' || !Number.isFinite(w.count))
        throw new RangeError(`redis: count of ${JSON.stringify(w.key)} must be a finite number, got ${String(w.count)}`)
      args.push(windowName(head, encoded, w.windowSize, w.windowStart))
    }
    for (let i = 0; i < refresh.length; i++) {
      const r = refresh[i] as WindowRef
      args.push(windowName(head, encoded, r.windowSize, r.windowStart))
    }
    args.push(this.nonce(), batch.nodeId, String(batch.seq), String(windows.length))
    for (let i = 0; i < windows.length; i++) {
      const w = windows[i] as WindowPush
      args.push(String(w.count), String(windowExpiresAtMs(w.windowStart, w.windowSize, this.graceMs)))
    }
    return args
  }

  private oneKeyRows(reply: unknown, nonce: string, windows: readonly WindowPush[], refresh: readonly WindowRef[]): CounterRow[] {
    const count = windows.length + refresh.length
    const parts = typeof reply === 'string' ? reply.split(' ') : undefined
    if (parts === undefined || parts[0] !== nonce || parts.length !== 1 + 2 * count) this.desync('pushDiffs', reply)
    const rows = new Array<CounterRow>(count)
    for (let i = 0; i < count; i++) {
      const ref = (i < windows.length ? windows[i] : refresh[i - windows.length]) as WindowRef
      rows[i] = {
        key: ref.key,
        windowStart: ref.windowStart,
        windowSize: ref.windowSize,
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
      const w = windows[i] as DiffBatch['windows'][number]
      if (typeof w.count !== 'number' || !Number.isFinite(w.count))
        throw new RangeError(`redis: count of ${JSON.stringify(w.key)} must be a finite number, got ${String(w.count)}`)
      plan.write(w, String(w.count), String(windowExpiresAtMs(w.windowStart, w.windowSize, this.graceMs)), i)
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

  async *getCounters(namespace: string, windowSizes: readonly number[], timeSec: number, nodeId = ''): AsyncIterable<CounterRow> {
    const head = this.head(namespace)
    const wanted = new Set<string>()
    for (const size of windowSizes) {
      const start = windowStartSec(timeSec * 1000, size)
      wanted.add(`${size}:${start}`).add(`${size}:${start - size}`)
    }
    try {
      for await (const found of this.scanNamespace(head)) {
        const names: string[] = []
        const refs: ParsedName[] = []
        for (const { name, parsed } of found) {
          if (!wanted.has(`${parsed.windowSize}:${parsed.windowStart}`)) continue
          names.push(name)
          refs.push(parsed)
        }
        if (names.length > 0) yield* await this.readNames(names, refs, nodeId)
      }
    } catch (err) {
      throw this.storeError(err)
    }
  }

  async getWindow(key: string, namespace: string, windowStart: number, windowSize: number, nodeId = ''): Promise<CounterRow> {
    const name = windowName(this.head(namespace), encodeKey(key), windowSize, windowStart)
    try {
      const [row] = await this.readNames([name], [{ key, windowStart, windowSize }], nodeId)
      return row as CounterRow
    } catch (err) {
      throw this.storeError(err)
    }
  }

  async resetKey(namespace: string, key: string, windowSizes: readonly number[], nowMs: number): Promise<void> {
    const head = this.head(namespace)
    const encoded = encodeKey(key)
    const names: string[] = []
    for (const size of windowSizes) {
      const start = windowStartSec(nowMs, size)
      names.push(windowName(head, encoded, size, start), windowName(head, encoded, size, start - size))
    }
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
  async purge(namespace: string, _windowSizes: readonly number[], nowMs: number): Promise<void> {
    const head = this.head(namespace)
    try {
      for await (const found of this.scanNamespace(head)) {
        const bySlot = new Map<number, string[]>()
        for (const { name, parsed } of found) {
          if (windowExpiresAtMs(parsed.windowStart, parsed.windowSize, this.graceMs) > nowMs) continue
          const slot = this.chunkSize > 0 ? 0 : keySlot(name)
          const names = bySlot.get(slot)
          if (names === undefined) bySlot.set(slot, [name])
          else names.push(name)
        }
        await Promise.all([...bySlot.values()].map((names) => this.client.unlink(...names)))
      }
    } catch (err) {
      throw this.storeError(err)
    }
  }

  /**
   * Closes the client if the strategy created it from `url` (QUIT, waiting at most a second for
   * pending replies, then a hard disconnect so that no reconnect timer keeps the process alive).
   * A client you passed stays open.
   */
  async close(): Promise<void> {
    if (!this.ownsClient) return
    const client = this.client
    if (client.status === 'ready') {
      let timer: NodeJS.Timeout | undefined
      const bound = new Promise<void>((resolve) => {
        timer = setTimeout(resolve, 1000)
        timer.unref()
      })
      await Promise.race([client.quit().catch(() => undefined), bound])
      clearTimeout(timer)
    }
    client.disconnect?.()
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

  // Sends every call at once (ioredis writes each as it comes, without waiting for replies; a
  // cluster client routes each to its slot's master) and fills `rows` from the replies. An ioredis
  // pipeline would save the syscall per call but costs more CPU than it saves (measured: 27 ms
  // instead of 21 ms per sync of 1,000 keys), and auto-pipelining stalls on a lost reply.
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
    return this.send(numKeys, this.argv(call, nonce, nodeId, seq)).then((reply) =>
      this.fillRows(reply, nonce, numKeys, call.refs, call.rowIndex, rows),
    )
  }

  // One PUSH call: EVALSHA, and EVAL when the server has forgotten the script. Counts the calls
  // in flight, and corks the socket for this tick when others are already waiting (see cork()).
  private send(numKeys: number, keysAndArgs: string[]): Promise<unknown> {
    if (this.inFlight > 0 && !this.corked) this.cork()
    this.inFlight++
    return this.client.evalsha(PUSH.sha, numKeys, ...keysAndArgs).then(
      (reply) => {
        this.inFlight--
        return reply
      },
      (err: unknown) => {
        if (!isNoScript(err)) {
          this.inFlight--
          throw err
        }
        return this.client.eval(PUSH.source, numKeys, ...keysAndArgs).finally(() => {
          this.inFlight--
        })
      },
    )
  }

  // With calls already waiting for replies (many hits in flight), holds this tick's writes and
  // sends them as one socket write on the next tick: one syscall (and one read in Redis) for
  // every call a batch of replies set off, instead of one each. A lone call is written at once.
  // Only a single-server client exposes its socket; a cluster client writes as it comes.
  private cork(): void {
    const client = this.client as RedisClientLike & { stream?: { cork?: () => void; uncork?: () => void } }
    const stream = client.stream
    if (client.status !== 'ready' || typeof stream?.cork !== 'function' || typeof stream.uncork !== 'function') return
    stream.cork()
    this.corked = true
    process.nextTick(() => {
      this.corked = false
      stream.uncork?.()
    })
  }

  private fillRows(
    reply: unknown,
    nonce: string,
    count: number,
    refs: readonly RowRef[],
    rowIndex: readonly number[],
    rows: CounterRow[],
  ): void {
    const parts = typeof reply === 'string' ? reply.split(' ') : undefined
    if (parts === undefined || parts[0] !== nonce || parts.length !== 1 + 2 * count) this.desync('pushDiffs', reply)
    for (let i = 0; i < count; i++) {
      const ref = refs[i] as RowRef
      rows[rowIndex[i] as number] = {
        key: ref.key,
        windowStart: ref.windowStart,
        windowSize: ref.windowSize,
        count: Number(parts[1 + 2 * i]),
        own: Number(parts[2 + 2 * i]),
      }
    }
  }

  private run(script: LuaScript, keys: readonly string[], args: readonly string[]): Promise<unknown> {
    return this.evalsha(script, keys.length, [...keys, ...args])
  }

  // EVALSHA, and EVAL when the server has forgotten the script (restart, SCRIPT FLUSH, failover):
  // EVAL also caches it, so the next EVALSHA finds it again.
  private async evalsha(script: LuaScript, numKeys: number, keysAndArgs: string[]): Promise<unknown> {
    try {
      return await this.client.evalsha(script.sha, numKeys, ...keysAndArgs)
    } catch (err) {
      if (!isNoScript(err)) throw err
      return await this.client.eval(script.source, numKeys, ...keysAndArgs)
    }
  }

  // Yields, page by page, the parsed names of every key-window of a namespace, on every master.
  private async *scanNamespace(head: string): AsyncGenerator<Array<{ name: string; parsed: ParsedName }>> {
    const pattern = namespacePattern(head)
    const seen = new Set<string>()
    for (const node of await this.masters()) {
      let cursor = '0'
      do {
        const reply = await node.scan(cursor, 'MATCH', pattern, 'COUNT', this.scanCount)
        if (!Array.isArray(reply) || typeof reply[0] !== 'string' || !Array.isArray(reply[1])) this.desync('scan', reply)
        cursor = reply[0]
        const page: Array<{ name: string; parsed: ParsedName }> = []
        for (const name of reply[1]) {
          // SCAN may return a name twice; a slot migrating mid-scan may show it on two masters
          if (seen.has(name)) continue
          seen.add(name)
          const parsed = parseWindowName(name, head)
          if (parsed !== undefined) page.push({ name, parsed })
        }
        if (page.length > 0) yield page
      } while (cursor !== '0')
    }
  }

  private async masters(): Promise<RedisCommands[]> {
    const client = this.client
    if (typeof client.nodes !== 'function') return [client]
    let masters = client.nodes('master')
    if (masters.length === 0) {
      // a cluster client learns its masters on connecting: one round trip makes it connect
      const nonce = this.nonce()
      const reply = await this.run(RESET, [], [nonce])
      if (reply !== nonce) this.desync('cluster ping', reply)
      masters = client.nodes('master')
    }
    if (masters.length === 0) throw new StoreError('STORE_UNAVAILABLE', this.name, 'the cluster client knows no master node')
    return masters
  }

  // A reply that is not the one asked for: replies on this connection are no longer matched to
  // their commands (some were lost). Only a new connection fixes that, so reconnect the client;
  // the pushes are idempotent, so commands ioredis resends after reconnecting are harmless.
  private desync(what: string, reply: unknown): never {
    this.client.disconnect?.(true)
    const shape = Array.isArray(reply)
      ? `an array of ${reply.length}`
      : typeof reply === 'string'
        ? `"${reply.slice(0, 40)}"`
        : typeof reply
    throw new StoreError('STORE_REPLY_LOST', this.name, `${what}: the reply belongs to another command (got ${shape}); reconnecting`)
  }

  private storeError(err: unknown): StoreError {
    if (err instanceof StoreError) return err
    if (err instanceof RangeError) return new StoreError('STORE_ERROR', this.name, err.message, { cause: err })
    const error = err instanceof Error ? err : undefined
    // a ReplyError is the server refusing the command; anything else is the connection
    const code = error?.name === 'ReplyError' ? 'STORE_ERROR' : 'STORE_UNAVAILABLE'
    return new StoreError(code, this.name, error?.message ?? String(err), { cause: err })
  }
}

function clientKeyPrefix(client: object): string | undefined {
  const options = (client as { options?: { keyPrefix?: unknown; redisOptions?: { keyPrefix?: unknown } } }).options
  const keyPrefix = options?.keyPrefix ?? options?.redisOptions?.keyPrefix
  return typeof keyPrefix === 'string' ? keyPrefix : undefined
}
