import type { WindowTable } from './counter-table.js'
import type { StoreError } from './errors.js'
import { EscrowDecisions } from './escrow-decisions.js'
import type { Limit } from './limit-set.js'
import type { Decision } from './limiter-types.js'
import { rowsRate } from './previous-reads.js'
import type { CounterRow } from './strategy.js'

/**
 * The decisions of a synchronous namespace, each on the store's answer to one round trip (a hit
 * counted, pushed and read back; a peek read), and the local peek every mode shares. Between the
 * escrow decisions (escrow-decisions.ts) and the calls of a Limiter (limiter.ts).
 */
export abstract class RemoteDecisions extends EscrowDecisions {
  // A synchronous hit of a key blocked here: the store is read first (a lift elsewhere), then the
  // hit is blocked or goes on as usual.
  private blockedRemote(key: string, cost: number, nowMs: number, override: number | undefined): Promise<Decision> {
    const ns = this.namespace
    const after = (rows: CounterRow[] | undefined): Decision | Promise<Decision> => {
      const until = ns.blocks?.endOf(key, nowMs) ?? 0
      return until !== 0 ? this.blockedDecision(key, cost, nowMs, until, override, rows) : this.hitRemote(key, cost, nowMs, override)
    }
    return ns.pushKey(key, this.tables, nowMs).then(after, () => after(undefined))
  }

  // The decision a hit of `cost` would get, read from the store without counting it.
  // (The read has brought the key's block, when blocking is on: a blocked key says so.)
  protected peekRemote(key: string, cost: number, nowMs: number, override: number | undefined): Promise<Decision> {
    const decide = (rows: CounterRow[] | undefined, err: StoreError | undefined): Decision => {
      const until = this.namespace.blocks?.endOf(key, nowMs) ?? 0
      if (until !== 0) return this.blockedDecision(key, cost, nowMs, until, override, rows)
      return this.peekLocal(key, cost, nowMs, err, rows, override)
    }
    return this.namespace.pushKey(key, this.tables, nowMs).then(
      (rows) => decide(rows, undefined),
      (err: unknown) => decide(undefined, err as StoreError),
    )
  }

  protected peekLocal(
    key: string,
    cost: number,
    nowMs: number,
    storeError: StoreError | undefined,
    rows: CounterRow[] | undefined,
    override: number | undefined,
  ): Decision {
    const applied = this.set.apply(key, override)
    let allowed = true
    let admissible = true
    for (let i = 0; i < this.limits.length; i++) {
      const l = this.limits[i] as Limit
      const rate = rowsRate(l.table, key, rows, nowMs)
      this.rates[i] = rate
      this.before[i] = rate
      if (rate + cost > (applied[i] as number)) allowed = false
      if (cost > (applied[i] as number)) admissible = false
    }
    if (storeError !== undefined) allowed = admissible && this.namespace.onStoreError === 'allow'
    return this.decision(key, cost, nowMs, allowed, storeError)
  }

  protected hitRemote(key: string, cost: number, nowMs: number, override: number | undefined): Promise<Decision> {
    if (this.namespace.blocks !== undefined && this.namespace.blocks.endOf(key, nowMs) !== 0)
      return this.blockedRemote(key, cost, nowMs, override)
    // a cost above a limit can never be admitted: denied without a store call or a count
    const applied = this.set.apply(key, override)
    for (let i = 0; i < applied.length; i++) if (cost > (applied[i] as number)) return this.peekRemote(key, cost, nowMs, override)
    const tables = this.tables
    // One round trip: count, push, read the totals back; the store orders concurrent hits.
    for (let i = 0; i < tables.length; i++) (tables[i] as WindowTable).add(key, cost, nowMs)
    return this.namespace.pushKey(key, tables, nowMs, cost > 0).then(
      (rows) => this.remoteDecision(key, cost, nowMs, rows, undefined, override),
      (err: unknown) => this.remoteDecision(key, cost, nowMs, undefined, err as StoreError, override),
    )
  }

  // The decision of a synchronous hit from the store's rows (undefined: the store failed).
  private remoteDecision(
    key: string,
    cost: number,
    nowMs: number,
    rows: CounterRow[] | undefined,
    storeError: StoreError | undefined,
    override: number | undefined,
  ): Decision {
    const ns = this.namespace
    const blockedUntil = storeError === undefined && ns.blocks !== undefined ? ns.blocks.endOf(key, nowMs) : 0
    if (blockedUntil !== 0) {
      // blocked elsewhere, as the store said: the hit it took is taken back (a blocked hit never counts)
      for (let i = 0; i < this.tables.length; i++) (this.tables[i] as WindowTable).add(key, -cost, nowMs)
      void ns.pushKey(key, this.tables, nowMs).catch(() => undefined)
      return this.blockedDecision(key, cost, nowMs, blockedUntil, override, undefined)
    }
    // asked again: the decisions of other keys have used the array since the hit was sent
    const applied = this.set.apply(key, override)
    let allowed = true
    for (let i = 0; i < this.limits.length; i++) {
      const l = this.limits[i] as Limit
      const rate = rowsRate(l.table, key, rows, nowMs)
      this.rates[i] = rate
      this.before[i] = rate - cost
      if (rate > (applied[i] as number)) allowed = false
    }
    if (storeError !== undefined) allowed = ns.onStoreError === 'allow'
    const takeBack = !allowed && !this.countDenied
    if (takeBack) {
      for (let i = 0; i < this.limits.length; i++) {
        this.rates[i] = (this.limits[i] as Limit).table.add(key, -cost, nowMs)
      }
    }
    let d: Decision
    if (this.limits.length === 1 && storeError === undefined) {
      // one limit: the decision() object without its intermediate copies
      const l = this.limits[0] as Limit
      const limit = applied[0] as number
      const retryAfterMs = (this.before[0] as number) + cost > limit ? this.retryAfter(l, limit, key, cost, nowMs) : 0
      d = this.single(l, limit, allowed, this.rates[0] as number, nowMs, retryAfterMs)
    } else d = this.decision(key, cost, nowMs, allowed, storeError)
    if (!allowed && storeError === undefined && this.blocksOnDeny) d = this.startBlock(d, key, cost, nowMs)
    // the store has the hit (take it back) or must learn of the block: one push in the background (retried on failure)
    if (storeError === undefined && (takeBack || d.blocked === true)) void ns.pushKey(key, this.tables, nowMs).catch(() => undefined)
    return d
  }
}
