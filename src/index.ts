/**
 * ratelimiting: an eventually consistent sliding-window rate limiter (Kong's design) for Node.js.
 * This entry point holds the engine, the decisions, the headers and the memory strategy.
 */
import { RateLimiting } from './core/rate-limiting.js'
import { registerBuiltInStrategies } from './strategies/built-in.js'

registerBuiltInStrategies()

export type { AcquireErrorCode, AcquireOptions, ScheduleOptions } from './core/acquire.js'
export { AcquireError, DEFAULT_MAX_QUEUE } from './core/acquire.js'
export type { Clock, FakeClock } from './core/clock.js'
export { cachedClock, createFakeClock } from './core/clock.js'
export type { DictStats } from './core/counter-dict.js'
export type { ConfigErrorCode, StoreErrorCode, UsageErrorCode } from './core/errors.js'
export { ConfigError, StoreError } from './core/errors.js'
export type { HeaderMode, HeaderOptions } from './core/headers.js'
export { partitionKeyParam, rateLimitHeaders } from './core/headers.js'
export type { Decision, LimiterOptions, LimitSpec, LimitState } from './core/limiter.js'
export type { DecisionReason } from './core/key-lists.js'
export { Limiter } from './core/limiter.js'
export type { NamespaceStats } from './core/namespace.js'
export type { RefundOptions } from './core/refund.js'
export { storeErrorChannel } from './core/store-link.js'
export { syncChannel } from './core/sync-loop.js'
export type { NamespaceOptions, OnStoreError, SyncMode } from './core/options.js'
export { RateLimiting } from './core/rate-limiting.js'
export { hasStrategy, registerStrategy } from './core/registry.js'
export type {
  BlockWrite,
  CounterRow,
  DiffBatch,
  EscrowBatch,
  EscrowReply,
  GrantRequest,
  GrantRow,
  Strategy,
  StrategyFactory,
  WindowPush,
  WindowRef,
} from './core/strategy.js'
export { foldBlockWrites, type FoldedBlock } from './core/strategy.js'
export type { WindowSpan } from './core/strategy.js'
export { currentAndPrevious, hasLoneSurrogate, isStrategy, windowExpiresAtMs } from './core/strategy.js'
export type { TimeoutOptions } from './core/timeout.js'
export { withTimeout } from './core/timeout.js'
export { MAX_HIT_VALUE, MAX_WINDOW_MS, previousWeight, retryAfterMs, slidingRate, windowSizeMs, windowStartMs } from './core/window.js'
export type { MemoryStrategyOptions } from './strategies/memory.js'
export { MemoryStrategy } from './strategies/memory.js'

import type { Decision, Limiter, LimiterOptions } from './core/limiter.js'
import type { NamespaceOptions } from './core/options.js'

const shared = RateLimiting.default

/** Defines a namespace on the default instance (Kong's `ratelimiting.new`). */
function newNamespace(options: NamespaceOptions): void {
  shared.new(options)
}

export { newNamespace as new }

/** `increment` on the default instance. */
export function increment(key: string, windowSize: number, value = 1, namespace = 'default'): number | Promise<number> {
  return shared.increment(key, windowSize, value, namespace)
}

/** `slidingWindow` on the default instance. */
export function slidingWindow(key: string, windowSize: number, curDiff?: number, namespace = 'default'): number | Promise<number> {
  return shared.slidingWindow(key, windowSize, curDiff, namespace)
}

/** `sync` on the default instance. */
export function sync(namespace = 'default'): Promise<void> {
  return shared.sync(namespace)
}

/** `fetch` on the default instance. */
export function fetch(namespace = 'default', nowSec?: number, timeoutSec?: number): Promise<void> {
  return shared.fetch(namespace, nowSec, timeoutSec)
}

/** `limiter` on the default instance. */
export function limiter(options: LimiterOptions): Limiter {
  return shared.limiter(options)
}

/** `close` on the default instance. */
export function close(): Promise<void> {
  return shared.close()
}

/** Creates an isolated instance (Kong's `new_instance`). */
export function newInstance(name: string): RateLimiting {
  return RateLimiting.newInstance(name)
}

export type { Decision as RateLimitDecision }
