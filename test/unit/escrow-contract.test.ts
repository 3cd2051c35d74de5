/** The escrow contract (src/testing/escrow-contract.ts) on MemoryStrategy, its reference. */
import { MemoryStrategy } from '../../src/strategies/memory.js'
import { runEscrowContract } from '../../src/testing/escrow-contract.js'

runEscrowContract('memory', () => new MemoryStrategy())
