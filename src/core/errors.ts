/** Codes carried by {@link ConfigError}; stable, so users can search for them. */
export type ConfigErrorCode = 'INVALID_OPTION' | 'DUPLICATE_NAMESPACE' | 'UNKNOWN_STRATEGY' | 'MISSING_STRATEGY' | 'DICT_CONFLICT'

/** Codes carried by {@link StoreError}. */
export type StoreErrorCode = 'STORE_UNAVAILABLE' | 'STORE_TIMEOUT' | 'STORE_REPLY_LOST' | 'STORE_ERROR'

/** Codes carried by the `TypeError`/`RangeError` thrown for bad per-hit arguments. */
export type UsageErrorCode = 'UNKNOWN_NAMESPACE' | 'UNKNOWN_WINDOW_SIZE' | 'INVALID_KEY' | 'INVALID_VALUE' | 'NAMESPACE_CLOSED'

/**
 * Thrown when options are invalid: at `new()`, `limiter()` or a strategy's constructor,
 * never per hit. The message names the option and the value that was refused.
 *
 * @example
 * try { rl.new({ windowSizes: [0] }) } catch (err) { if (err instanceof ConfigError) console.error(err.code) }
 */
export class ConfigError extends Error {
  override readonly name = 'ConfigError'
  readonly code: ConfigErrorCode
  constructor(code: ConfigErrorCode, message: string) {
    super(message)
    this.code = code
  }
}

/**
 * Thrown (or passed to `onError`) when a central store fails: unreachable, too slow, or a reply
 * that never came back. `cause` holds the driver's error when there is one.
 */
export class StoreError extends Error {
  override readonly name = 'StoreError'
  readonly code: StoreErrorCode
  /** The strategy's name, such as "redis". */
  readonly strategy: string
  constructor(code: StoreErrorCode, strategy: string, message: string, options?: { cause?: unknown }) {
    super(`${strategy}: ${message}`, options)
    this.code = code
    this.strategy = strategy
  }
}

/** A `TypeError` with a searchable `code`, thrown for a bad per-hit argument. */
export function usageTypeError(code: UsageErrorCode, message: string): TypeError {
  return Object.assign(new TypeError(message), { code })
}

/** A `RangeError` with a searchable `code`, thrown for a bad per-hit argument. */
export function usageRangeError(code: UsageErrorCode, message: string): RangeError {
  return Object.assign(new RangeError(message), { code })
}

/** Wraps anything a strategy threw into a {@link StoreError}, keeping one that already is. */
export function toStoreError(strategy: string, err: unknown): StoreError {
  if (err instanceof StoreError) return err
  const message = err instanceof Error ? err.message : String(err)
  return new StoreError('STORE_ERROR', strategy, message, { cause: err })
}
