import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { createFakeClock, MemoryStrategy } from '../../src/index.js'
import { perMinute } from '../../src/simple/index.js'
import { runSimpleStoreSuite } from './simple-store-suite.js'

runSimpleStoreSuite({ name: 'memory', makeStore: () => new MemoryStrategy() })

describe('simple API when the store fails', () => {
  const MINUTE = 1_699_999_980_000

  it('decides on local counts by default, and as told with onStoreError', async () => {
    const store = new MemoryStrategy()
    const clock = createFakeClock(MINUTE)
    const errors: Error[] = []
    const local = perMinute(1, {
      store,
      clock: clock.now,
      name: 'local',
      onError: (e) => errors.push(e),
    })
    const open = perMinute(1, {
      store,
      clock: clock.now,
      name: 'open',
      onStoreError: 'allow',
    })
    const closed = perMinute(1, {
      store,
      clock: clock.now,
      name: 'closed',
      onStoreError: 'deny',
    })
    store.down()
    assert.deepEqual([await local.allow('k'), await local.allow('k')], [true, false])
    assert.ok(errors.length >= 1 && errors[0]?.name === 'StoreError', 'failures are reported, not printed')
    assert.deepEqual([await open.allow('k'), await open.allow('k')], [true, true])
    assert.equal(await closed.allow('k'), false)
    store.up()
    assert.equal(await closed.allow('k'), true)
    for (const l of [local, open, closed]) await l.close()
  })
})
