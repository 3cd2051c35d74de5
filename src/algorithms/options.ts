import type { Clock } from '../core/clock.js'
import { ConfigError, usageRangeError, usageTypeError } from '../core/errors.js'
import { type RedisAdapter, redisAdapter } from '../strategies/redis/scripts.js'
import { KeyNames } from './keys.js'
import type { AlgorithmOptions, AlgorithmResult, RedisAlgorithmOptions } from './types.js'

/** Options after validation. */
export interface ResolvedOptions {
  readonly limit: number
  readonly windowMs: number
  readonly clock: Clock
}

function positiveInteger(option: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1)
    throw new ConfigError('INVALID_OPTION', `${option} must be a positive integer, got ${String(value)}`)
  return value
}

/** Checks the options every algorithm shares, once, at construction. */
export function resolveOptions(options: AlgorithmOptions): ResolvedOptions {
  if (typeof options !== 'object' || options === null) throw new ConfigError('INVALID_OPTION', 'algorithm options must be an object')
  const limit = positiveInteger('limit', options.limit)
  const windowMs = positiveInteger('windowMs', options.windowMs)
  const clock = options.clock ?? Date.now
  if (typeof clock !== 'function')
    throw new ConfigError('INVALID_OPTION', `clock must be a function returning epoch ms, got ${typeof clock}`)
  return { limit, windowMs, clock }
}

/** Checks the Redis options. */
export function resolveRedisOptions(
  options: RedisAlgorithmOptions,
): ResolvedOptions & { client: RedisAdapter; keys: KeyNames; timeoutMs: number } {
  const base = resolveOptions(options)
  // the client's adapter, one per client (client-adapter.ts): its errors name what is wrong
  const client = redisAdapter(options.client)
  const keys = new KeyNames(options)
  const timeoutMs = options.timeoutMs ?? 1000
  if (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs <= 0)
    throw new ConfigError('INVALID_OPTION', `timeoutMs must be a positive number of ms, got ${String(timeoutMs)}`)
  const remember = options.rememberDenials as unknown
  if (remember !== undefined && typeof remember !== 'boolean')
    throw new ConfigError('INVALID_OPTION', `rememberDenials must be a boolean, got ${String(remember)}`)
  return { ...base, client, keys, timeoutMs }
}

/** Checks `maxKeys` of the memory algorithms. */
export function resolveMaxKeys(value: unknown): number {
  return value === undefined ? 1_000_000 : positiveInteger('maxKeys', value)
}

// A lone UTF-16 surrogate: UTF-8 cannot encode it, so Redis would store U+FFFD in its place and
// ids that differ only there would share a counter, as they would not in memory.
const LONE_SURROGATE = /\p{Cs}/u

/**
 * Why `userId` cannot be a key on every store alike, or undefined when it can: it must be
 * well-formed UTF-16 (no lone surrogate).
 */
export function userIdEncodingProblem(userId: string): string | undefined {
  const at = userId.search(LONE_SURROGATE)
  if (at < 0) return undefined
  const unit = userId.charCodeAt(at).toString(16).padStart(4, '0')
  return `userId must be well-formed Unicode, but has a lone surrogate \\u${unit} at index ${at}`
}

/** Per-request checks: cheap, with errors that name the argument. */
export function checkRequest(userId: unknown, cost: unknown): void {
  if (typeof userId !== 'string') throw usageTypeError('INVALID_KEY', `userId must be a string, got ${typeof userId}`)
  const problem = userIdEncodingProblem(userId)
  if (problem !== undefined) throw usageTypeError('INVALID_KEY', problem)
  if (typeof cost !== 'number' || !Number.isSafeInteger(cost) || cost < 1)
    throw usageRangeError('INVALID_VALUE', `cost must be a positive integer, got ${String(cost)}`)
}

/** `floor(limit - count)`, never below 0. */
export function remainingOf(limit: number, count: number): number {
  const left = limit - count
  return left > 0 ? Math.floor(left) : 0
}

/**
 * The answer of a fixed window whose bucket `index` holds `count` after the decision at `nowMs`:
 * the memory and Redis versions decide alike and answer alike.
 */
export function fixedWindowResult(
  limit: number,
  windowMs: number,
  index: number,
  nowMs: number,
  count: number,
  allowed: boolean,
  cost: number,
): AlgorithmResult {
  const resetMs = (index + 1) * windowMs - nowMs
  return {
    allowed,
    count,
    limit,
    remaining: remainingOf(limit, count),
    resetMs,
    retryAfterMs: allowed ? 0 : cost > limit ? Number.POSITIVE_INFINITY : resetMs,
  }
}
