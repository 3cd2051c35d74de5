/**
 * What the engine must know of each built-in store before its module (and its driver) loads:
 * `rl.new({ strategy: 'memcached' })` refuses decimal values per hit from the first one, and knows the store keeps blocks
 * (and whether it serves escrow namespaces). The one
 * place this is written; each store class and the root entry's registrations read it here.
 */
export const BUILT_IN_STORES = {
  memory: { supportsDecimals: true, supportsBlocks: true, supportsEscrow: true },
  // counts as the shortest decimal that round-trips (String(n)), totals as doubles
  redis: { supportsDecimals: true, supportsBlocks: true, supportsEscrow: true },
  // counts are numeric: decimals held and summed exactly; grants by one function call (postgres/escrow.ts)
  postgres: { supportsDecimals: true, supportsBlocks: true, supportsEscrow: true },
  // a log of integer entries
  memcached: { supportsDecimals: false, supportsBlocks: true, supportsEscrow: false },
} as const
