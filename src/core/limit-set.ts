import { ConfigError, usageRangeError, usageTypeError } from './errors.js'
import { BLOCK_MS_RULE, isBlockMs } from './blocks.js'
import type { HitOptions, LimitSpec } from './limiter-types.js'
import type { Namespace } from './namespace.js'
import type { WindowTable } from './counter-table.js'

// A limiter's limits: checked once, and the limit each one applies to a key (a number, a
// function of the key, or one hit's override).

/** One limit of a limiter, checked. */
export interface Limit {
  readonly name: string
  /** The limit, or NaN when it is a function of the key. */
  readonly limit: number
  /** The limit as a function of the key (LimitSpec.limit), when it is one. */
  readonly perKey: ((key: string) => number) | undefined
  readonly index: number
  /** Window size, seconds. */
  readonly window: number
  readonly table: WindowTable
  /** How long a key this limit denies stays blocked, ms; 0 when it does not block. */
  readonly blockMs: number
}

/** Checks `specs` against `namespace` (ConfigErrors naming the limit) and binds each to its window's table. */
export function compileLimits(namespace: Namespace, specs: unknown): Limit[] {
  if (!Array.isArray(specs) || specs.length === 0)
    throw new ConfigError('INVALID_OPTION', 'limits must be a non-empty array of { limit, window }')
  const seen = new Set<number>()
  return (specs as LimitSpec[]).map((spec, i) => {
    if (typeof spec !== 'object' || spec === null) throw new ConfigError('INVALID_OPTION', `limits[${i}] must be { limit, window }`)
    const { limit, window } = spec
    const perKey = typeof limit === 'function' ? limit : undefined
    if (perKey === undefined && (typeof limit !== 'number' || !Number.isFinite(limit) || limit <= 0))
      throw new ConfigError('INVALID_OPTION', `limits[${i}].limit must be a positive number or a function of the key, got ${String(limit)}`)
    const table = typeof window === 'number' ? namespace.findTable(window) : undefined
    if (table === undefined)
      throw new ConfigError(
        'INVALID_OPTION',
        `limits[${i}].window ${String(window)} is not one of namespace "${namespace.name}"'s windowSizes [${namespace.windowSizes.join(', ')}]`,
      )
    if (seen.has(table.sizeMs)) throw new ConfigError('INVALID_OPTION', `limits[${i}].window ${window} appears twice`)
    seen.add(table.sizeMs)
    const name = spec.name ?? `${perKey === undefined ? String(limit) : 'per-key'}-in-${window}s`
    if (typeof name !== 'string' || name.length === 0)
      throw new ConfigError('INVALID_OPTION', `limits[${i}].name must be a non-empty string, got ${String(name)}`)
    const { blockMs } = spec
    if (blockMs !== undefined && !isBlockMs(blockMs))
      throw new ConfigError('INVALID_OPTION', `limits[${i}].blockMs must be ${BLOCK_MS_RULE}, got ${String(blockMs)}`)
    if (perKey === undefined) table.watchLimit(limit as number)
    return {
      name,
      limit: perKey === undefined ? (limit as number) : Number.NaN,
      perKey,
      index: i,
      window: table.sizeSec,
      table,
      blockMs: blockMs ?? 0,
    }
  })
}

/**
 * The limit each of a limiter's limits applies in the decision being made, in one reused array
 * (a decision is made synchronously between two awaits, so one array serves every key).
 */
export class AppliedLimits {
  /** Whether a limit is a function of the key. */
  readonly dynamic: boolean
  private readonly limits: readonly Limit[]
  private readonly values: Float64Array

  constructor(limits: readonly Limit[]) {
    this.limits = limits
    this.values = Float64Array.from(limits, (l) => l.limit)
    this.dynamic = limits.some((l) => l.perKey !== undefined)
  }

  /** The array filled for `key`: `override` (one limit), or each function's answer; static limits as they are. */
  apply(key: string, override: number | undefined): Float64Array {
    const values = this.values
    const limits = this.limits
    if (override !== undefined) values[0] = override
    else if (this.dynamic) for (let i = 0; i < limits.length; i++) values[i] = this.limitOf(limits[i] as Limit, key)
    else if (limits.length === 1) values[0] = (limits[0] as Limit).limit // after an override
    return values
  }

  /** The limits applied by the last {@link apply} (or the static ones). */
  get current(): Float64Array {
    return this.values
  }

  /** The limit of `l` for `key`: its number, or its function's answer, checked. */
  limitOf(l: Limit, key: string): number {
    if (l.perKey === undefined) return l.limit
    const limit = l.perKey(key)
    if (typeof limit !== 'number' || !Number.isFinite(limit) || limit <= 0)
      throw usageRangeError(
        'INVALID_VALUE',
        `limits[${l.index}].limit(${JSON.stringify(key)}) must return a positive number, got ${typeof limit === 'number' ? limit : typeof limit}`,
      )
    l.table.watchLimit(limit) // keys near it are refreshed by every sync
    return limit
  }

  /** The override of a hit's options, checked; undefined when it has none. */
  overrideOf(options: HitOptions): number | undefined {
    if (typeof options !== 'object' || options === null)
      throw usageTypeError('INVALID_VALUE', `hit options must be an object such as { limit }, got ${String(options)}`)
    const limit = options.limit
    if (limit === undefined) return undefined
    if (typeof limit !== 'number' || !Number.isFinite(limit) || limit <= 0)
      throw usageRangeError('INVALID_VALUE', `hit option limit must be a positive number, got ${String(limit)}`)
    if (this.limits.length !== 1)
      throw usageRangeError(
        'INVALID_VALUE',
        `hit option limit needs a limiter with one limit (this one has ${this.limits.length}); give each limit a function of the key instead`,
      )
    ;(this.limits[0] as Limit).table.watchLimit(limit)
    return limit
  }

  /** The smallest limit `key` is held to. */
  smallest(key: string): number {
    const values = this.apply(key, undefined)
    let min = Number.POSITIVE_INFINITY
    for (let i = 0; i < values.length; i++) if ((values[i] as number) < min) min = values[i] as number
    return min
  }
}
