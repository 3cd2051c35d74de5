import { randomUUID } from 'node:crypto'
import { after } from 'node:test'
import { Redis } from 'ioredis'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { sharedRedisUrl } from '../support/redis-server.js'
import { runSimpleStoreSuite } from '../unit/simple-store-suite.js'

// The simple API over Redis, on the shared server, each store under a prefix of its own.
const client = new Redis(await sharedRedisUrl())
const runPrefix = `test:simple-${randomUUID().slice(0, 8)}`

after(async () => {
  let cursor = '0'
  do {
    const [next, names] = await client.scan(cursor, 'MATCH', `${runPrefix}*`, 'COUNT', 1000)
    cursor = next
    if (names.length > 0) await client.unlink(...names)
  } while (cursor !== '0')
  await client.quit()
})

runSimpleStoreSuite({
  name: 'redis',
  makeStore: () => new RedisStrategy({ client, prefix: `${runPrefix}-${randomUUID().slice(0, 8)}` }),
})
