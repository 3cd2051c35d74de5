/**
 * What the engine benchmark compares: our local decisions and the in-memory limiters of three
 * peers, each built the way its documentation shows, with one window of 60 s.
 */
import { type Options as ExpressRateLimitOptions, MemoryStore } from 'express-rate-limit'
import { TokenBucket } from 'limiter'
import { RateLimiterMemory } from 'rate-limiter-flexible'
import type { Clock, RateLimiting } from '../../src/index.js'
import type { MemoryTarget, Op } from './harness.js'
import type { Ours } from './load-ours.js'

/** Window of every subject, seconds. */
export const WINDOW_SEC = 60
/** A limit no benchmark reaches, for the subjects whose hits must stay allowed. */
export const NEVER_REACHED = 1e12

/** Key patterns: one hot key, a working set that fits in cache, and a flood of keys. */
export type PatternId = 'hot' | 'many' | 'flood'

/** Who a subject belongs to: us, a peer, or the floor (the loop and a no-op call). */
export type SubjectKind = 'ours' | 'peer' | 'floor'

/** One thing being measured; `make` builds a fresh instance for one key pattern. */
export interface Subject {
  readonly id: string
  readonly label: string
  readonly kind: SubjectKind
  /** Whether `op` returns a Promise (awaited per call). */
  readonly isAsync: boolean
  /** The patterns it runs in. */
  readonly patterns: readonly PatternId[]
  /** Whether heap per key is measured for it. */
  readonly memory: boolean
  make(): MemoryTarget
}

const ALL: readonly PatternId[] = ['hot', 'many', 'flood']
const SMALL: readonly PatternId[] = ['hot', 'many']

let instances = 0

function ourNamespace(ours: Ours, clock: Clock | undefined): RateLimiting {
  const rl = ours.RateLimiting.newInstance(`bench-${++instances}`)
  rl.new({ namespace: 'bench', windowSizes: [WINDOW_SEC], syncRate: -1, ...(clock === undefined ? {} : { clock }) })
  return rl
}

function oursIncrement(ours: Ours, clock: Clock | undefined): MemoryTarget {
  const rl = ourNamespace(ours, clock)
  return { op: (key) => rl.increment(key, WINDOW_SEC, 1, 'bench'), isAsync: false, dispose: () => rl.close() }
}

function oursHit(ours: Ours, clock: Clock | undefined, limit: number): MemoryTarget {
  const rl = ourNamespace(ours, clock)
  const limiter = rl.limiter({ namespace: 'bench', limits: [{ limit, window: WINDOW_SEC }] })
  return { op: (key) => limiter.hit(key), isAsync: false, dispose: () => rl.close() }
}

/** Our `limiter.hit` with one of the limiter's options (what a feature costs when on), allowed. */
function oursHitWith(ours: Ours, feature: 'per-key' | 'override' | 'lists' | 'periodic' | 'block-ms'): MemoryTarget {
  const rl = ours.RateLimiting.newInstance(`bench-${++instances}`)
  const periodic = feature === 'periodic'
  rl.new({
    namespace: 'bench',
    windowSizes: [WINDOW_SEC],
    // periodic: hits queue their keys for a sync that never runs here (autoSync off)
    ...(periodic ? { syncRate: 1, strategy: new ours.MemoryStrategy(), autoSync: false } : { syncRate: -1 }),
  })
  const limiter = rl.limiter({
    namespace: 'bench',
    limits: [
      {
        limit: feature === 'per-key' ? (key: string) => (key.length > 64 ? 1 : NEVER_REACHED) : NEVER_REACHED,
        window: WINDOW_SEC,
        ...(feature === 'block-ms' ? { blockMs: 60_000 } : {}),
      },
    ],
    ...(feature === 'lists' ? { denyList: ['scraper', '10.0.0.0/8'], allowList: ['2001:db8::/32'] } : {}),
  })
  const options = { limit: NEVER_REACHED }
  const op: Op = feature === 'override' ? (key) => limiter.hit(key, 1, options) : (key) => limiter.hit(key)
  return { op, isAsync: false, dispose: () => rl.close() }
}

interface FlexibleInternals {
  _memoryStorage: { _storage: Map<string, { timeoutId?: NodeJS.Timeout }> }
}

function flexible(points: number): MemoryTarget {
  const limiter = new RateLimiterMemory({ points, duration: WINDOW_SEC })
  return {
    op: (key) => limiter.consume(key),
    isAsync: true,
    dispose() {
      // each key holds a timer for its expiry (and the timers hold the storage): stop them
      const storage = (limiter as unknown as FlexibleInternals)._memoryStorage._storage
      for (const record of storage.values()) clearTimeout(record.timeoutId)
      storage.clear()
    },
  }
}

function expressStore(): MemoryTarget {
  const store = new MemoryStore()
  store.init({ windowMs: WINDOW_SEC * 1000 } as ExpressRateLimitOptions)
  return { op: (key) => store.increment(key), isAsync: true, dispose: () => store.shutdown() }
}

function newBucket(): TokenBucket {
  const bucket = new TokenBucket({ bucketSize: NEVER_REACHED, tokensPerInterval: NEVER_REACHED, interval: WINDOW_SEC * 1000 })
  bucket.content = bucket.bucketSize // a bucket starts empty; start it full so every hit is allowed
  return bucket
}

function tokenBuckets(): MemoryTarget {
  // limiter has no keys: a user keeps one bucket per key in a Map
  const buckets = new Map<string, TokenBucket>()
  const op: Op = (key) => {
    let bucket = buckets.get(key)
    if (bucket === undefined) {
      bucket = newBucket()
      buckets.set(key, bucket)
    }
    return bucket.tryRemoveTokens(1)
  }
  return { op, isAsync: false, dispose: () => buckets.clear() }
}

function singleBucket(): MemoryTarget {
  const bucket = newBucket()
  return { op: () => bucket.tryRemoveTokens(1), isAsync: false, dispose: () => undefined }
}

/** Every subject, in the order of the tables; `ours` is the engine as `loadOurs` loaded it. */
export function subjects(ours: Ours): Subject[] {
  const cached = undefined // the namespace's default clock: cachedClock
  const exact: Clock = Date.now
  return [
    {
      id: 'ours-increment',
      label: 'ours: `rl.increment` (default cachedClock)',
      kind: 'ours',
      isAsync: false,
      patterns: ALL,
      memory: true,
      make: () => oursIncrement(ours, cached),
    },
    {
      id: 'ours-increment-datenow',
      label: 'ours: `rl.increment` (`clock: Date.now`)',
      kind: 'ours',
      isAsync: false,
      patterns: ALL,
      memory: false,
      make: () => oursIncrement(ours, exact),
    },
    {
      id: 'ours-hit',
      label: 'ours: `limiter.hit`, allowed (default cachedClock)',
      kind: 'ours',
      isAsync: false,
      patterns: ALL,
      memory: false,
      make: () => oursHit(ours, cached, NEVER_REACHED),
    },
    {
      id: 'ours-hit-datenow',
      label: 'ours: `limiter.hit`, allowed (`clock: Date.now`)',
      kind: 'ours',
      isAsync: false,
      patterns: ALL,
      memory: false,
      make: () => oursHit(ours, exact, NEVER_REACHED),
    },
    {
      id: 'ours-hit-denied',
      label: 'ours: `limiter.hit`, denied (limit 1, default cachedClock)',
      kind: 'ours',
      isAsync: false,
      patterns: SMALL,
      memory: false,
      make: () => oursHit(ours, cached, 1),
    },
    {
      id: 'ours-hit-denied-datenow',
      label: 'ours: `limiter.hit`, denied (limit 1, `clock: Date.now`)',
      kind: 'ours',
      isAsync: false,
      patterns: SMALL,
      memory: false,
      make: () => oursHit(ours, exact, 1),
    },
    ...(
      [
        ['per-key', 'a limit that is a function of the key'],
        ['override', 'a `{ limit }` override per hit'],
        ['lists', 'a deny and an allow list (no key listed)'],
        ['periodic', 'periodic namespace (no sync runs)'],
        ['block-ms', 'a limit with `blockMs` (no key blocked: a block lookup per hit)'],
      ] as const
    ).map(([feature, what]): Subject => ({
      id: `ours-hit-${feature}`,
      label: `ours: \`limiter.hit\`, allowed, ${what}`,
      kind: 'ours',
      isAsync: false,
      patterns: SMALL,
      memory: false,
      make: () => oursHitWith(ours, feature),
    })),
    {
      id: 'rlf-consume',
      label: 'rate-limiter-flexible `RateLimiterMemory.consume`, awaited',
      kind: 'peer',
      isAsync: true,
      patterns: ALL,
      memory: true,
      make: () => flexible(NEVER_REACHED),
    },
    {
      id: 'rlf-consume-denied',
      label: 'rate-limiter-flexible `consume`, denied (points 1, rejection caught)',
      kind: 'peer',
      isAsync: true,
      patterns: SMALL,
      memory: false,
      make: () => flexible(1),
    },
    {
      id: 'erl-increment',
      label: 'express-rate-limit `MemoryStore.increment`, awaited',
      kind: 'peer',
      isAsync: true,
      patterns: ALL,
      memory: true,
      make: expressStore,
    },
    {
      id: 'limiter-map',
      label: 'limiter `TokenBucket.tryRemoveTokens`, a bucket per key in a Map',
      kind: 'peer',
      isAsync: false,
      patterns: ALL,
      memory: true,
      make: tokenBuckets,
    },
    {
      id: 'limiter-bucket',
      label: 'limiter `TokenBucket.tryRemoveTokens`, one bucket, no key lookup',
      kind: 'peer',
      isAsync: false,
      patterns: ['hot'],
      memory: false,
      make: singleBucket,
    },
    {
      id: 'floor',
      label: 'floor: the loop calling a no-op',
      kind: 'floor',
      isAsync: false,
      patterns: ALL,
      memory: false,
      make: () => ({ op: (key) => key, isAsync: false, dispose: () => undefined }),
    },
  ]
}

/** The peers our increment is held to, by subject id. */
export const PEER_IDS = ['rlf-consume', 'erl-increment', 'limiter-map', 'limiter-bucket'] as const
