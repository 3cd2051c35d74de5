/**
 * The shared fault suite (src/testing/fault-suite.ts) on a private memcached: replies swallowed
 * after the writes landed, connections cut mid-sync, the server killed (losing every item, its
 * key index included) and restarted; the engine's re-push of cumulative counts restores the
 * totals and the index.
 */
import { MemcachedStrategy } from '../../src/strategies/memcached/index.js'
import { runFaultSuite } from '../../src/testing/fault-suite.js'
import { startPrivateMemcached } from '../support/memcached-server.js'

runFaultSuite({
  name: 'memcached',
  losesData: true,
  async start() {
    const server = await startPrivateMemcached()
    return { port: server.port, kill: () => server.kill(), start: () => server.start(), stop: () => server.kill() }
  },
  strategy: (port) => new MemcachedStrategy({ servers: [`127.0.0.1:${port}`], timeoutMs: 300 }),
})
