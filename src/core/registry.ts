import { ConfigError } from './errors.js'
import type { Strategy, StrategyFactory } from './strategy.js'

/** What the engine knows of a registered strategy before it is made. */
export interface StrategyInfo {
  /** False when the store cannot hold decimal counts: decimal values are then refused per hit. @default true */
  readonly supportsDecimals?: boolean
  /** True when the store keeps blocks (`Strategy.supportsBlocks`); a synced namespace refuses blocking otherwise. @default false */
  readonly supportsBlocks?: boolean
  /** True when the store serves escrow namespaces (`Strategy.escrow`); `escrow: true` is refused otherwise. @default false */
  readonly supportsEscrow?: boolean
}

const factories = new Map<string, { factory: StrategyFactory; info: StrategyInfo }>()

/**
 * Makes `strategy: name` available to every namespace. The package registers its built-ins
 * ("memory", and the stores as they are installed); register your own the same way.
 *
 * @example
 * registerStrategy('my-store', (opts) => new MyStrategy(opts))
 */
export function registerStrategy(name: string, factory: StrategyFactory, info: StrategyInfo = {}): void {
  if (typeof name !== 'string' || name.length === 0) throw new ConfigError('INVALID_OPTION', 'strategy name must be a non-empty string')
  if (typeof factory !== 'function') throw new ConfigError('INVALID_OPTION', `strategy "${name}" needs a factory function`)
  factories.set(name, { factory, info })
}

/** Whether a registered strategy holds decimal counts (true for unknown names). */
export function strategySupportsDecimals(name: string): boolean {
  return factories.get(name)?.info.supportsDecimals ?? true
}

/** Whether a registered strategy keeps blocks (false for unknown names). */
export function strategySupportsBlocks(name: string): boolean {
  return factories.get(name)?.info.supportsBlocks ?? false
}

/** Whether a registered strategy serves escrow namespaces (false for unknown names). */
export function strategySupportsEscrow(name: string): boolean {
  return factories.get(name)?.info.supportsEscrow ?? false
}

/** The registered strategies that serve escrow namespaces, by name. */
export function escrowStrategies(): string[] {
  return [...factories].filter(([, entry]) => entry.info.supportsEscrow === true).map(([name]) => name)
}

/** Whether `name` is a registered strategy. */
export function hasStrategy(name: string): boolean {
  return factories.has(name)
}

/** Makes a strategy by name; loaded on demand, before the first store call. */
export async function createStrategy(name: string, options: Record<string, unknown>): Promise<Strategy> {
  const entry = factories.get(name)
  if (entry === undefined) throw new ConfigError('UNKNOWN_STRATEGY', `strategy "${name}" is not registered`)
  return entry.factory(options)
}
