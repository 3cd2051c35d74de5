import assert from 'node:assert/strict'
import { it } from 'node:test'
import { runEngineExample } from '../../examples/engine.js'

/**
 * The example's fleet by hand: each process sees its own hits (denied ones count) plus the
 * other's count as of its last read; a sync round is every process pushing, then every process
 * reading the other's push.
 */
function expected(): { allowed: number; total: number } {
  const own = [0, 0]
  const seen = [0, 0] // the other process's count as of the last read
  const pushed = [0, 0]
  let allowed = 0
  for (let i = 0; i < 40; i++) {
    if (i > 0 && i % 5 === 0) {
      for (const p of [0, 1]) pushed[p] = own[p] as number
      for (const p of [0, 1]) seen[p] = pushed[1 - p] as number
    }
    const p = i % 2
    if ((own[p] as number) + (seen[p] as number) + 1 <= 10) allowed++
    own[p] = (own[p] as number) + 1
  }
  return { allowed, total: 40 }
}

it('runs the engine example: two processes admit the exact count a model of the fleet gives, then agree', async () => {
  const { allowed, denied, views } = await runEngineExample()
  const model = expected()
  assert.equal(allowed, model.allowed)
  // a sync every 5 hits: each process learns of the other's hits before the pair reaches the limit
  assert.equal(allowed, 10)
  assert.equal(denied, 40 - allowed)
  // denied hits count (Kong's penalty): every one of the 40 is in the window
  assert.deepEqual(views, [model.total, model.total])
})
