import type { Clock } from './clock.js'
import { ConfigError } from './errors.js'
import { isStrategy, type Strategy } from './strategy.js'
import { MAX_WINDOW_MS, windowSizeMs } from './window.js'

/**
 * What to do when the store fails during a synchronous (`syncRate: 0`) hit, or when an escrow
 * namespace can get no grant: `local` decides on the local counts, `allow` and `deny` outright;
 * `share` (escrow only) admits up to `limit / n` per window, `n` the processes the last grants saw.
 */
export type OnStoreError = 'local' | 'allow' | 'deny' | 'share'

/** Options of `rl.new()`: one namespace. */
export interface NamespaceOptions {
  /** The namespace's name; defining a name twice in one instance throws. @default "default" */
  namespace?: string
  /** Local counter dictionary; namespaces naming the same dict share it and its `maxKeys`. @default "default" */
  dict?: string
  /**
   * Seconds between syncs with the store: `> 0` periodic (at least 0.001), `0` synchronous
   * (every hit goes to the store), `< 0` local only (no store).
   * @default -1
   */
  syncRate?: number
  /** "memory" | "redis" | "postgres" | "memcached" (as registered), or a strategy object. Required when `syncRate >= 0`. */
  strategy?: string | Strategy
  /** Options for a strategy given by name (a client, a url, a prefix, ...). */
  strategyOpts?: Record<string, unknown>
  /**
   * Window sizes in seconds, such as `[1, 60, 3600]`; fractions down to whole milliseconds
   * (`0.05` is 50 ms), at most 2^54 ms.
   */
  windowSizes: readonly number[]
  /**
   * Returns the time in epoch ms. @default cachedClock (Date.now(), cached for at most about 1 ms and
   * 64 reads); in synchronous mode `Date.now()` itself (each decision waits on the store anyway)
   */
  clock?: Clock
  /** Most key-windows the dict holds before it evicts (see CounterDict). @default 1_000_000 */
  maxKeys?: number
  /**
   * What a hit does when the store fails or times out: synchronous mode, and an escrow namespace
   * that can get no grant (`share` is for escrow only). @default "local"
   */
  onStoreError?: OnStoreError
  /** Longest wait for one store call, ms; a slower call counts as a failure. @default 1000 */
  storeTimeoutMs?: number
  /** Arm the periodic sync timer on `new()`; false leaves syncing to your calls of `sync()`. @default true */
  autoSync?: boolean
  /** Key-windows per store call in a sync; bigger syncs are split. @default 2048 */
  batchSize?: number
  /**
   * Periodic mode: the target time between two refreshes of a key this process holds but has not
   * hit or read since the last sync. Keys hit or read since the last sync, and keys near the limit
   * of a limiter on them, are refreshed by every sync; the others in a round-robin, a slice per
   * sync of at most as many keys as are in use (at least 256), so a sync's store traffic follows
   * the keys in use, not the keys held: with many idle keys a round takes longer than this
   * (docs/ARCHITECTURE.md, "Which keys a sync visits").
   * @default 30_000
   */
  idleRefreshMs?: number
  /**
   * Periodic mode: admit a hit only against a budget the store has set aside for this process
   * (a grant), so the fleet never admits more than one process deciding on exact counts would,
   * by the engine's formula. A hit with budget is decided locally; one without asks the store
   * (`hit()` then returns a Promise), with the grants of one event-loop turn in one call. Needs a
   * store with `escrow` (docs/ARCHITECTURE.md, "Escrow").
   * @default false
   */
  escrow?: boolean
  /**
   * Keep and honour blocks in this namespace (`limiter.block()`, a limit's `blockMs`): a blocked
   * key is denied by every limiter of the namespace, and in a synced namespace every process
   * learns of a block at its next sync or call. Turned on by itself when a limiter with `blockMs`
   * is made or `block()`/`unblock()` is called here; set it on processes that only honour blocks
   * made elsewhere (docs/ARCHITECTURE.md, "Blocks"). Off, a hit pays nothing for blocking.
   * @default false
   */
  blocking?: boolean
  /** Identifies this process to the store; random by default (16 characters). Must be unique per live process. */
  nodeId?: string
  /** Called with every store failure (the engine itself never prints). */
  onError?: (error: Error) => void
}

export type SyncMode = 'local' | 'periodic' | 'synchronous'

/** Options after validation. */
export interface ResolvedNamespaceOptions {
  readonly namespace: string
  readonly dict: string
  readonly syncRate: number
  readonly mode: SyncMode
  readonly strategy: string | Strategy | undefined
  readonly strategyOpts: Record<string, unknown>
  /** In seconds, as given (a size given as 0.30000000000000004 is 0.3 here). */
  readonly windowSizes: readonly number[]
  readonly windowSizesMs: readonly number[]
  readonly clock: Clock | undefined
  readonly maxKeys: number | undefined
  readonly onStoreError: OnStoreError
  readonly storeTimeoutMs: number
  readonly autoSync: boolean
  readonly batchSize: number
  readonly idleRefreshMs: number
  readonly escrow: boolean
  readonly blocking: boolean
  readonly nodeId: string | undefined
  readonly onError: ((error: Error) => void) | undefined
}

function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value)
  if (typeof value === 'function') return 'a function'
  if (Array.isArray(value)) return `[${value.map(show).join(', ')}]`
  if (typeof value === 'object' && value !== null) return 'an object'
  return String(value)
}

function invalid(option: string, expected: string, value: unknown): ConfigError {
  return new ConfigError('INVALID_OPTION', `${option} must be ${expected}, got ${show(value)}`)
}

/** Checks `new()` options once, naming the option and the value on failure. */
export function resolveNamespaceOptions(
  raw: unknown,
  knownStrategy: (name: string) => boolean,
  supportsEscrow: (name: string) => boolean = () => false,
  escrowStores: () => readonly string[] = () => [],
): ResolvedNamespaceOptions {
  if (typeof raw !== 'object' || raw === null) throw invalid('options', 'an object', raw)
  const o = raw as Record<string, unknown>
  const known = new Set([
    'namespace',
    'dict',
    'syncRate',
    'strategy',
    'strategyOpts',
    'windowSizes',
    'clock',
    'maxKeys',
    'onStoreError',
    'storeTimeoutMs',
    'autoSync',
    'batchSize',
    'idleRefreshMs',
    'predict',
    'escrow',
    'blocking',
    'nodeId',
    'onError',
  ])
  for (const name of Object.keys(o)) {
    if (!known.has(name)) {
      const hint = name === 'sync_rate' || name === 'window_sizes' || name === 'strategy_opts' ? ' (options are camelCase here)' : ''
      throw new ConfigError('INVALID_OPTION', `unknown option "${name}"${hint}`)
    }
  }
  const namespace = o.namespace ?? 'default'
  if (typeof namespace !== 'string' || namespace.length === 0 || namespace.includes('|'))
    throw invalid('namespace', 'a non-empty string without "|"', namespace)
  const dict = o.dict ?? 'default'
  if (typeof dict !== 'string' || dict.length === 0) throw invalid('dict', 'a non-empty string', dict)

  const syncRate = o.syncRate ?? -1
  if (typeof syncRate !== 'number' || !Number.isFinite(syncRate)) throw invalid('syncRate', 'a finite number of seconds', syncRate)
  if (syncRate > 0 && syncRate < 0.001) throw invalid('syncRate', '0 (synchronous), < 0 (local) or at least 0.001 s', syncRate)
  const mode: SyncMode = syncRate < 0 ? 'local' : syncRate === 0 ? 'synchronous' : 'periodic'

  const strategy = o.strategy
  if (strategy !== undefined) {
    if (typeof strategy === 'string') {
      if (!knownStrategy(strategy)) throw new ConfigError('UNKNOWN_STRATEGY', `strategy ${show(strategy)} is not a known strategy name`)
    } else if (!isStrategy(strategy)) {
      throw invalid('strategy', 'a strategy name or an object with name, pushDiffs, getCounters, resetKey and close', strategy)
    }
  } else if (mode !== 'local') {
    throw new ConfigError('MISSING_STRATEGY', `syncRate ${syncRate} needs a strategy (a name such as "memory" or a strategy object)`)
  }
  const strategyOpts = o.strategyOpts ?? {}
  if (typeof strategyOpts !== 'object' || strategyOpts === null || Array.isArray(strategyOpts))
    throw invalid('strategyOpts', 'an object', strategyOpts)

  const windowSizes = o.windowSizes
  if (!Array.isArray(windowSizes) || windowSizes.length === 0)
    throw invalid('windowSizes', 'a non-empty array of seconds (such as [1, 60] or [0.5])', windowSizes)
  const windowSizesMs = windowSizes.map((size: unknown) => {
    if (typeof size !== 'number') throw invalid('windowSizes', 'numbers of seconds', size)
    const ms = windowSizeMs(size)
    if (Number.isNaN(ms))
      throw invalid('windowSizes', `whole milliseconds from 0.001 s to ${MAX_WINDOW_MS / 1000} s (2^54 ms, about 570,000 years)`, size)
    return ms
  })
  if (new Set(windowSizesMs).size !== windowSizesMs.length) throw invalid('windowSizes', 'without duplicates', windowSizes)

  const clock = o.clock
  if (clock !== undefined && typeof clock !== 'function') throw invalid('clock', 'a function returning epoch ms', clock)
  const maxKeys = o.maxKeys
  if (maxKeys !== undefined && (typeof maxKeys !== 'number' || !Number.isInteger(maxKeys) || maxKeys < 1))
    throw invalid('maxKeys', 'a positive integer', maxKeys)
  const escrow = o.escrow ?? false
  if (typeof escrow !== 'boolean') throw invalid('escrow', 'a boolean', escrow)
  if (escrow && mode !== 'periodic')
    throw new ConfigError('INVALID_OPTION', `escrow needs a periodic namespace (syncRate > 0), got syncRate ${syncRate}`)
  if (escrow && typeof strategy === 'object' && typeof (strategy as Strategy).escrow !== 'function')
    throw new ConfigError(
      'INVALID_OPTION',
      `escrow: the ${(strategy as Strategy).name} strategy does not serve escrow namespaces (it has no escrow method)`,
    )
  if (escrow && typeof strategy === 'string' && !supportsEscrow(strategy))
    throw new ConfigError(
      'INVALID_OPTION',
      `escrow: the ${strategy} strategy does not serve escrow namespaces (a grant must be atomic over a key's two windows; the registered stores that do: ${escrowStores().join(', ') || 'none'})`,
    )
  const onStoreError = o.onStoreError ?? 'local'
  if (onStoreError !== 'local' && onStoreError !== 'allow' && onStoreError !== 'deny' && (onStoreError !== 'share' || !escrow))
    throw invalid(
      'onStoreError',
      escrow
        ? '"local", "allow", "deny" or "share"'
        : onStoreError === 'share'
          ? '"local", "allow" or "deny" ("share" is for escrow namespaces)'
          : '"local", "allow" or "deny"',
      onStoreError,
    )
  const storeTimeoutMs = o.storeTimeoutMs ?? 1000
  if (typeof storeTimeoutMs !== 'number' || !Number.isFinite(storeTimeoutMs) || storeTimeoutMs <= 0)
    throw invalid('storeTimeoutMs', 'a positive number of ms', storeTimeoutMs)
  const autoSync = o.autoSync ?? true
  if (typeof autoSync !== 'boolean') throw invalid('autoSync', 'a boolean', autoSync)
  const batchSize = o.batchSize ?? 2048
  if (typeof batchSize !== 'number' || !Number.isInteger(batchSize) || batchSize < 1)
    throw invalid('batchSize', 'a positive integer', batchSize)
  if (o.predict !== undefined)
    throw new ConfigError(
      'INVALID_OPTION',
      'predict was removed: no rate estimate cut the periodic mode\'s over-admission without false denials (docs/ACCURACY.md, "Prediction"); for a fleet-wide bound use escrow: true',
    )
  const blocking = o.blocking ?? false
  if (typeof blocking !== 'boolean') throw invalid('blocking', 'a boolean', blocking)
  const idleRefreshMs = o.idleRefreshMs ?? 30_000
  if (typeof idleRefreshMs !== 'number' || !Number.isFinite(idleRefreshMs) || idleRefreshMs <= 0)
    throw invalid('idleRefreshMs', 'a positive number of ms', idleRefreshMs)
  const nodeId = o.nodeId
  if (nodeId !== undefined && (typeof nodeId !== 'string' || nodeId.length === 0)) throw invalid('nodeId', 'a non-empty string', nodeId)
  const onError = o.onError
  if (onError !== undefined && typeof onError !== 'function') throw invalid('onError', 'a function', onError)

  return {
    namespace,
    dict,
    syncRate,
    mode,
    strategy: strategy as string | Strategy | undefined,
    strategyOpts: strategyOpts as Record<string, unknown>,
    windowSizes: windowSizesMs.map((ms) => ms / 1000),
    windowSizesMs,
    clock: clock as Clock | undefined,
    maxKeys: maxKeys as number | undefined,
    onStoreError,
    storeTimeoutMs,
    autoSync,
    batchSize,
    idleRefreshMs,
    escrow,
    blocking,
    nodeId: nodeId as string | undefined,
    onError: onError as ((error: Error) => void) | undefined,
  }
}
