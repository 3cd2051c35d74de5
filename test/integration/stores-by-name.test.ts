/**
 * `strategy: "postgres"` / `"memcached"` by name: the store module is loaded on demand, made from
 * `strategyOpts`, and closed by the engine (it created it).
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, describe, it } from 'node:test'
import pg from 'pg'
import { RateLimiting } from '../../src/index.js'

const connectionString = 'postgres://postgres@127.0.0.1:5432/test'

describe('stores by name', () => {
  const schema = `rl_byname_${randomUUID().slice(0, 8)}`
  after(async () => {
    const client = new pg.Client({ connectionString })
    await client.connect()
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)
    await client.end()
  })

  it('makes a PostgreSQL strategy from strategyOpts, migrating its table, and closes it', async () => {
    const [a, b] = [RateLimiting.newInstance('a'), RateLimiting.newInstance('b')]
    for (const rl of [a, b]) rl.new({ windowSizes: [60], syncRate: 0, strategy: 'postgres', strategyOpts: { connectionString, schema } })
    assert.equal(await a.increment('k', 60, 2), 2)
    assert.equal(await b.increment('k', 60, 0.5), 2.5, 'PostgreSQL holds decimals')
    await Promise.all([a.close(), b.close()])
  })

  it('makes a memcached strategy from strategyOpts and refuses decimals before loading it', async () => {
    const prefix = `byname-${randomUUID().slice(0, 8)}`
    const [a, b] = [RateLimiting.newInstance('a'), RateLimiting.newInstance('b')]
    for (const rl of [a, b])
      rl.new({ windowSizes: [60], syncRate: 0, strategy: 'memcached', strategyOpts: { servers: ['127.0.0.1:11211'], prefix } })
    assert.throws(() => a.increment('k', 60, 0.5), /cannot hold decimals/)
    assert.equal(await a.increment('k', 60, 2), 2)
    assert.equal(await b.increment('k', 60, 3), 5)
    await Promise.all([a.close(), b.close()])
  })
})

describe('redis by name', () => {
  it('makes a Redis strategy from strategyOpts.url and closes the client it made', async () => {
    const prefix = `byname${randomUUID().slice(0, 8)}`
    const [a, b] = [RateLimiting.newInstance('a'), RateLimiting.newInstance('b')]
    for (const rl of [a, b])
      rl.new({ windowSizes: [60], syncRate: 0, strategy: 'redis', strategyOpts: { url: 'redis://127.0.0.1:6379', prefix } })
    assert.equal(await a.increment('k', 60, 2), 2)
    assert.equal(await b.increment('k', 60, 1.5), 3.5)
    await Promise.all([a.close(), b.close()])
  })
})
