/**
 * ratelimiting/nestjs: a storage for @nestjs/throttler 6 backed by the engine (a sliding window,
 * fleet-wide with a strategy, blocks kept by the engine). Only types are imported from
 * @nestjs/throttler, which stays an optional peer dependency.
 */
import type { ThrottlerStorage } from '@nestjs/throttler'
import { BLOCK_MS_RULE, isBlockMs } from '../core/blocks.js'
import type { Decision, HitOptions, Limiter } from '../core/limiter.js'
import { RateLimiting } from '../core/rate-limiting.js'
import { isPromiseLike, optionError, windowSizeOf, withWindowOption } from './common.js'
import { checkEngineOptions, defineOwn, type EngineOptions } from './engine.js'

export type { EngineOptions } from './engine.js'

const STORAGE = 'RateLimitingThrottlerStorage'

/** What `increment` answers: @nestjs/throttler's ThrottlerStorageRecord (its index does not export the type). */
export type ThrottlerStorageRecord = Awaited<ReturnType<ThrottlerStorage['increment']>>

/**
 * Options of {@link RateLimitingThrottlerStorage}: where it counts. Without a `strategy` the
 * counts stay in the process; `namespace` prefixes the names of the namespaces the storage
 * defines (one per `ttl`), so two storages built with the same options on one store share their
 * counts. @default namespace "nestjs-throttler"
 */
export type RateLimitingThrottlerStorageOptions = EngineOptions

// The throttler's own storage answers its times in seconds, rounded up, and its guard sends
// timeToBlockExpire as Retry-After, which is whole seconds (RFC 9110 §10.2.3): rounded up, a
// client that waits that long is never early
function toSeconds(ms: number): number {
  return Math.ceil(ms / 1000)
}

/**
 * A storage for @nestjs/throttler 6 (`ThrottlerModule.forRoot({ throttlers, storage })`): the
 * engine's sliding window instead of the throttler's timers, the throttler's named throttlers as
 * several limits, and with a `strategy` one limit for the whole fleet, in any sync mode.
 *
 * Each `increment(key, ttl, limit, blockDuration, throttlerName)` is one request of `key` under
 * the throttler `throttlerName` (each name counts apart, as the throttler's own storage keys
 * them), in a sliding window of `ttl` ms. A request is allowed iff the sliding count plus one is
 * at most `limit`; only allowed requests count. A denied one blocks the key for `blockDuration`
 * ms (the engine's blocks: fleet-wide with a strategy); a `blockDuration` of 0 or less (which
 * throttler 6.7.1 passes through; earlier releases send the ttl instead) blocks nothing. The
 * record answers in the throttler's units, seconds rounded up: `totalHits` is the sliding count
 * with this request (rounded up), `timeToExpire` the time to the end of the current window (the
 * guard's X-RateLimit-Reset), and when `isBlocked`, `timeToBlockExpire` the time until a request
 * is allowed again: the block's end, or later when the counts still deny then (the guard's
 * Retry-After).
 *
 * A `limit` below 1 denies every request and counts none; a `ttl` the engine cannot hold (not a
 * whole positive number of ms) is a ConfigError, which the guard turns into a 500. When the store
 * fails in synchronous mode, `onStoreError` decides: the throttler has no option of its own for
 * it, so unset it is the engine's "local" (decide on this process's counts).
 *
 * @example
 * ThrottlerModule.forRoot({ throttlers: [{ ttl: 60_000, limit: 100 }], storage: new RateLimitingThrottlerStorage() })
 */
export class RateLimitingThrottlerStorage implements ThrottlerStorage {
  /** The base name of the namespaces the storage uses (with `rateLimiting`: your namespace). */
  readonly namespace: string
  private readonly options: RateLimitingThrottlerStorageOptions
  private readonly user: RateLimiting | undefined
  private readonly rl: RateLimiting
  /** Namespace name of each ttl (ms) used so far. */
  private readonly namespaces = new Map<number, string>()
  /** The limiter of each ttl and blockDuration used so far (ms); the limit comes with each hit. */
  private readonly limiters = new Map<number, Map<number, Limiter>>()
  /** The hit options of each limit used so far: one object per limit, not per request. */
  private readonly hitOptions = new Map<number, HitOptions>()
  /** Key prefix of each throttler name. */
  private readonly prefixes = new Map<string, string>()

  constructor(options: RateLimitingThrottlerStorageOptions = {}) {
    if (typeof options !== 'object' || options === null) throw optionError(STORAGE, 'options', 'an object', options)
    this.options = options
    this.user = checkEngineOptions(options, STORAGE)
    this.namespace = options.namespace ?? 'nestjs-throttler'
    this.rl = this.user ?? RateLimiting.newInstance(STORAGE)
  }

  /** Counts one request of `key` for the throttler `throttlerName`; see the class for the answer. */
  increment(key: string, ttl: number, limit: number, blockDuration: number, throttlerName: string): Promise<ThrottlerStorageRecord> {
    let decided: Decision | Promise<Decision>
    try {
      if (typeof limit !== 'number' || Number.isNaN(limit)) throw optionError(STORAGE, 'limit', 'a number', limit)
      if (typeof blockDuration !== 'number' || Number.isNaN(blockDuration))
        throw optionError(STORAGE, 'blockDuration', 'a number of ms', blockDuration)
      const limiter = this.limiter(ttl, blockDuration > 0 ? blockDuration : 0)
      // no request fits under a limit below 1: the throttler's own storage denies every one too
      if (limit < 1) return Promise.resolve(denyAll(ttl, blockDuration))
      decided = limiter.hit(this.prefix(throttlerName) + key, 1, this.hitOptions.get(limit) ?? this.optionsFor(limit))
    } catch (err) {
      return Promise.reject(err)
    }
    return isPromiseLike(decided) ? decided.then(toRecord) : Promise.resolve(toRecord(decided))
  }

  /**
   * Stops the storage's own engine, pushing unsynced hits (periodic mode); a `rateLimiting` you
   * passed is left as it is. The storage stays usable: its next request starts the engine again
   * (without a strategy, with no counts, as the throttler's own storage after its shutdown).
   */
  async close(): Promise<void> {
    this.namespaces.clear()
    this.limiters.clear()
    if (this.user === undefined) await this.rl.close()
  }

  /** Nest's shutdown hook, called by `app.close()`: {@link close}. */
  onApplicationShutdown(): Promise<void> {
    return this.close()
  }

  private limiter(ttl: number, blockMs: number): Limiter {
    let byBlock = this.limiters.get(ttl)
    const known = byBlock?.get(blockMs)
    if (known !== undefined) return known
    const windowSec = windowSizeOf(STORAGE, 'ttl', ttl)
    if (blockMs !== 0 && !isBlockMs(blockMs)) throw optionError(STORAGE, 'blockDuration', BLOCK_MS_RULE, blockMs)
    // the limit here is a placeholder: every hit brings the throttler's own. Denied requests do
    // not count: the block is the penalty, and the throttler's own storage forgets the hits of
    // a blocked key when its block ends
    const limits = [{ limit: 1, window: windowSec, ...(blockMs > 0 ? { blockMs } : {}) }]
    const made = withWindowOption(STORAGE, 'ttl', ttl, () =>
      this.rl.limiter({ namespace: this.namespaceFor(ttl, windowSec), limits, countDenied: false }),
    )
    if (byBlock === undefined) this.limiters.set(ttl, (byBlock = new Map()))
    byBlock.set(blockMs, made)
    return made
  }

  private optionsFor(limit: number): HitOptions {
    // an infinite limit (no limit) is one no count reaches: the engine takes finite limits only
    const made = { limit: Math.min(limit, Number.MAX_SAFE_INTEGER) }
    // a limit resolved per request (a function of the context) may take many values: keep a few
    if (this.hitOptions.size >= 1024) this.hitOptions.clear()
    this.hitOptions.set(limit, made)
    return made
  }

  private namespaceFor(ttl: number, windowSec: number): string {
    const known = this.namespaces.get(ttl)
    if (known !== undefined) return known
    let name = this.namespace
    if (this.user === undefined) {
      // named as the store adapters name theirs: equal options on one store share the counts
      name = `${this.namespace}-${windowSec}s`
      defineOwn(this.rl, name, [windowSec], this.options)
    }
    this.namespaces.set(ttl, name)
    return name
  }

  /** `<throttlerName>:`, with "%" and ":" escaped in the name, so that no two (name, key) pairs meet. */
  private prefix(throttlerName: string): string {
    const known = this.prefixes.get(throttlerName)
    if (known !== undefined) return known
    if (typeof throttlerName !== 'string') throw optionError(STORAGE, 'throttlerName', 'a string', throttlerName)
    const made = `${throttlerName.replaceAll('%', '%25').replaceAll(':', '%3A')}:`
    this.prefixes.set(throttlerName, made)
    return made
  }
}

/** The throttler's record of one decision. */
function toRecord(d: Decision): ThrottlerStorageRecord {
  // a denied request is not counted (the decision's rate is before it) but is one of the hits
  const totalHits = Math.max(1, Math.ceil(d.allowed ? d.rate : d.rate + 1))
  const timeToExpire = Math.max(1, toSeconds(d.resetMs))
  if (d.allowed) return { totalHits, timeToExpire, isBlocked: false, timeToBlockExpire: 0 }
  // at least 1: a denied client is never told to come back now (a store failure under "deny")
  const timeToBlockExpire = Number.isFinite(d.retryAfterMs) ? Math.max(1, toSeconds(d.retryAfterMs)) : timeToExpire
  return { totalHits, timeToExpire, isBlocked: true, timeToBlockExpire }
}

/** The record of a request under a limit no request fits: denied, counted nowhere. */
function denyAll(ttl: number, blockDuration: number): ThrottlerStorageRecord {
  const timeToExpire = Math.max(1, toSeconds(ttl))
  const timeToBlockExpire = blockDuration > 0 ? Math.max(1, toSeconds(blockDuration)) : timeToExpire
  return { totalHits: 1, timeToExpire, isBlocked: true, timeToBlockExpire }
}
