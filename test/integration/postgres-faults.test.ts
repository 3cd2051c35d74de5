/**
 * The shared fault suite (src/testing/fault-suite.ts) on a private PostgreSQL server: replies
 * swallowed after the write landed, connections cut mid-sync, the server killed (it keeps its
 * committed rows, as after a crash) and restarted.
 */
import { PostgresStrategy } from '../../src/strategies/postgres/index.js'
import { runFaultSuite } from '../../src/testing/fault-suite.js'
import { startPrivatePostgres } from '../support/postgres-server.js'

runFaultSuite({
  name: 'postgres',
  losesData: false,
  async start() {
    const server = await startPrivatePostgres()
    return { port: server.port, kill: () => server.kill(), start: () => server.start(), stop: () => server.destroy() }
  },
  strategy: (port) =>
    new PostgresStrategy({
      connectionString: `postgres://postgres@127.0.0.1:${port}/postgres`,
      queryTimeoutMs: 300,
      poolSize: 2,
      purgeIntervalMs: 0,
    }),
  prepare: (strategy) => (strategy as PostgresStrategy).migrate(),
})
