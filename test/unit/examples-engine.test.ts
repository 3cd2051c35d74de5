import assert from 'node:assert/strict'
import { it } from 'node:test'
import { runEngineExample } from '../../examples/engine.js'

it('runs the engine example: two processes converge on one count', async () => {
  const { allowed, denied, views } = await runEngineExample()
  assert.equal(allowed + denied, 40)
  assert.ok(allowed >= 10, `at least the limit is admitted, got ${allowed}`)
  assert.equal(views[0], views[1], 'after a sync both processes see the same rate')
})
