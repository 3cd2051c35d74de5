/**
 * `ratelimiting/testing`: what a store author runs in their own tests (node:test) against a real
 * server, the same suites every built-in store passes. docs/STORES.md, "Writing a store".
 */
export { MemoryStrategy, type MemoryStrategyOptions } from '../strategies/memory.js'
export { type EscrowContractOptions, runEscrowContract } from './escrow-contract.js'
export { type FaultServer, type FaultSuiteOptions, runFaultSuite } from './fault-suite.js'
export { FaultyStrategy } from './faulty-strategy.js'
export { readWindow } from './read-window.js'
export { runStrategyContract, type StrategyContractOptions } from './strategy-contract.js'
export { type ProxyMode, startTcpProxy, type TcpProxy } from './tcp-proxy.js'
