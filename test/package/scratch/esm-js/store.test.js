// A store author's own test, with the kit from the tarball: the contract suite that every
// built-in store passes, run here against the fault-injecting memory store it ships.
import { MemoryStrategy, readWindow, runStrategyContract } from 'ratelimiting/testing'

runStrategyContract({ name: 'memory, from ratelimiting/testing', make: () => new MemoryStrategy() })

const store = new MemoryStrategy()
const batch = {
  namespace: 'n',
  nodeId: 'a',
  seq: 1,
  nowMs: 0,
  windows: [{ key: 'k', windowStartMs: 0, windowSizeMs: 1000, count: 2, diff: 2 }],
  refresh: [],
}
await store.pushDiffs(batch)
const row = await readWindow(store, { namespace: 'n', key: 'k', windowStartMs: 0, windowSizeMs: 1000, nowMs: 0 })
if (row.count !== 2) throw new Error(`readWindow read ${row.count}, not 2`)
