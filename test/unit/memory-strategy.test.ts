import { MemoryStrategy } from '../../src/strategies/memory.js'
import { runStrategyContract } from '../../src/testing/strategy-contract.js'

runStrategyContract({ name: 'memory', make: () => new MemoryStrategy() })
