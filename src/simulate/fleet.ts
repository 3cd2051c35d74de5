import { type FakeClock, type Limiter, type NamespaceOptions, RateLimiting, type Strategy } from '../index.js'

/**
 * N simulated processes of the engine sharing one store, on a fake clock, replayed the way a
 * fleet runs: each process decides on its own counts plus the others' as of the last sync, and
 * every process syncs at the same wall-clock multiples of `syncRate` (docs/ARCHITECTURE.md, "One
 * sync").
 *
 * Keys never interact in the engine's decisions, so the fleet is split by key into *shards* of a
 * few keys, each shard a namespace of its own (`s<shard>`, `nodeId` `s<shard>-n<node>`) in each
 * process, over a store of its own. A sync (`rl.sync(namespace)`) then visits a shard's few keys,
 * not every key of the trace, and only the shards that need it sync:
 *
 * - at each sync instant, every process with unsynced hits in a shard pushes them (writes, and
 *   reads back what the store holds at that moment);
 * - a process reads a shard again only when it next decides a hit in it, and only if another
 *   process pushed to it since its own last sync. Pushes happen only at sync instants and the
 *   replay runs in time order, so what it reads then is exactly what the store held after the
 *   last sync instant: the view it would have had by syncing at every instant (Kong's settle
 *   time, the read `syncRate / 20` after the writes, is the instant's last read).
 *
 * The one difference from a real process: a real one refreshes an idle key it holds (neither hit
 * since the last sync nor near its limit) only once per `idleRefreshMs`; here every key is as
 * fresh as the last sync instant, which favours the engine only on the first hit after a pause.
 *
 * What a shard costs: a process's namespace of a shard is made when that process first hits it
 * (a key hit by 2 of 16 processes makes 2), and a process's namespaces live in a few
 * RateLimiting instances of {@link SHARDS_PER_INSTANCE} namespaces each, which share one counter
 * dict: thousands of keys at once cost a namespace each per process, not an instance and a dict
 * each (a 16-process cell of 5,000 keys took 1.3 GB that way, 0.7 GB this way).
 */
export interface FleetOptions {
  readonly limit: number
  readonly windowSec: number
  readonly nodes: number
  /** Seconds between syncs, > 0. */
  readonly syncRate: number
  readonly countDenied: boolean
  /**
   * Makes the store of one shard, which its N processes sync with. Keys never interact, so a
   * store per shard answers exactly what one store shared by every shard would, and each call
   * looks up a handful of stored windows instead of every key's.
   */
  readonly strategy: () => Strategy
  readonly clock: FakeClock
  /**
   * Keys per shard: 1 is the fastest (a sync visits one key); more keys per shard make fewer
   * namespaces (one per shard in use and process) for a trace with very many keys at once, and
   * change the answers a little (a sync of one key then pushes and reads its shard's others too).
   * @default 1
   */
  readonly shardSize?: number
  /** Shards per RateLimiting instance of a process (see above); any count answers alike. @default {@link SHARDS_PER_INSTANCE} */
  readonly shardsPerInstance?: number
  /** More namespace options for every process (a counter variant's). */
  readonly namespaceOptions?: Readonly<Record<string, unknown>>
}

/**
 * Namespaces (shards) per RateLimiting instance of one process: a counter dict numbers its
 * tables in 16 bits, one table per namespace here.
 */
export const SHARDS_PER_INSTANCE = 4096
// Key-windows a shard's namespace may hold: its keys, and those of its last use until a sync
// releases them (a handful); a shared dict holds this many per namespace, never evicting.
const KEYS_PER_SHARD = 64

interface Member {
  readonly rl: RateLimiting
  readonly namespace: string
  readonly limiter: Limiter
}

class Shard {
  readonly id: number
  readonly store: Strategy
  /** Each process's namespace of this shard, made on its first hit here. */
  readonly members: (Member | undefined)[]
  /** Pushes to this shard so far. */
  version = 0
  /** The version each process last synced at; -1 while it holds nothing here. */
  readonly synced: Float64Array
  /** Whether each process has unsynced hits here. */
  readonly pending: Uint8Array
  keys: number[] = []
  lastHitMs = 0
  inUse = false

  constructor(id: number, nodes: number, store: Strategy) {
    this.id = id
    this.store = store
    this.members = new Array<Member | undefined>(nodes)
    this.synced = new Float64Array(nodes).fill(-1)
    this.pending = new Uint8Array(nodes)
  }
}

/** See {@link FleetOptions}. One fleet replays one cell. */
export class CounterFleet {
  readonly nodes: number
  private readonly options: FleetOptions
  private readonly syncMs: number
  private readonly windowMs: number
  private readonly shardSize: number
  private readonly keyShard: Int32Array
  private readonly shards: Shard[] = []
  private readonly free: Shard[] = []
  private open: Shard | undefined
  private pendingShards: Shard[] = []
  private pendingNodes: number[] = []
  private nextRoundMs = Number.NaN
  private nextReleaseMs = 0
  // per process: sync instants with writes, and the time it held keys (for the store calls)
  private readonly writeRounds: Float64Array
  private readonly holdMs: Float64Array
  private readonly holdEnd: Float64Array
  // key × process: hits since the last sync instant; each is one key-window written there
  private readonly keyPending: Uint8Array
  private keyPendingList: number[] = []
  private rowsWritten = 0
  // per process: its RateLimiting instances, each holding SHARDS_PER_INSTANCE shards' namespaces
  private readonly instances: (RateLimiting | undefined)[][]
  /** The last {@link hit}'s decision. */
  allowed = false
  /** The rate the last {@link hit} decided on, before the hit. */
  rateBefore = 0
  /** Whether the last {@link hit} counted (allowed, or denied with countDenied). */
  counted = false

  constructor(options: FleetOptions, keyCount: number) {
    this.options = options
    this.nodes = options.nodes
    this.syncMs = options.syncRate * 1000
    this.windowMs = Math.round(options.windowSec * 1000)
    this.shardSize = options.shardSize ?? 1
    this.keyShard = new Int32Array(keyCount).fill(-1)
    this.writeRounds = new Float64Array(options.nodes)
    this.holdMs = new Float64Array(options.nodes)
    this.holdEnd = new Float64Array(options.nodes).fill(Number.NEGATIVE_INFINITY)
    this.keyPending = new Uint8Array(keyCount * options.nodes)
    this.instances = Array.from({ length: options.nodes }, () => [])
  }

  /** Whether {@link advanceTo} has anything to do at `t`: a sync instant or a release is due. */
  due(t: number): boolean {
    return !(this.nextRoundMs > t) || t >= this.nextReleaseMs
  }

  /** Runs every sync instant up to `t` (inclusive); call before deciding the hits at `t` when {@link due}. */
  async advanceTo(t: number): Promise<void> {
    if (this.nextRoundMs !== this.nextRoundMs) this.nextRoundMs = (Math.floor(t / this.syncMs) + 1) * this.syncMs
    while (this.nextRoundMs <= t) {
      const at = this.nextRoundMs
      await this.round(at)
      this.nextRoundMs += this.syncMs
      // nothing to push and no one to refresh: skip to the last instant before t
      if (this.pendingShards.length === 0 && this.nextRoundMs <= t) this.nextRoundMs = Math.floor(t / this.syncMs) * this.syncMs
    }
    if (t >= this.nextReleaseMs) {
      this.release(t)
      this.nextReleaseMs = t + this.windowMs
    }
  }

  /**
   * Whether process `node`'s view of `key`'s shard is behind the store: it holds keys there and
   * another process pushed since its last sync. Then {@link catchUp} before {@link hit}.
   */
  isBehind(node: number, key: number): boolean {
    const shard = this.shardOf(key)
    const synced = shard.synced[node] as number
    return synced >= 0 && synced !== shard.version
  }

  /** Syncs process `node` with the store for `key`'s shard (see {@link isBehind}). */
  async catchUp(node: number, key: number): Promise<void> {
    const shard = this.shardOf(key)
    const m = shard.members[node] as Member
    await m.rl.sync(m.namespace)
    shard.synced[node] = shard.version
  }

  /**
   * Decides one hit of `key` (named `name`) by process `node` at `t` (the fake clock's time), on
   * its view as it is: call {@link catchUp} first when {@link isBehind}. The decision is left in
   * {@link allowed}, {@link rateBefore} (the rate it decided on, before the hit) and
   * {@link counted}: synchronous, with no object per hit.
   */
  hit(node: number, key: number, name: string, t: number): void {
    const shard = this.shardOf(key)
    const synced = shard.synced[node] as number
    const d = (shard.members[node] ?? this.join(shard, node)).limiter.hit(name)
    if (d instanceof Promise) throw new Error('a periodic namespace decides synchronously')
    const counted = d.allowed || (this.options.countDenied && 1 <= this.options.limit)
    this.allowed = d.allowed
    this.counted = counted
    this.rateBefore = counted ? d.rate - 1 : d.rate
    shard.lastHitMs = t
    const slot = key * this.nodes + node
    if (this.keyPending[slot] === 0) {
      this.keyPending[slot] = 1
      this.keyPendingList.push(slot)
    }
    if (shard.pending[node] === 0) {
      shard.pending[node] = 1
      if (synced < 0) shard.synced[node] = shard.version
      this.pendingShards.push(shard)
      this.pendingNodes.push(node)
    }
    const holdUntil = t + 2 * this.windowMs
    const end = this.holdEnd[node] as number
    this.holdMs[node] = (this.holdMs[node] as number) + (t > end ? 2 * this.windowMs : holdUntil - end)
    this.holdEnd[node] = holdUntil
  }

  /** Pushes what is left, then the store load: sync calls and key-windows written per second. */
  async finish(durationSec: number): Promise<{ callsPerSec: number; rowsPerSec: number }> {
    if (this.pendingShards.length > 0) await this.round(this.nextRoundMs)
    let calls = 0
    for (let n = 0; n < this.nodes; n++) {
      const writes = this.writeRounds[n] as number
      const held = Math.floor((this.holdMs[n] as number) / this.syncMs)
      // a sync with writes is two calls (the writes, then the read after the settle time)
      calls += 2 * writes + Math.max(0, held - writes)
    }
    // sparse: a process has an instance only for the groups of shards it hit
    for (const own of this.instances) for (const rl of own) await rl?.close()
    const seconds = Math.max(durationSec, this.options.syncRate)
    return { callsPerSec: calls / seconds, rowsPerSec: this.rowsWritten / seconds }
  }

  // One sync instant: every process with unsynced hits in a shard pushes them.
  private async round(atMs: number): Promise<void> {
    const clock = this.options.clock
    const now = clock.now()
    clock.set(atMs)
    const shards = this.pendingShards
    const nodes = this.pendingNodes
    this.pendingShards = []
    this.pendingNodes = []
    const wrote = new Uint8Array(this.nodes)
    this.rowsWritten += this.keyPendingList.length
    for (const slot of this.keyPendingList) this.keyPending[slot] = 0
    this.keyPendingList = []
    for (let i = 0; i < shards.length; i++) {
      const shard = shards[i] as Shard
      const node = nodes[i] as number
      // a single process never reads what it pushed: its view is its own counts, so its pushes
      // are counted but not sent
      if (this.nodes > 1) {
        const m = shard.members[node] as Member
        await m.rl.sync(m.namespace)
      }
      shard.pending[node] = 0
      shard.version++
      shard.synced[node] = shard.version
      wrote[node] = 1
    }
    for (let n = 0; n < this.nodes; n++) this.writeRounds[n] = (this.writeRounds[n] as number) + (wrote[n] as number)
    clock.set(Math.max(now, atMs))
  }

  private shardOf(key: number): Shard {
    const id = this.keyShard[key] as number
    if (id >= 0) return this.shards[id] as Shard
    let shard = this.open
    if (shard === undefined || shard.keys.length >= this.shardSize) {
      shard = this.free.pop() ?? this.newShard()
      shard.inUse = true
      this.open = shard
    }
    shard.keys.push(key)
    this.keyShard[key] = shard.id
    return shard
  }

  private newShard(): Shard {
    const shard = new Shard(this.shards.length, this.nodes, this.options.strategy())
    this.shards.push(shard)
    return shard
  }

  // Process `node`'s namespace of `shard`, made on its first hit there.
  private join(shard: Shard, node: number): Member {
    const { limit, windowSec, syncRate, clock, countDenied, namespaceOptions } = this.options
    const own = this.instances[node] as (RateLimiting | undefined)[]
    const perInstance = this.options.shardsPerInstance ?? SHARDS_PER_INSTANCE
    const at = Math.floor(shard.id / perInstance)
    let rl = own[at]
    if (rl === undefined) {
      rl = RateLimiting.newInstance(`simulate-n${node}-${at}`)
      own[at] = rl
    }
    const namespace = `s${shard.id}`
    rl.new({
      ...(namespaceOptions as Partial<NamespaceOptions>),
      namespace,
      windowSizes: [windowSec],
      syncRate,
      autoSync: false,
      strategy: shard.store,
      clock: clock.now,
      nodeId: `s${shard.id}-n${node}`,
      maxKeys: perInstance * Math.max(KEYS_PER_SHARD, this.shardSize * 8),
    })
    const member = { rl, namespace, limiter: rl.limiter({ namespace, limits: [{ limit, window: windowSec }], countDenied }) }
    shard.members[node] = member
    return member
  }

  // Shards whose keys have all been idle for two windows and a sync hold no count any view can
  // read: their keys are forgotten (a key seen again starts afresh, as it would) and the shard
  // serves new keys.
  private release(t: number): void {
    const idleMs = 2 * this.windowMs + this.syncMs
    for (const shard of this.shards) {
      if (!shard.inUse || t - shard.lastHitMs <= idleMs || shard.pending.some((p) => p !== 0)) continue
      for (const key of shard.keys) this.keyShard[key] = -1
      shard.keys = []
      shard.synced.fill(-1)
      shard.inUse = false
      if (this.open === shard) this.open = undefined
      this.free.push(shard)
    }
  }
}
