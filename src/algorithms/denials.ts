/**
 * Denials the Redis algorithms remember, so that a user who keeps trying while denied costs no
 * Redis call until the denial can end (docs/SERVICE.md, "Denials answered locally"). A fixed
 * window's count only grows until its window ends: a cost at least the denied one, under a limit
 * at most the denied one, is denied until then. A full sliding log denies a request of cost 1
 * until its first entry leaves, at the time its script reports (a denied request is not logged),
 * and its count stays as it was till then. Only a reset could end a denial sooner, and a reset
 * through this process forgets it. Envoy's ratelimit service keeps such a cache of over-limit
 * keys for the same reason.
 */

import { DELETE_KEY } from './lua.js'
import { runScript } from './redis-script.js'
import type { RedisAdapter } from '../strategies/redis/scripts.js'

/** A remembered denial of one key. */
export interface Denial {
  /** When it can end, epoch ms (the clock the algorithm decides by). */
  readonly untilMs: number
  /** The cost denied, and the limit it was denied under. */
  readonly cost: number
  readonly limit: number
  /**
   * The fixed window's: a larger cost or a lower limit is denied until the same end, the
   * window's. A sliding log's wait depends on both, so only the same cost and limit are answered.
   */
  readonly untilWindowEnd: boolean
  /**
   * The count the store reported with the denial, or with a later request of the key it
   * answered ({@link Denials.refresh}), plus {@link local}: the fixed window adds the cost of each
   * request it answers here when denied requests count, so its answers go on as Redis's would.
   */
  count: number
  /**
   * The costs answered here so far in this window, which Redis never saw: a later denial of the
   * key from Redis (a request sent before this one was known) keeps them in its count.
   */
  local: number
  /** The sliding log's reset time then, epoch ms (the fixed window computes its own). */
  readonly resetAtMs: number
}

/** The most denials remembered at once, by default. */
export const MAX_DENIALS = 100_000

/**
 * Denials by key name, shared by an algorithm and its `withLimit()` variants (a reset through
 * any of them forgets the key's). Bounded: when full, the denial remembered longest ago is
 * forgotten, in constant time (a flood of denied keys must not make each one cost a sweep);
 * forgetting one only costs its next request a Redis call. An ended denial goes when it is next
 * read, or as the oldest.
 */
export class Denials {
  private readonly entries = new Map<string, Denial>()
  // The last check of each key sent to the store and not answered yet (or waiting for one)
  private readonly inFlight = new Map<string, Promise<unknown>>()
  private readonly max: number
  /** Requests answered from a remembered denial so far (the Redis calls they did not make). */
  answered = 0

  constructor(max = MAX_DENIALS) {
    this.max = max
  }

  /** Denials held now. */
  get size(): number {
    return this.entries.size
  }

  /**
   * The denial that answers a request of `cost` under `limit` at `nowMs`, if one does; counted in
   * {@link answered} unless `answering` is false (a read that asks Redis anyway).
   */
  get(key: string, cost: number, limit: number, nowMs: number, answering = true): Denial | undefined {
    const denial = this.entries.get(key)
    if (denial === undefined) return undefined
    if (nowMs >= denial.untilMs) {
      this.entries.delete(key)
      return undefined
    }
    const holds = denial.untilWindowEnd ? cost >= denial.cost && limit <= denial.limit : cost === denial.cost && limit === denial.limit
    if (!holds) return undefined
    if (answering) this.answered++
    return denial
  }

  /** The costs of `key` answered here in its window so far, which the store never counted (see {@link Denial.local}). */
  local(key: string, nowMs: number): number {
    const denial = this.entries.get(key)
    return denial === undefined || nowMs >= denial.untilMs ? 0 : denial.local
  }

  /**
   * Remembers a denial the store made. A later one of the key replaces it, with the costs
   * answered here added to the store's count: the store never counted them.
   */
  set(key: string, denial: Denial, nowMs: number): void {
    if (!(denial.untilMs > nowMs) || !Number.isFinite(denial.untilMs)) return
    const previous = this.entries.get(key)
    if (previous !== undefined && previous.local > 0) {
      denial.local += previous.local
      denial.count += previous.local
    }
    if (!this.entries.delete(key) && this.entries.size >= this.max) {
      const oldest = this.entries.keys().next()
      if (oldest.done !== true) this.entries.delete(oldest.value)
    }
    this.entries.set(key, denial)
  }

  /**
   * The store's count of `key` after a request it answered: a denial held for the key answers
   * with it from then on (plus the costs answered here), since a request the denial did not
   * answer (a smaller cost, a higher limit) may have been admitted.
   */
  refresh(key: string, count: number): void {
    const denial = this.entries.get(key)
    if (denial !== undefined) denial.count = count + denial.local
  }

  /**
   * Notes `call`, a check of `key` sent to the store, until {@link settled}: meanwhile an answer
   * of the key from its denial waits for it ({@link after}), since the store runs the checks in
   * the order sent and its answer may change the count the denial answers with.
   */
  sent(key: string, call: Promise<unknown>): void {
    this.inFlight.set(key, call)
  }

  /** `call` of `key` is answered (or failed). */
  settled(key: string, call: Promise<unknown>): void {
    if (this.inFlight.get(key) === call) this.inFlight.delete(key)
  }

  /**
   * The denial to answer with once the checks of `key` sent before are answered (their answers
   * may change its count): `held`, or the one an answer replaced it with. Answers of the key made
   * meanwhile wait for this one in turn.
   */
  async after(key: string, held: Denial): Promise<Denial> {
    const before = this.inFlight.get(key)
    if (before !== undefined) {
      const waiting = before.then(noop, noop)
      this.sent(key, waiting)
      await waiting
      this.settled(key, waiting)
    }
    return this.entries.get(key) ?? held
  }

  /** Whether a check of `key` is on its way to the store (or waiting for one). */
  pending(key: string): boolean {
    return this.inFlight.has(key)
  }

  /** Forgets the denial of `key` (a reset). */
  delete(key: string): void {
    this.entries.delete(key)
  }
}

/**
 * A reset of one key: deletes it (a Redis `type` key, checked by DELETE_KEY) and forgets its
 * denial, before the call and again after it: a check sent before the reset may come back
 * denied, and be remembered, while the reset is on its way.
 */
export async function resetKey(
  client: RedisAdapter,
  denials: Denials | undefined,
  key: string,
  type: 'string' | 'zset',
  timeoutMs: number,
  what: string,
): Promise<void> {
  denials?.delete(key)
  await runScript(client, DELETE_KEY, [key], [type], timeoutMs, what, 1)
  denials?.delete(key)
}

function noop(): void {}
