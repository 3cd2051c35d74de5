import {
  type Clock,
  type CounterRow,
  type DiffBatch,
  type EscrowBatch,
  type EscrowReply,
  type Limiter,
  RateLimiting,
  type Strategy,
} from '../index.js'

/**
 * The fleet of an escrow cell (docs/ARCHITECTURE.md, "Escrow"): N processes, each a
 * RateLimiting instance with an escrow namespace over one shared store, every one syncing at
 * every multiple of `syncRate` as the timer does, and every hit replayed one at a time (a hit
 * that needs a grant waits for it, as a request would). Unlike the counter's fleet (fleet.ts),
 * nothing is sharded: escrow's store traffic is what is measured, so the store sees every call.
 */
export class EscrowFleet {
  /** Store operations: each key-window granted or written (returned) counts one. */
  operations = 0
  /** Store calls (a call carries the grants of one event-loop turn, or one sync's writes). */
  calls = 0
  /** Hits that waited on the store for a grant. */
  waited = 0
  private readonly processes: Limiter[] = []
  private readonly instances: RateLimiting[] = []
  private readonly syncMs: number
  private nextSyncMs = Number.NaN

  constructor(options: {
    readonly nodes: number
    readonly limit: number
    readonly windowSec: number
    readonly syncRate: number
    readonly countDenied: boolean
    readonly store: Strategy
    readonly clock: { now: Clock }
    readonly namespaceOptions?: Readonly<Record<string, unknown>>
  }) {
    this.syncMs = options.syncRate * 1000
    const counted = countingStore(options.store, this)
    for (let i = 0; i < options.nodes; i++) {
      const rl = RateLimiting.newInstance(`simulate-escrow-${i}`)
      rl.new({
        namespace: 'sim',
        windowSizes: [options.windowSec],
        syncRate: options.syncRate,
        strategy: counted,
        escrow: true,
        clock: options.clock.now,
        autoSync: false,
        onError: () => undefined,
        ...options.namespaceOptions,
      })
      this.instances.push(rl)
      this.processes.push(
        rl.limiter({ namespace: 'sim', limits: [{ limit: options.limit, window: options.windowSec }], countDenied: options.countDenied }),
      )
    }
  }

  /**
   * Starts the store's epoch well before the trace (each process's first call), so the replay
   * measures escrow, not the learning period a store begins with (docs/ARCHITECTURE.md, "Escrow").
   */
  async warmUp(clock: { set(ms: number): void }, t0: number): Promise<void> {
    const learnMs = 2 * this.syncMs + 2 * 1000
    clock.set(t0 - 2 * learnMs)
    for (const l of this.processes) await l.hit('\u0000warm-up')
    clock.set(t0 - learnMs / 2)
    await this.advanceTo(t0 - learnMs / 2)
    clock.set(t0)
  }

  /** Runs every sync instant up to `t` (every process syncs at each). */
  async advanceTo(t: number): Promise<void> {
    if (this.nextSyncMs !== this.nextSyncMs) this.nextSyncMs = (Math.floor(t / this.syncMs) + 1) * this.syncMs
    while (this.nextSyncMs <= t) {
      for (const rl of this.instances) await rl.sync('sim', { all: false }).catch(() => undefined)
      this.nextSyncMs += this.syncMs
      // a long quiet spell: jump to the last instant before t (nothing is held across it that a sync would change)
      if (t - this.nextSyncMs > 4 * this.syncMs) this.nextSyncMs = Math.floor(t / this.syncMs) * this.syncMs
    }
  }

  /** Decides one hit of `name` on process `node`; waits for a grant when one is needed. */
  async hit(node: number, name: string): Promise<{ allowed: boolean; rate: number }> {
    const d = (this.processes[node] as Limiter).hit(name)
    if (!(d instanceof Promise)) return d
    this.waited++
    return await d
  }

  async close(): Promise<void> {
    for (const rl of this.instances) await rl.close().catch(() => undefined)
  }
}

// The store with its calls and operations counted into `into`.
function countingStore(inner: Strategy, into: { operations: number; calls: number }): Strategy {
  const escrow = inner.escrow?.bind(inner)
  return {
    name: inner.name,
    supportsDecimals: inner.supportsDecimals,
    pushDiffs: (batch: DiffBatch): Promise<CounterRow[]> => inner.pushDiffs(batch),
    getCounters: inner.getCounters.bind(inner),
    resetKey: inner.resetKey.bind(inner),
    close: () => Promise.resolve(),
    escrow(batch: EscrowBatch): Promise<EscrowReply> {
      into.calls++
      into.operations += batch.grants.length + batch.windows.length
      return (escrow as NonNullable<typeof escrow>)(batch)
    },
  }
}
