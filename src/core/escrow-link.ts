import type { EscrowTable } from './escrow-table.js'
import { StoreError } from './errors.js'
import type { ResolvedNamespaceOptions } from './options.js'
import type { StoreLink } from './store-link.js'
import type { EscrowReply, GrantRequest, GrantRow, WindowPush } from './strategy.js'
import { withTimeout } from './timeout.js'

/**
 * How an escrow grant ended: answered (its rows applied: the budgets say what was granted;
 * `counted`: the store refused it and counted the hits that asked, `countRefused`), or no grant
 * could be had.
 */
export type GrantOutcome =
  { readonly answered: true; readonly counted: boolean } | { readonly answered: false; readonly error: StoreError | undefined }

const ANSWERED: GrantOutcome = { answered: true, counted: false }
const COUNTED: GrantOutcome = { answered: true, counted: true }
const LEARNING: GrantOutcome = { answered: false, error: undefined }

// One key's grant requests of this event-loop turn, by table, and who waits on them.
interface PendingGrant {
  readonly requests: Map<EscrowTable, GrantRequest>
  // whether the store counts the asking hits when it refuses (every asker counts its denials)
  countRefused: boolean
  // the asking hits' total cost
  cost: number
  readonly done: Promise<GrantOutcome>
  resolve(outcome: GrantOutcome): void
}

/**
 * The escrow half of a namespace's store link (docs/ARCHITECTURE.md, "Escrow"): the grants of one
 * event-loop turn in one call, the grants in flight per key, the sync's writes, the store's
 * epoch, the lease, the quiet spell after a failure or while the store learns, and the processes
 * the store counts. Its calls share the link's strategy, seq, deadline and error reports.
 */
export class EscrowLink {
  /** How long after its epoch begins the store refuses grants; also how long a budget may be spent without an answered call. */
  readonly learnMs: number
  /** Called when the store answers a new epoch (it lost its reservations): the sync loop writes the hits again at once. */
  onEpochLost: () => void = () => undefined
  /** Processes of the namespace, as the store's last answer counted them (at least 1). */
  nodesSeen = 1
  /** Whether the store has answered this process yet (`nodesSeen` means something). */
  get answered(): boolean {
    return this.epochMs !== undefined
  }
  private epochMs: number | undefined
  // seq of the first call answered in the epoch held
  private epochSeq = 0
  // no grant is asked for before this time (engine clock): the store is learning, or just failed
  private quietUntilMs = Number.NEGATIVE_INFINITY
  // send time (engine clock) of the newest call the store answered in the current epoch
  private contactMs = Number.NEGATIVE_INFINITY
  private turn: { readonly nowMs: number; readonly keys: Map<string, PendingGrant> } | undefined
  private readonly inflight = new Map<string, Promise<GrantOutcome>>()

  private readonly link: StoreLink
  private readonly tables: readonly EscrowTable[]
  private readonly options: ResolvedNamespaceOptions

  constructor(link: StoreLink, tables: readonly EscrowTable[], options: ResolvedNamespaceOptions) {
    this.link = link
    this.tables = tables
    this.options = options
    this.learnMs = 2 * options.syncRate * 1000 + 2 * options.storeTimeoutMs
  }

  /** The store's name for messages. */
  get strategyName(): string {
    return this.link.strategyName
  }

  /**
   * Escrow: why no grant is asked for at `nowMs`, or undefined when one may be: the store is
   * learning (until its learning period ends) or failed (for a sync interval, at most a second):
   * meanwhile hits are decided by `onStoreError` without a store call each.
   */
  quiet(nowMs: number): StoreError | undefined {
    return nowMs < this.quietUntilMs ? this.quietReason : undefined
  }

  private quietReason: StoreError | undefined

  /** Escrow: whether budgets may be spent at `nowMs`: the store answered a call sent less than `learnMs` before. */
  leaseValid(nowMs: number): boolean {
    return nowMs < this.contactMs + this.learnMs
  }

  /**
   * Escrow: asks the store for budget for a hit of `cost` on `key` in `tables` (each with its
   * limit in `limits`). The requests of one event-loop turn go out as one call; a second hit of
   * a key in the same turn adds its cost to the first one's request. A key whose grant is in
   * flight waits for it and resolves undefined (decide again: the budget may cover it now).
   * With `countDenied` a refusal counts the hit in the store at once (GrantRequest.countRefused).
   */
  grant(
    key: string,
    tables: readonly EscrowTable[],
    cost: number,
    limits: ArrayLike<number>,
    nowMs: number,
    countDenied: boolean,
  ): Promise<GrantOutcome | undefined> {
    const inflight = this.inflight.get(key)
    if (inflight !== undefined) return inflight.then(() => undefined)
    let turn = this.turn
    if (turn === undefined) {
      const started = { nowMs, keys: new Map<string, PendingGrant>() }
      this.turn = turn = started
      queueMicrotask(() => this.flushGrants(started))
    }
    let pending = turn.keys.get(key)
    if (pending === undefined) {
      let resolve: (outcome: GrantOutcome) => void = () => undefined
      const done = new Promise<GrantOutcome>((r) => (resolve = r))
      pending = { requests: new Map(), countRefused: countDenied, cost: 0, done, resolve }
      turn.keys.set(key, pending)
    } else if (!countDenied) pending.countRefused = false
    pending.cost += cost
    for (let i = 0; i < tables.length; i++) {
      const table = tables[i] as EscrowTable
      const asked = pending.requests.get(table)
      if (asked === undefined) pending.requests.set(table, table.grantRequest(key, cost, limits[i] as number, nowMs, countDenied))
      // the first hit's need stays the least of any use: the store grants as many of the others as fit
      else {
        const wanted = (asked.wanted ?? asked.minimum) + cost
        pending.requests.set(table, { ...asked, target: Math.max(asked.target, wanted), wanted })
      }
    }
    return pending.done
  }

  // Sends one turn's grants as one call and applies the answer.
  private flushGrants(turn: { readonly nowMs: number; readonly keys: Map<string, PendingGrant> }): void {
    if (this.turn === turn) this.turn = undefined
    const seq = this.link.nextSeq()
    const grants: GrantRequest[] = []
    const owners: EscrowTable[] = []
    for (const [key, pending] of turn.keys) {
      for (const [table, request] of pending.requests) {
        grants.push(pending.countRefused === (request.countRefused === true) ? request : { ...request, countRefused: pending.countRefused })
        owners.push(table)
        table.noteGrantSent(key, seq)
      }
      this.inflight.set(key, pending.done)
    }
    const settle = (outcome: GrantOutcome, counted?: ReadonlySet<string>) => {
      for (const [key, pending] of turn.keys) {
        if (this.inflight.get(key) === pending.done) this.inflight.delete(key)
        pending.resolve(counted?.has(key) === true ? COUNTED : outcome)
      }
    }
    const nowMs = turn.nowMs
    this.callEscrow(seq, nowMs, [], grants).then(
      (reply) => {
        if (!this.acceptEpoch(reply, nowMs, seq)) return settle(LEARNING)
        if (reply.learning) {
          this.quietReason = new StoreError(
            'STORE_UNAVAILABLE',
            this.link.strategyName,
            'escrow: the store grants no budget while it learns (the first learnMs of its epoch)',
          )
          this.quietUntilMs = reply.epochMs + this.learnMs
          return settle({ answered: false, error: this.quietReason })
        }
        let counted: Set<string> | undefined
        for (let i = 0; i < reply.grants.length; i++) {
          const row = reply.grants[i] as GrantRow
          ;(owners[i] as EscrowTable).applyEscrow(row, seq, nowMs)
          if (row.refused === true && (grants[i] as GrantRequest).countRefused === true) (counted ??= new Set()).add(row.key)
        }
        // refused and counted by the store: what it raised is the asking hits, denied, not budget.
        // They are counted here at once, before any other hit of the key could spend it.
        if (counted !== undefined)
          for (const key of counted) {
            const pending = turn.keys.get(key) as PendingGrant
            for (const table of pending.requests.keys()) table.countOutside(key, pending.cost, nowMs)
          }
        settle(ANSWERED, counted)
      },
      (err: unknown) => {
        const error = this.link.report(err)
        this.quietReason = error
        this.quietUntilMs = nowMs + Math.min(1000, this.options.syncRate * 1000)
        settle({ answered: false, error })
      },
    )
  }

  /**
   * Escrow: one sync's writes (returns of budget, hits counted while denied, hits written again)
   * as one call per `batchSize`, or, with nothing to write, one empty call that renews the lease
   * and learns the store's epoch. Rejects with the failure (the caller queues the keys again).
   */
  async sendEscrow(windows: readonly WindowPush[], nowMs: number): Promise<void> {
    const batchSize = this.options.batchSize
    let w = 0
    do {
      const writes = windows.slice(w, w + batchSize)
      w += writes.length
      const seq = this.link.nextSeq()
      for (const write of writes) this.tableOf(write.windowSizeMs)?.noteSent(write.key, write.windowStartMs, write.count, seq)
      const reply = await this.callEscrow(seq, nowMs, writes, [])
      if (!this.acceptEpoch(reply, nowMs, seq)) continue
      for (const row of reply.rows) this.tableOf(row.windowSizeMs)?.applyEscrow(row, seq, nowMs)
    } while (w < windows.length)
  }

  /** The namespace's table of windows of `sizeMs`, or undefined. */
  tableOf(sizeMs: number): EscrowTable | undefined {
    return this.link.tableOf(sizeMs) as EscrowTable | undefined
  }

  private async callEscrow(
    seq: number,
    nowMs: number,
    windows: readonly WindowPush[],
    grants: readonly GrantRequest[],
  ): Promise<EscrowReply> {
    const strategy = await this.link.load()
    if (strategy.escrow === undefined)
      throw new StoreError('STORE_UNAVAILABLE', strategy.name, `the ${strategy.name} strategy does not serve escrow namespaces`)
    const batch = {
      namespace: this.link.namespace,
      nodeId: this.link.nodeId,
      seq,
      nowMs,
      learnMs: this.learnMs,
      windows,
      refresh: [],
      grants,
    }
    return withTimeout(strategy.escrow(batch), this.options.storeTimeoutMs, strategy.name, 'escrow')
  }

  // Takes the epoch a reply answers. Another epoch than the one held is a new one (the store lost
  // every reservation: every budget here is dropped, the hits written again) when its call was
  // sent after the first call answered in the epoch held; else it is a reply from before that,
  // whose rows are ignored (false). Epochs are compared by identity, never by value: a store
  // that lost its data takes its new epoch from its first caller's clock, which may be behind.
  // A reply renews the lease from the time its call was sent.
  private acceptEpoch(reply: EscrowReply, sentAtMs: number, seq: number): boolean {
    if (this.epochMs !== undefined && reply.epochMs !== this.epochMs) {
      if (seq < this.epochSeq) return false
      for (const table of this.tables) table.escrowLost()
      this.contactMs = Number.NEGATIVE_INFINITY
      this.epochMs = reply.epochMs
      this.epochSeq = seq
      this.onEpochLost()
      return true
    }
    if (this.epochMs === undefined) this.epochSeq = seq
    this.epochMs = reply.epochMs
    if (sentAtMs > this.contactMs) this.contactMs = sentAtMs
    this.nodesSeen = Math.max(1, reply.nodes)
    return true
  }
}
