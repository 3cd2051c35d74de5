import { ConfigError } from './errors.js'
import type { Strategy, StrategyFactory } from './strategy.js'

const factories = new Map<string, StrategyFactory>()

/**
 * Makes `strategy: name` available to every namespace. The package registers its built-ins
 * ("memory", and the stores as they are installed); register your own the same way.
 *
 * @example
 * registerStrategy('my-store', (opts) => new MyStrategy(opts))
 */
export function registerStrategy(name: string, factory: StrategyFactory): void {
  if (typeof name !== 'string' || name.length === 0) throw new ConfigError('INVALID_OPTION', 'strategy name must be a non-empty string')
  if (typeof factory !== 'function') throw new ConfigError('INVALID_OPTION', `strategy "${name}" needs a factory function`)
  factories.set(name, factory)
}

/** Whether `name` is a registered strategy. */
export function hasStrategy(name: string): boolean {
  return factories.has(name)
}

/** Makes a strategy by name; loaded on demand, before the first store call. */
export async function createStrategy(name: string, options: Record<string, unknown>): Promise<Strategy> {
  const factory = factories.get(name)
  if (factory === undefined) throw new ConfigError('UNKNOWN_STRATEGY', `strategy "${name}" is not registered`)
  return factory(options)
}
