import { Decisions } from './decisions.js'
import { StoreError } from './errors.js'
import type { Limit } from './limit-set.js'
import type { Decision } from './limiter-types.js'
import type { CounterRow } from './strategy.js'
import type { GrantOutcome } from './escrow-link.js'
import type { EscrowTable } from './escrow-table.js'

/**
 * The decisions of an escrow namespace (docs/ARCHITECTURE.md, "Escrow"): a hit admitted on the
 * budget this process holds, denied while the store's refusal holds, or decided once the store
 * answers a grant; what `onStoreError` decides when no grant can be had. Between the decisions
 * every limiter makes (decisions.ts) and the calls of a Limiter (limiter.ts).
 */
export abstract class EscrowDecisions extends Decisions {
  // the decision a hit of `cost` would get on this process's view, nothing counted (limiter.ts)
  protected abstract peekLocal(
    key: string,
    cost: number,
    nowMs: number,
    storeError: StoreError | undefined,
    rows: CounterRow[] | undefined,
    override: number | undefined,
  ): Decision

  // A hit in an escrow namespace: admitted on the budget held here (no I/O), denied here while
  // the store's last refusal holds (no I/O), else decided once the store answers a grant.
  protected hitEscrow(key: string, cost: number, nowMs: number, override: number | undefined): Decision | Promise<Decision> {
    const applied = this.set.apply(key, override)
    const tables = this.tables as readonly EscrowTable[]
    // a cost above a limit can never be admitted: denied without a store call or a count
    for (let i = 0; i < applied.length; i++)
      if (cost > (applied[i] as number)) return this.peekLocal(key, cost, nowMs, undefined, undefined, override)
    const link = this.namespace.escrowLink
    if (link.leaseValid(nowMs)) {
      if (tables.length === 1) {
        const l = this.limits[0] as Limit
        const rate = (l.table as EscrowTable).spend(key, cost, nowMs)
        if (rate === rate) return this.single(l, applied[0] as number, true, rate, nowMs, 0)
      } else {
        let covered = true
        for (let i = 0; i < tables.length && covered; i++) covered = (tables[i] as EscrowTable).covers(key, cost, nowMs)
        if (covered) {
          for (let i = 0; i < tables.length; i++) (tables[i] as EscrowTable).spend(key, cost, nowMs)
          return this.escrowAnswer(key, cost, nowMs, true, undefined)
        }
      }
    }
    for (let i = 0; i < tables.length; i++)
      if ((tables[i] as EscrowTable).refusedUntil(key) > nowMs) return this.escrowDenied(key, cost, nowMs, undefined)
    // the store is learning or just failed: onStoreError decides, without a call per hit
    const quiet = link.quiet(nowMs)
    if (quiet !== undefined) return this.escrowFallback(key, cost, nowMs, quiet)
    return link
      .grant(key, tables, cost, applied, nowMs, this.countDenied)
      .then((outcome) => this.afterGrant(key, cost, nowMs, override, outcome))
  }

  // A hit that asked for a grant: undefined outcome means another grant of the key was in flight (decide again).
  private afterGrant(
    key: string,
    cost: number,
    nowMs: number,
    override: number | undefined,
    outcome: GrantOutcome | undefined,
  ): Decision | Promise<Decision> {
    if (outcome === undefined) return this.hitEscrow(key, cost, nowMs, override)
    const applied = this.set.apply(key, override)
    if (!outcome.answered) return this.escrowFallback(key, cost, nowMs, outcome.error)
    const tables = this.tables as readonly EscrowTable[]
    // refused and counted by the store (and here, by the link): denied, nothing more to count
    if (outcome.counted) {
      for (let i = 0; i < tables.length; i++) {
        const table = tables[i] as EscrowTable
        table.refuse(key, table.refusalEnd(key, cost, applied[i] as number, nowMs))
      }
      return this.escrowAnswer(key, cost, nowMs, false, undefined)
    }
    let covered = true
    for (let i = 0; i < tables.length && covered; i++) covered = (tables[i] as EscrowTable).covers(key, cost, nowMs)
    if (covered) {
      for (let i = 0; i < tables.length; i++) (tables[i] as EscrowTable).spend(key, cost, nowMs)
      return this.escrowAnswer(key, cost, nowMs, true, undefined)
    }
    // the store had no room for it: denied here, without a store call, until room can come back
    for (let i = 0; i < tables.length; i++) {
      const table = tables[i] as EscrowTable
      if (!table.covers(key, cost, nowMs)) table.refuse(key, table.refusalEnd(key, cost, applied[i] as number, nowMs))
    }
    return this.escrowDenied(key, cost, nowMs, undefined)
  }

  // No grant could be had (the store failed, or is learning after it lost its data): onStoreError decides.
  private escrowFallback(key: string, cost: number, nowMs: number, error: StoreError | undefined): Decision {
    const ns = this.namespace
    const storeError =
      error ??
      new StoreError(
        'STORE_UNAVAILABLE',
        ns.escrowLink.strategyName,
        'escrow: the store is not granting budgets yet (it began a new epoch)',
      )
    const applied = this.set.current
    let allowed: boolean
    switch (ns.onStoreError) {
      case 'allow':
        allowed = true
        break
      case 'deny':
        allowed = false
        break
      case 'share': {
        // a process the store never answered does not know the fleet it would share with
        const n = ns.escrowLink.nodesSeen
        allowed = ns.escrowLink.answered
        for (let i = 0; i < this.tables.length && allowed; i++)
          allowed = (this.tables[i] as EscrowTable).mine(key, nowMs) + cost <= (applied[i] as number) / n
        break
      }
      default: {
        allowed = true
        for (let i = 0; i < this.tables.length && allowed; i++)
          allowed = (this.tables[i] as EscrowTable).rate(key, nowMs) + cost <= (applied[i] as number)
      }
    }
    if (allowed || this.countDenied)
      for (let i = 0; i < this.tables.length; i++) (this.tables[i] as EscrowTable).countOutside(key, cost, nowMs)
    return this.escrowAnswer(key, cost, nowMs, allowed, storeError)
  }

  // A denial on the budgets: counted outside them with countDenied (a penalty the next sync writes).
  private escrowDenied(key: string, cost: number, nowMs: number, storeError: StoreError | undefined): Decision {
    if (this.countDenied) for (let i = 0; i < this.tables.length; i++) (this.tables[i] as EscrowTable).countOutside(key, cost, nowMs)
    return this.escrowAnswer(key, cost, nowMs, false, storeError)
  }

  // The Decision of an escrow hit from this process's view (others' reservations as last granted).
  private escrowAnswer(key: string, cost: number, nowMs: number, allowed: boolean, storeError: StoreError | undefined): Decision {
    for (let i = 0; i < this.limits.length; i++) {
      const rate = (this.limits[i] as Limit).table.rate(key, nowMs)
      this.rates[i] = rate
      this.before[i] = allowed || this.countDenied ? rate - cost : rate
    }
    const d = this.decision(key, cost, nowMs, allowed, storeError)
    return allowed || !this.blocksOnDeny ? d : this.startBlock(d, key, cost, nowMs)
  }
}
