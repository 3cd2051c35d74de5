import { CounterDict } from './counter-dict.js'
import { ConfigError, usageRangeError, usageTypeError } from './errors.js'
import { Limiter, type LimiterOptions } from './limiter.js'
import { Namespace, type NamespaceStats } from './namespace.js'
import { type NamespaceOptions, resolveNamespaceOptions } from './options.js'
import {
  createStrategy,
  hasStrategy,
  strategySupportsBlocks,
  strategySupportsDecimals,
  strategySupportsEscrow,
  escrowStrategies,
} from './registry.js'

const DEFAULT_MAX_KEYS = 1_000_000

/**
 * A set of namespaces with their own configuration: Kong's `new_instance`. Two instances never
 * see each other's namespaces or counters. `RateLimiting.default` is the shared instance the
 * module-level functions use.
 *
 * @example
 * const rl = RateLimiting.newInstance('my-plugin')
 * rl.new({ namespace: 'api', windowSizes: [60] })
 * const rate = rl.increment('1.2.3.4', 60, 1, 'api')
 */
export class RateLimiting {
  /** The shared instance behind the module-level functions. */
  static readonly default: RateLimiting = new RateLimiting('default')

  /** Creates an isolated instance; `name` shows in diagnostics. */
  static newInstance(name: string): RateLimiting {
    if (typeof name !== 'string' || name.length === 0)
      throw new ConfigError('INVALID_OPTION', `instance name must be a non-empty string, got ${String(name)}`)
    return new RateLimiting(name)
  }

  readonly name: string
  private readonly namespaces = new Map<string, Namespace>()
  private readonly dicts = new Map<string, CounterDict>()
  // the last namespace looked up: most callers use one, and a string compare beats a Map lookup
  private lastName: string | undefined
  private lastNamespace: Namespace | undefined

  private constructor(name: string) {
    this.name = name
  }

  /** Defines a namespace. Throws a {@link ConfigError} naming the bad option. */
  new(options: NamespaceOptions): void {
    const resolved = resolveNamespaceOptions(options, hasStrategy, strategySupportsEscrow, escrowStrategies)
    if (this.namespaces.has(resolved.namespace))
      throw new ConfigError('DUPLICATE_NAMESPACE', `namespace "${resolved.namespace}" is already defined in instance "${this.name}"`)
    let dict = this.dicts.get(resolved.dict)
    if (dict === undefined) {
      dict = new CounterDict(resolved.dict, resolved.maxKeys ?? DEFAULT_MAX_KEYS)
      this.dicts.set(resolved.dict, dict)
    } else if (resolved.maxKeys !== undefined && resolved.maxKeys !== dict.maxKeys) {
      throw new ConfigError(
        'DICT_CONFLICT',
        `maxKeys ${resolved.maxKeys} conflicts with dict "${resolved.dict}", already defined with maxKeys ${dict.maxKeys}`,
      )
    }
    this.namespaces.set(
      resolved.namespace,
      new Namespace(resolved, dict, {
        create: createStrategy,
        supportsDecimals: strategySupportsDecimals,
        supportsBlocks: strategySupportsBlocks,
      }),
    )
  }

  /**
   * Adds `value` hits to `key` in the window of `windowSize` seconds and returns the sliding
   * rate after it. A number in local and periodic namespaces, a Promise in synchronous ones.
   */
  increment(key: string, windowSize: number, value = 1, namespace = 'default'): number | Promise<number> {
    return this.namespace(namespace).increment(key, windowSize, value)
  }

  /**
   * The sliding rate of `key` for `windowSize`, without counting a hit. `curDiff` replaces this
   * process's unsynced hits in the current window (Kong's `cur_diff`).
   */
  slidingWindow(key: string, windowSize: number, curDiff?: number, namespace = 'default'): number | Promise<number> {
    return this.namespace(namespace).slidingWindow(key, windowSize, curDiff)
  }

  /**
   * Pushes unsynced hits and refreshes every held key now; never overlaps another sync. With
   * `{ all: false }` it is the sync the timer runs (the keys in use, near their limit, and a slice
   * of the idle ones; in an escrow namespace, unused budget goes back only near the limit): for
   * tests and replays on a fake clock with `autoSync: false`.
   */
  sync(namespace = 'default', options?: { readonly all?: boolean }): Promise<void> {
    return this.namespace(namespace).sync(options?.all ?? true)
  }

  /** Loads every stored counter of the namespace at `nowSec` (epoch s), bounded by `timeoutSec`. */
  fetch(namespace = 'default', nowSec?: number, timeoutSec?: number): Promise<void> {
    return this.namespace(namespace).fetch(nowSec, timeoutSec)
  }

  /** A limiter that decides hits against one or more limits of a namespace. */
  limiter(options: LimiterOptions): Limiter {
    const name = options?.namespace ?? 'default'
    return new Limiter(this.namespace(name), options)
  }

  /** Counters about a namespace (syncs, store errors, keys, evictions). */
  stats(namespace = 'default'): NamespaceStats {
    return this.namespace(namespace).stats()
  }

  /** The names of the namespaces defined here. */
  namespaceNames(): string[] {
    return [...this.namespaces.keys()]
  }

  /**
   * Stops every timer, flushes unsynced hits and closes the strategies created by name. The
   * namespaces are then forgotten, so the instance can be configured again.
   */
  async close(): Promise<void> {
    const namespaces = [...this.namespaces.values()]
    this.namespaces.clear()
    this.lastName = undefined
    this.lastNamespace = undefined
    this.dicts.clear()
    const results = await Promise.allSettled(namespaces.map((ns) => ns.close()))
    const errors = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []))
    if (errors.length === 1) throw errors[0]
    if (errors.length > 1) throw new AggregateError(errors, `${errors.length} namespaces failed to flush on close`)
  }

  /** @internal the namespace object, for the decisions and adapters. */
  namespace(name: string): Namespace {
    if (name === this.lastName && this.lastNamespace !== undefined) return this.lastNamespace
    const ns = this.namespaces.get(name)
    if (ns !== undefined) {
      this.lastName = name
      this.lastNamespace = ns
      return ns
    }
    if (typeof name !== 'string') throw usageTypeError('UNKNOWN_NAMESPACE', `namespace must be a string, got ${typeof name}`)
    throw usageRangeError('UNKNOWN_NAMESPACE', `namespace "${name}" is not defined in instance "${this.name}"; define it with new()`)
  }
}
