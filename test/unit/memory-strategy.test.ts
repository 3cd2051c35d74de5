import { MemoryStrategy } from '../../src/strategies/memory.js'
import { runStrategyContract } from '../contract/strategy-contract.js'

runStrategyContract({ name: 'memory', make: () => new MemoryStrategy() })
