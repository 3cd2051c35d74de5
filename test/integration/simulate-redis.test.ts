/**
 * The accuracy replay on a real Redis (the shared server on 6379, under a prefix of this run's
 * own) answers exactly what it answers on the MemoryStrategy: the same decisions hit by hit, so
 * the same figures in every cell. The two stores keep the same contract (docs/ARCHITECTURE.md,
 * "One sync"), and the harness's tables (docs/ACCURACY.md) hold for a fleet on Redis as measured
 * on memory. `npm run bench:accuracy -- --redis` runs the whole harness this way.
 */
import assert from 'node:assert/strict'
import { randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { deleteReplayKeys, redisShardStores, replayStartMs } from '../../bench/lib/replay-redis.js'
import { syntheticTrace } from '../../src/simulate/profiles.js'
import { algorithmEntry, type CellResult, gridCells, runGrid } from '../../src/simulate/replay.js'
import { sharedRedisUrl } from '../support/redis-server.js'

const LIMIT = 20
const WINDOW = 60

// what a cell answers, without the wall time of its replay
function figures(results: CellResult[]): Omit<CellResult, 'replayMs'>[] {
  return results.map(({ replayMs: _, ...rest }) => rest)
}

describe('simulate: the replay on a real Redis', () => {
  const prefix = `rltest-replay-${randomUUID().slice(0, 8)}`
  let client: Redis
  before(async () => {
    client = new Redis(await sharedRedisUrl())
  })
  after(async () => {
    await deleteReplayKeys(client, prefix)
    client.disconnect()
  })

  it('answers every cell of the counter as the memory store does', async () => {
    // busy keys (a median of 60% of the limit per window, some far over it) cross the limit, so
    // the cells deny, over-admit and falsely deny: figures that depend on every sync
    const trace = syntheticTrace({
      profile: 'poisson',
      limit: LIMIT,
      windowSec: WINDOW,
      durationSec: 150,
      keys: 12,
      medianShare: 0.6,
      startMs: replayStartMs(WINDOW),
    })
    const cells = [...gridCells([algorithmEntry('counter')], [1, 4], [0.5]), ...gridCells([algorithmEntry('counter')], [4], [2])]
    const setup = { limit: LIMIT, windowSec: WINDOW, countDenied: true }
    const onMemory = await runGrid(trace, cells, setup)
    const onRedis = await runGrid(trace, cells, { ...setup, strategy: redisShardStores(client, prefix) })
    assert.deepEqual(figures(onRedis), figures(onMemory))
    // not by construction: the fleet over-admitted and denied, on both stores
    const multi = onMemory.find((r) => r.nodes === 4 && r.syncRate === 2 && r.algorithm === 'counter')
    assert.ok(multi !== undefined && multi.falseAllowShare > 0, `the 4-process cell over-admits: ${JSON.stringify(multi)}`)
    assert.ok(onMemory.every((r) => r.falseDenyShare > 0 || r.falseAllowShare > 0))
    // and what the processes see of each other matters: four processes decide otherwise than one
    const one = figures(onMemory.filter((r) => r.nodes === 1))[0]
    const four = figures(onMemory.filter((r) => r.nodes === 4 && r.syncRate === 0.5 && r.algorithm === 'counter'))[0]
    assert.notDeepEqual({ ...four, nodes: 1, label: '' }, { ...one, label: '' })
    // and the keys were on the server
    const [, keys] = await client.scan('0', 'MATCH', `${prefix}:*`, 'COUNT', 1000)
    assert.ok(keys.length > 0, 'the replay wrote key-windows to Redis')
  })
})
