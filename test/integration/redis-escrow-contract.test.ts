/**
 * The escrow contract (src/testing/escrow-contract.ts) on the shared single Redis node, with one
 * epoch key per namespace (batchAcrossSlots), through ioredis and node-redis.
 *
 * The contract is the memory store's: one epoch and one count of callers per namespace. Where
 * calls stay in one hash slot (a Cluster, or a single node without batchAcrossSlots) the store
 * keeps them per slot, and a slot a namespace first uses learns on its own (the contract opens
 * its epochs with an empty call, then grants keys of other slots at once). Those modes are held
 * to the memory store in redis-escrow.test.ts instead, with every key in one slot, on the
 * shared Cluster through ioredis, iovalkey and node-redis, and their epochs tested there.
 */
import { randomUUID } from 'node:crypto'
import { after } from 'node:test'
import { Redis } from 'ioredis'
import { createClient } from 'redis'
import { RedisStrategy } from '../../src/strategies/redis/index.js'
import { runEscrowContract } from '../../src/testing/escrow-contract.js'
import { sharedClusterPorts, sharedRedisUrl } from '../support/redis-server.js'

const runPrefix = `rltest-escrowc-${randomUUID().slice(0, 8)}`
const singleUrl = await sharedRedisUrl()
const clusterPorts = await sharedClusterPorts()

after(async () => {
  for (const port of [Number(new URL(singleUrl).port || 6379), ...clusterPorts]) {
    const admin = new Redis(port, '127.0.0.1')
    for (const name of await admin.keys(`${runPrefix}*`)) await admin.unlink(name)
    admin.disconnect()
  }
})

function ioredis(): Redis {
  const client = new Redis(singleUrl, { maxRetriesPerRequest: 1 })
  client.on('error', () => undefined)
  return client
}

{
  const client = ioredis()
  runEscrowContract(
    'redis through ioredis (single node, one epoch key: batchAcrossSlots)',
    () => new RedisStrategy({ client, prefix: `${runPrefix}-i`, batchAcrossSlots: true }),
    { teardown: async () => client.disconnect() },
  )
}

{
  const client = createClient({ url: singleUrl })
  client.on('error', () => undefined)
  runEscrowContract(
    'redis through node-redis (single node, one epoch key: batchAcrossSlots)',
    async () => {
      if (!client.isOpen) await client.connect()
      return new RedisStrategy({ client, prefix: `${runPrefix}-n`, batchAcrossSlots: true })
    },
    { teardown: async () => client.destroy() },
  )
}
