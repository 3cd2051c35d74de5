import { randomUUID } from 'node:crypto'
import { MemcachedStrategy } from '../../src/strategies/memcached/index.js'
import { runSimpleStoreSuite } from '../unit/simple-store-suite.js'

// The simple API over memcached, the Go limiter's store, on the server scripts/memcached.sh runs.
runSimpleStoreSuite({
  name: 'memcached',
  makeStore: () => new MemcachedStrategy({ servers: ['127.0.0.1:11211'], prefix: `simple-${randomUUID().slice(0, 8)}` }),
})
