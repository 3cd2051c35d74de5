/**
 * What every framework adapter shares: errors that name the option, window sizes from ms, the
 * default answers, and the helpers that keep synchronous values synchronous. Nothing here
 * imports a framework. The engine behind a store adapter is in engine.ts, our own middleware's
 * framework-free part in middleware.ts.
 */
import { ConfigError } from '../core/errors.js'

/** How a value is shown in an error message. */
export function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value)
  if (typeof value === 'function') return 'a function'
  if (typeof value === 'object' && value !== null) return 'an object'
  return String(value)
}

/** A ConfigError naming the option of `who` that was refused. */
export function optionError(who: string, option: string, expected: string, value: unknown): ConfigError {
  return new ConfigError('INVALID_OPTION', `${who}: ${option} must be ${expected}, got ${show(value)}`)
}

/**
 * The engine's window size (seconds, fractions down to 1 ms) of a window given in ms by a
 * framework option, or a ConfigError naming that option. The engine decides what it can
 * represent; its refusal is reworded to name the framework's option.
 */
export function windowSizeOf(who: string, option: string, windowMs: unknown): number {
  if (typeof windowMs !== 'number' || !Number.isSafeInteger(windowMs) || windowMs <= 0)
    throw optionError(who, option, 'a positive whole number of ms', windowMs)
  return windowMs / 1000
}

/** Runs `define`, rewording an engine ConfigError about the window to name `option`. */
export function withWindowOption<T>(who: string, option: string, windowMs: number | string, define: () => T): T {
  try {
    return define()
  } catch (err) {
    if (err instanceof ConfigError && /window/i.test(err.message))
      throw new ConfigError(err.code, `${who}: ${option} ${windowMs} ms: ${err.message}`)
    throw err
  }
}

/** The default body of a denied request (express-rate-limit's message). */
export const TOO_MANY_REQUESTS = 'Too many requests, please try again later.'
/** The default body when the store failed and `onStoreError` is "deny". */
export const LIMITER_UNAVAILABLE = 'Rate limiting is unavailable, please try again later.'

/** express-rate-limit's default policy name: `100-in-1min`, `5-in-30sec`, `1000-in-1day`. */
export function policyName(limit: number, windowMs: number): string {
  const seconds = windowMs / 1000
  const minutes = seconds / 60
  const hours = minutes / 60
  const days = hours / 24
  let duration: string
  if (seconds < 60) duration = `${seconds}sec`
  else if (minutes < 60) duration = `${minutes}min`
  else if (hours < 24) duration = `${hours}hr${hours > 1 ? 's' : ''}`
  else duration = `${days}day${days > 1 ? 's' : ''}`
  return `${limit}-in-${duration}`
}

/** Whether a callback answered a promise (or any thenable). */
export function isPromiseLike<T>(value: T | PromiseLike<T>): value is PromiseLike<T> {
  return typeof (value as { then?: unknown } | null)?.then === 'function'
}

/** `next(value)`, after `value` settles when it is a promise: synchronous values stay synchronous. */
export function chain<T, U>(value: T | PromiseLike<T>, next: (v: T) => U | Promise<U>): U | Promise<U> {
  return isPromiseLike(value) ? Promise.resolve(value).then(next) : next(value)
}
