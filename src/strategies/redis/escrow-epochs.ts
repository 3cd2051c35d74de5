/**
 * What a RedisStrategy process knows of an escrow namespace's epochs (docs/STORES-redis.md,
 * "Escrow"). The store keeps an epoch per group: the namespace on a single server that batches
 * across slots, else each hash slot (a script call names keys of one slot only, so a Cluster
 * cannot hold one epoch per namespace). The engine wants one epoch per namespace
 * (`EscrowReply.epochMs`: a new value means the store lost reservations), so the groups' epochs
 * are folded into one here:
 *
 * - a group seen for the first time tells nothing (this process holds no budget there);
 * - a group whose epoch changed since this process last heard from it lost its data (a restart,
 *   or its key expired: when this process last heard from it longer ago than the key's lifetime,
 *   nothing it held there still counts, so that is not a loss);
 * - a group whose generation (one more per call) is not above the last one answered lost writes
 *   it had answered (a failover to a replica that missed them): the next call renews its epoch,
 *   so every process learns it and the store refuses grants there while they write their hits again.
 *
 * A loss raises the reported epoch, so the engine drops every budget of the namespace. Replies
 * are ordered by arrival (`recv`): a part that arrived before the part that showed a loss may
 * tell of reservations the store no longer holds, so the call it belongs to is answered as stale
 * (an epoch older than any reported: the engine ignores its rows), or, for the call that showed
 * the loss itself, such parts' rows are answered as holding nothing.
 */

/** What one script call answered of its group. */
export interface GroupAnswer {
  readonly group: number
  readonly epoch: string
  readonly generation: number
  readonly learning: boolean
  readonly nodes: number
  /** Whether the call carried grants. */
  readonly grants: boolean
  /** Arrival order among every part this strategy received. */
  readonly recv: number
}

interface GroupState {
  epoch: string
  generation: number
  /** Arrival order of the newest answer taken. */
  recv: number
  /** The engine's clock at the newest answer's call. */
  seenAtMs: number
  /** The epoch it had before the current one (a late reply carrying it is stale). */
  past: string | undefined
  /** An epoch this process asked the store to replace (its writes were lost). */
  renew: string | undefined
}

/** How a call's answer is folded into the namespace's. */
export interface FoldedAnswer {
  readonly epochMs: number
  readonly learning: boolean
  readonly nodes: number
  /** Indexes (in the call's parts) whose rows must be answered as holding nothing. */
  readonly unknown: ReadonlySet<number>
}

const NONE: ReadonlySet<number> = new Set()

/** Lifetime of a group key at least, ms: long enough that a slot in use keeps its epoch (a new one pauses grants there for learnMs). */
const MIN_GROUP_TTL_MS = 600_000

/** One namespace's epochs, per strategy instance. */
export class NamespaceEpochs {
  private epochMs: number | undefined
  // arrival of the part that showed the last loss
  private revealRecv = -1
  private nodes = 0
  private nodesAtMs = Number.NEGATIVE_INFINITY
  private maxSizeMs = 0
  private readonly groups = new Map<number, GroupState>()
  private last: number | undefined
  // master -> [a group on it this process heard from last, when it was last probed]
  private readonly masters = new Map<string, { group: number; probedAtMs: number }>()

  /** A window size the namespace uses (the group key's lifetime covers the longest). */
  noteSize(sizeMs: number): void {
    if (sizeMs > this.maxSizeMs) this.maxSizeMs = sizeMs
  }

  /** The group key's lifetime from each refresh, ms: three windows, the grace and two learning periods, at least 10 minutes. */
  ttlMs(graceMs: number, learnMs: number): number {
    return Math.ceil(Math.max(MIN_GROUP_TTL_MS, 3 * this.maxSizeMs + graceMs + 2 * learnMs))
  }

  /** The processes the namespace's calls saw lately (per slot on a Cluster, so the largest count is passed to the script). */
  hint(nowMs: number, learnMs: number): number {
    return nowMs - this.nodesAtMs <= learnMs ? this.nodes : 0
  }

  /** A group this process heard from last, if any: what a call with nothing to send asks for the epoch. */
  lastGroup(): number | undefined {
    return this.last
  }

  /** The epoch the next call to `group` asks the store to replace, or ''. */
  renewOf(group: number): string {
    return this.groups.get(group)?.renew ?? ''
  }

  /**
   * Groups to call besides those of a sync's own call: one known group per master not called for
   * `learnMs / 4`, so that a master that restarted is noticed within that time even where this
   * process holds budget but has nothing to ask or write.
   */
  probes(called: ReadonlySet<number>, masterOf: (group: number) => string, nowMs: number, learnMs: number): number[] {
    const probes: number[] = []
    for (const group of called) {
      const m = this.masters.get(masterOf(group))
      if (m !== undefined) m.probedAtMs = nowMs
    }
    for (const m of this.masters.values()) {
      if (nowMs - m.probedAtMs < learnMs / 4 || called.has(m.group)) continue
      m.probedAtMs = nowMs
      probes.push(m.group)
    }
    return probes
  }

  /**
   * Folds a call's answers (in the call's order) into the namespace's epoch. Learning: when a
   * part with grants is (its grants were refused; those of other parts were answered, but the
   * engine takes the reply as a whole), or, in a call without grants, when every part is.
   */
  fold(parts: readonly GroupAnswer[], masterOf: (group: number) => string, nowMs: number, graceMs: number, learnMs: number): FoldedAnswer {
    const withGrants = parts.some((part) => part.grants)
    let learning = !withGrants && parts.length > 0
    let nodes = 1
    let stale = false
    let revealed = false
    const ttlMs = this.ttlMs(graceMs, learnMs)
    for (const part of parts) {
      if (withGrants) {
        if (part.grants && part.learning) learning = true
      } else if (!part.learning) learning = false
      if (part.nodes > nodes) nodes = part.nodes
      const st = this.groups.get(part.group)
      if (st === undefined) {
        this.groups.set(part.group, {
          epoch: part.epoch,
          generation: part.generation,
          recv: part.recv,
          seenAtMs: nowMs,
          past: undefined,
          renew: undefined,
        })
        if (this.epochMs === undefined) this.epochMs = Number(part.epoch)
        this.noteMaster(part.group, masterOf, nowMs)
        continue
      }
      if (part.recv < st.recv) {
        // older news than what this process took already: stale when the epoch has moved on since
        if (part.epoch !== st.epoch) stale = true
        continue
      }
      if (part.epoch === st.epoch) {
        if (part.generation <= st.generation) {
          // the store answered calls of this group that it no longer remembers: it lost writes
          st.renew = st.epoch
          if (st.recv > this.revealRecv) revealed = this.reveal(part, nowMs) || revealed
        }
        st.generation = part.generation
      } else if (part.epoch === st.past) {
        stale = true
        continue
      } else {
        // a new epoch: a loss, unless asked for, or unless nothing this process knew of the group still counts
        const asked = st.renew !== undefined
        const expired = nowMs - st.seenAtMs >= ttlMs - learnMs
        if (!asked && !expired && st.recv > this.revealRecv) revealed = this.reveal(part, nowMs, Number(part.epoch)) || revealed
        st.past = st.epoch
        st.epoch = part.epoch
        st.generation = part.generation
        st.renew = undefined
      }
      st.recv = part.recv
      if (nowMs > st.seenAtMs) st.seenAtMs = nowMs
      this.noteMaster(part.group, masterOf, nowMs)
    }
    if (nodes >= this.nodes || nowMs - this.nodesAtMs > learnMs) {
      this.nodes = nodes
      this.nodesAtMs = nowMs
    }
    const epochMs = this.epochMs as number
    if (revealed) {
      // parts that arrived before the loss showed may hold what the store lost
      const unknown = new Set<number>()
      parts.forEach((part, i) => {
        if (part.recv < this.revealRecv) unknown.add(i)
      })
      return { epochMs, learning, nodes, unknown }
    }
    if (stale || parts.some((part) => part.recv < this.revealRecv))
      return { epochMs: Number.NEGATIVE_INFINITY, learning, nodes, unknown: NONE }
    return { epochMs, learning, nodes, unknown: NONE }
  }

  private reveal(part: GroupAnswer, nowMs: number, epochMs = nowMs): boolean {
    this.epochMs = Math.max((this.epochMs ?? Number.NEGATIVE_INFINITY) + 1, epochMs)
    if (part.recv > this.revealRecv) this.revealRecv = part.recv
    return true
  }

  private noteMaster(group: number, masterOf: (group: number) => string, nowMs: number): void {
    this.last = group
    const master = masterOf(group)
    const m = this.masters.get(master)
    if (m === undefined) this.masters.set(master, { group, probedAtMs: nowMs })
    else m.group = group
  }
}
