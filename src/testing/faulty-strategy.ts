import { StoreError } from '../core/errors.js'
import type { CounterRow, DiffBatch, Strategy } from '../core/strategy.js'

/**
 * Any store with the faults `MemoryStrategy` injects, for engine-level tests against a real
 * server: a push that fails before it reaches the store, a push applied whose reply is lost, an
 * outage, and a restart that loses the data (which the wrapped store's owner supplies, such as
 * deleting every key under the test's prefix).
 *
 * @example
 * const store = new FaultyStrategy(new RedisStrategy({ client, prefix }), { restart: () => deleteKeys(client, prefix) })
 * store.loseNextReplies(1) // the next push lands, and its caller sees STORE_REPLY_LOST
 */
export class FaultyStrategy implements Strategy {
  readonly name: string
  readonly supportsDecimals: boolean
  readonly supportsBlocks: boolean | undefined
  private readonly inner: Strategy
  private readonly wipe: (() => Promise<void>) | undefined
  private failPushes = 0
  private loseReplies = 0
  private isDown = false

  constructor(inner: Strategy, options: { restart?: () => Promise<void> } = {}) {
    this.inner = inner
    this.name = inner.name
    this.supportsDecimals = inner.supportsDecimals
    this.supportsBlocks = inner.supportsBlocks
    this.wipe = options.restart
  }

  /** The next `n` pushes fail before reaching the store. */
  failNextPushes(n = 1): void {
    this.failPushes += n
  }

  /** The next `n` pushes reach the store, and their replies are lost (the caller sees an error). */
  loseNextReplies(n = 1): void {
    this.loseReplies += n
  }

  /** Every call fails at once until `up()`. */
  down(): void {
    this.isDown = true
  }

  /** Ends `down()`. */
  up(): void {
    this.isDown = false
  }

  /** Loses every stored window, as a store restarted without persistence does. */
  async restart(): Promise<void> {
    if (this.wipe === undefined) throw new Error(`${this.name}: FaultyStrategy was given no restart()`)
    await this.wipe()
  }

  async pushDiffs(batch: DiffBatch): Promise<CounterRow[]> {
    this.gate()
    if (this.failPushes > 0) {
      this.failPushes--
      throw new StoreError('STORE_UNAVAILABLE', this.name, 'injected failure: push not applied')
    }
    const rows = await this.inner.pushDiffs(batch)
    if (this.loseReplies > 0) {
      this.loseReplies--
      throw new StoreError('STORE_REPLY_LOST', this.name, 'injected failure: push applied, reply lost')
    }
    return rows
  }

  async *getCounters(namespace: string, windowSizesMs: readonly number[], nowMs: number, nodeId?: string): AsyncIterable<CounterRow> {
    this.gate()
    yield* this.inner.getCounters(namespace, windowSizesMs, nowMs, nodeId)
  }

  async resetKey(namespace: string, key: string, windowSizesMs: readonly number[], nowMs: number): Promise<void> {
    this.gate()
    await this.inner.resetKey(namespace, key, windowSizesMs, nowMs)
  }

  close(): Promise<void> {
    return this.inner.close()
  }

  private gate(): void {
    if (this.isDown) throw new StoreError('STORE_UNAVAILABLE', this.name, 'injected outage: store is down')
  }
}
