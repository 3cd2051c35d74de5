import { type AcquireOptions, checkMaxQueue, keyQueuesOf, type ScheduleOptions } from './acquire.js'
import { BLOCK_MS_RULE, isBlockMs } from './blocks.js'
import type { WindowTable } from './counter-table.js'
import { ConfigError, usageRangeError } from './errors.js'
import type { Limit } from './limit-set.js'
import type { Decision, HitOptions, LimiterOptions, WindowCounts } from './limiter-types.js'
import { KeyLists, listedDecision, type ListVerdict } from './key-lists.js'
import type { Namespace } from './namespace.js'
import { type RefundOptions, refundTime, takeBack } from './refund.js'
import { RemoteDecisions } from './remote-decisions.js'

export type { Decision, HitOptions, LimiterOptions, LimitSpec, LimitState, WindowCounts } from './limiter-types.js'

/**
 * Decides hits against limits over a namespace's sliding-window counters. In local and
 * periodic namespaces `hit` returns a Decision synchronously; in synchronous ones, a Promise.
 *
 * @example
 * const limiter = rl.limiter({ namespace: 'api', limits: [{ limit: 100, window: 60 }] })
 * const d = await limiter.hit('1.2.3.4') // a Decision, or in a synchronous namespace a Promise of one
 * if (!d.allowed) console.log(`retry in ${d.retryAfterMs} ms`)
 */
export class Limiter extends RemoteDecisions {
  /** Option `maxQueue`. */
  readonly maxQueue: number
  // undefined when no list is set: the hot path then pays one field test
  private readonly lists: KeyLists | undefined

  constructor(namespace: Namespace, options: LimiterOptions) {
    if (typeof options !== 'object' || options === null) throw new ConfigError('INVALID_OPTION', 'limiter options must be an object')
    super(namespace, options)
    this.maxQueue = checkMaxQueue(options.maxQueue)
    this.lists = KeyLists.compile(options.denyList, options.allowList)
  }

  /**
   * Decides a hit of `cost` for `key` and counts it (if allowed, or always with `countDenied`).
   * `options.limit` replaces the limit for this hit (a limiter with one limit).
   */
  hit(key: string, cost = 1, options?: HitOptions): Decision | Promise<Decision> {
    const ns = this.namespace
    ns.check(key, cost)
    if (cost < 0) throw usageRangeError('INVALID_VALUE', `cost must be >= 0, got ${cost}`)
    const override = options === undefined ? undefined : this.set.overrideOf(options)
    const nowMs = ns.clock()
    if (this.lists !== undefined) {
      const verdict = this.lists.match(key)
      if (verdict !== undefined) return this.listed(verdict, key, override, nowMs)
    }
    if (ns.mode === 'synchronous') return this.hitRemote(key, cost, nowMs, override)
    const blocks = ns.blocks
    if (blocks !== undefined) {
      const until = blocks.check(key, nowMs)
      if (until !== 0) return this.blockedDecision(key, cost, nowMs, until, override, undefined)
    }
    if (ns.escrow) return this.hitEscrow(key, cost, nowMs, override)
    if (this.limits.length === 1) {
      const l = this.limits[0] as Limit
      const limit = override ?? (l.perKey === undefined ? l.limit : this.set.limitOf(l, key))
      const rate = l.table.decide(key, cost, limit, this.countDenied, nowMs)
      const allowed = l.table.lastAllowed
      const d = this.single(l, limit, allowed, rate, nowMs, allowed ? 0 : this.retryAfter(l, limit, key, cost, nowMs))
      return allowed || !this.blocksOnDeny ? d : this.startBlock(d, key, cost, nowMs)
    }
    const { rates, before } = this
    const applied = this.set.apply(key, override)
    let allowed = true
    let admissible = true // false when the cost exceeds a limit: no rate could ever admit it
    for (let i = 0; i < this.limits.length; i++) {
      const l = this.limits[i] as Limit
      const limit = applied[i] as number
      const rate = l.table.rate(key, nowMs)
      before[i] = rate
      rates[i] = rate
      if (rate + cost > limit) allowed = false
      if (cost > limit) admissible = false
    }
    if (allowed || (this.countDenied && admissible)) {
      for (let i = 0; i < this.limits.length; i++) rates[i] = (this.limits[i] as Limit).table.add(key, cost, nowMs)
    }
    const d = this.decision(key, cost, nowMs, allowed, undefined)
    return allowed || !this.blocksOnDeny ? d : this.startBlock(d, key, cost, nowMs)
  }

  /**
   * Decides a hit of `cost` for `key` and counts it, like {@link hit}, answering only whether it
   * was allowed: a boolean in local and periodic namespaces (one limit: no object is made at
   * all), a Promise of one in synchronous ones.
   */
  allow(key: string, cost = 1): boolean | Promise<boolean> {
    const ns = this.namespace
    if (
      ns.mode !== 'synchronous' &&
      !ns.escrow &&
      this.limits.length === 1 &&
      this.lists === undefined &&
      !this.set.dynamic &&
      ns.blocks === undefined
    ) {
      ns.check(key, cost)
      if (cost < 0) throw usageRangeError('INVALID_VALUE', `cost must be >= 0, got ${cost}`)
      const l = this.limits[0] as Limit
      l.table.decide(key, cost, l.limit, this.countDenied, ns.clock())
      return l.table.lastAllowed
    }
    const d = this.hit(key, cost)
    return d instanceof Promise ? d.then(isAllowed) : d.allowed
  }

  /**
   * What each of the limiter's windows holds for `key` at `atMs` (default now), in this process's
   * view: nothing is counted and the store is not asked.
   */
  counts(key: string, atMs?: number): WindowCounts[] {
    const nowMs = atMs ?? this.namespace.clock()
    return this.limits.map((l) => ({
      name: l.name,
      window: l.window,
      ...l.table.counts(key, nowMs),
      resetMs: l.table.msToWindowEnd(nowMs),
    }))
  }

  /** The decision a hit of cost 1 would get now, without counting anything (`options` as for {@link hit}). */
  peek(key: string, options?: HitOptions): Decision | Promise<Decision> {
    const ns = this.namespace
    ns.check(key, 1)
    const override = options === undefined ? undefined : this.set.overrideOf(options)
    const nowMs = ns.clock()
    if (this.lists !== undefined) {
      const verdict = this.lists.match(key)
      if (verdict !== undefined) return this.listed(verdict, key, override, nowMs)
    }
    if (ns.mode === 'synchronous') return this.peekRemote(key, 1, nowMs, override)
    const blocks = ns.blocks
    if (blocks !== undefined) {
      const until = blocks.check(key, nowMs)
      if (until !== 0) return this.blockedDecision(key, 1, nowMs, until, override, undefined)
      // a peek counts nothing, so no table queues the key: the next sync reads its block all the same
      blocks.touch(key)
    }
    return this.peekLocal(key, 1, nowMs, undefined, undefined, override)
  }

  /** @internal The smallest limit `key` is held to (acquire's test of a cost no wait can admit). */
  smallestLimit(key: string): number {
    return this.set.smallest(key)
  }

  /**
   * Waits until a hit of `cost` for `key` is admitted, counts it, and resolves with its Decision:
   * FIFO per key, one timer per key, a denied try never counted. Rejects with an `AcquireError`
   * (`ACQUIRE_ABORTED`, `ACQUIRE_TIMEOUT`, `QUEUE_FULL`, `NEVER_ALLOWED`, `ACQUIRE_CLOSED`),
   * nothing counted. See docs/QUEUEING.md.
   *
   * @example
   * await limiter.acquire('github-api')          // then call the API
   * await limiter.acquire('github-api', 5, { maxWaitMs: 10_000, signal: AbortSignal.timeout(30_000) })
   */
  acquire(key: string, cost = 1, options?: AcquireOptions): Promise<Decision> {
    return keyQueuesOf(this).acquire(key, cost, options)
  }

  /**
   * Runs `fn` once a hit for `key` is admitted ({@link acquire}) and returns its result. If `fn`
   * throws or rejects, so does `schedule`, and the hit stays counted: it was admitted and used.
   *
   * @example
   * const user = await limiter.schedule('github-api', () => fetch('https://api.github.com/users/octocat'))
   */
  async schedule<T>(key: string, fn: () => T | PromiseLike<T>, options?: ScheduleOptions): Promise<T> {
    if (typeof fn !== 'function') throw new TypeError(`schedule needs a function to run, got ${typeof fn}`)
    await this.acquire(key, options?.cost ?? 1, options)
    return await fn()
  }

  /**
   * Takes back a hit of `cost` this process counted for `key` (a request that failed on your
   * side, or that should not count): in every limit, in the window that counted it (`at`, the
   * hit's time, default now), never below zero. Local and periodic namespaces resolve at once
   * (the next sync stores it); a synchronous one once the store has it. A store failure does
   * not reject: the refund stays local and is pushed by a later sync, as hits are.
   *
   * @example
   * const at = limiter.clock()
   * const d = await limiter.hit(user)
   * if (d.allowed && (await callUpstream()).status >= 500) await limiter.refund(user, 1, { at })
   */
  refund(key: string, cost = 1, options?: RefundOptions): Promise<void> {
    const ns = this.namespace
    ns.check(key, cost)
    if (cost < 0) throw usageRangeError('INVALID_VALUE', `refund cost must be >= 0, got ${cost}`)
    const nowMs = ns.clock()
    const atMs = refundTime(options, nowMs)
    // a listed key was never counted
    if (cost === 0 || (this.lists !== undefined && this.lists.match(key) !== undefined)) return Promise.resolve()
    for (let i = 0; i < this.tables.length; i++) takeBack(this.tables[i] as WindowTable, key, cost, atMs, nowMs, ns.resetFloors)
    if (ns.mode !== 'synchronous') return Promise.resolve()
    return ns.pushKey(key, this.tables, nowMs).then(
      () => undefined,
      () => undefined,
    )
  }

  /** Resets `key` in every window of the namespace and lifts its block (fleet-wide when the namespace syncs). */
  reset(key: string): Promise<void> {
    return this.namespace.resetKey(key)
  }

  /**
   * Blocks `key` for `ms` from now: every hit of it, on every limiter of the namespace, is denied
   * (`reason: 'blocked'`, nothing counted) until then, whatever the counts say. A block is never
   * shortened by another (the later end wins: {@link unblock} first to shorten one). In a synced
   * namespace it reaches the fleet through the store: a synchronous one resolves once stored, a
   * periodic one at once (stored by the next sync). A store failure does not reject: the block
   * holds here and is pushed again, as hits are. Resolves with when the block ends, epoch ms.
   *
   * @example
   * await limiter.block(ip, 15 * 60_000) // after a credential-stuffing alert
   */
  block(key: string, ms: number): Promise<number> {
    const ns = this.namespace
    ns.check(key, 0)
    if (!isBlockMs(ms)) throw usageRangeError('INVALID_VALUE', `block duration must be ${BLOCK_MS_RULE}, got ${String(ms)}`)
    const nowMs = ns.clock()
    const end = ns.enableBlocking('limiter.block()').block(key, Math.ceil(nowMs + ms), nowMs)
    return this.stored(key, nowMs).then(() => end)
  }

  /** Lifts `key`'s block, here and (when the namespace syncs) fleet-wide; its counts are left as they are. */
  unblock(key: string): Promise<void> {
    const ns = this.namespace
    ns.check(key, 0)
    ns.enableBlocking('limiter.unblock()').lift(key)
    return this.stored(key, ns.clock())
  }

  // A synchronous namespace's block op pushed now (resolves either way: a failure is retried).
  private stored(key: string, nowMs: number): Promise<void> {
    if (this.namespace.mode !== 'synchronous') return Promise.resolve()
    return this.namespace.pushKey(key, this.tables, nowMs).then(
      () => undefined,
      () => undefined,
    )
  }

  // The decision of a listed key, with the limits that key would have.
  private listed(
    verdict: NonNullable<ListVerdict>,
    key: string,
    override: number | undefined,
    nowMs: number,
  ): Decision | Promise<Decision> {
    const synchronous = this.namespace.mode === 'synchronous'
    if (!this.set.dynamic && override === undefined) return listedDecision(verdict, this.limits, nowMs, synchronous)
    const applied = this.set.apply(key, override)
    return listedDecision(
      verdict,
      this.limits.map((l, i) => ({ ...l, limit: applied[i] as number })),
      nowMs,
      synchronous,
    )
  }
}

function isAllowed(d: Decision): boolean {
  return d.allowed
}
