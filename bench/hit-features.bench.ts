/**
 * What features that are off cost `limiter.hit` (issue 28, target 3): the plain limiter's hit on
 * one hot key, allowed, in a process that runs nothing else ("alone"), and in one that has first
 * run limiters with other features ("beside others": a `Date.now` clock, deny/allow lists, a
 * per-key limit function, a periodic namespace, a limit with `blockMs`, an escrow namespace), as an
 * application with several limiters does. Code shared by every configuration gathers their type
 * feedback, and a plain hit pays for features it does not use; the plain limiter's own `hit`
 * (limiter.ts, hitOne) is what keeps it out of that.
 *
 *   node --import tsx bench/hit-features.bench.ts             # both cases, 5 processes each, medians
 *   node --import tsx bench/hit-features.bench.ts --no-escrow    # the others without the escrow limiter
 *   node --import tsx bench/hit-features.bench.ts --one beside   # one process, prints its figure (used by the above)
 *
 * Each case runs in a fresh process (feedback is per process), our engine compiled as published
 * (bench/lib/load-ours.ts). Prints only; docs/BENCHMARKS.md ("Features that are off") cites it.
 */
import { execFileSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { median } from './lib/harness.js'
import { loadOurs } from './lib/load-ours.js'

const CALLS = 2_000_000
const ROUNDS = 15
const PROCESSES = 5

type Case = 'alone' | 'beside'

async function one(which: Case, withEscrow: boolean): Promise<number> {
  const engine = await loadOurs('build')
  const { RateLimiting, MemoryStrategy } = engine.ours
  const sink: unknown[] = new Array(1024)
  // a loop of its own per subject: its call site sees one function, as in an application
  const loopOf = () =>
    new Function('op', 'n', 'sink', 'for (let i = 0; i < n; i++) sink[i & 1023] = op("hot"); return 0') as (
      op: (k: string) => unknown,
      n: number,
      sink: unknown[],
    ) => number
  const time = (op: (k: string) => unknown): number => {
    const loop = loopOf()
    const t0 = process.hrtime.bigint()
    loop(op, CALLS, sink)
    return Number(process.hrtime.bigint() - t0) / CALLS
  }
  const instances: Array<ReturnType<typeof RateLimiting.newInstance>> = []
  const limiterOf = (
    ns: Record<string, unknown>,
    limiter: Record<string, unknown> = {},
    limit: number | ((k: string) => number) = 1e12,
  ) => {
    const rl = RateLimiting.newInstance(`hit-features-${instances.length}`)
    instances.push(rl)
    rl.new({ namespace: 'a', windowSizes: [60], ...ns } as Parameters<typeof rl.new>[0])
    return rl.limiter({ namespace: 'a', limits: [{ limit, window: 60, ...(limiter.blockMs ? { blockMs: 1000 } : {}) }], ...limiter })
  }
  if (which === 'beside') {
    const others = [
      limiterOf({ clock: Date.now }),
      limiterOf({}, { denyList: ['scraper'], allowList: ['10.0.0.0/8'] }),
      limiterOf({}, {}, () => 1e12),
      limiterOf({ syncRate: 1, strategy: new MemoryStrategy(), autoSync: false }),
      limiterOf({}, { blockMs: 1000 }),
    ]
    for (const l of others) for (let r = 0; r < 3; r++) time((k) => l.hit(k))
    if (withEscrow) {
      const escrow = limiterOf({ syncRate: 1, strategy: new MemoryStrategy(), autoSync: false, escrow: true })
      await escrow.hit('hot') // the store's first call begins its epoch: hits are decided by onStoreError meanwhile
      for (let r = 0; r < 3; r++) time((k) => escrow.hit(k))
    }
  }
  const plain = limiterOf({})
  const figures: number[] = []
  for (let r = 0; r < ROUNDS; r++) figures.push(time((k) => plain.hit(k)))
  for (const rl of instances) await rl.close()
  engine.cleanup()
  return median(figures)
}

const args = process.argv.slice(2)
const withEscrow = !args.includes('--no-escrow')
const at = args.indexOf('--one')
if (at >= 0) {
  const which = args[at + 1]
  if (which !== 'alone' && which !== 'beside') throw new RangeError(`--one takes alone or beside, got ${String(which)}`)
  console.log((await one(which, withEscrow)).toFixed(2))
} else {
  const self = fileURLToPath(import.meta.url)
  const runs: Record<Case, number[]> = { alone: [], beside: [] }
  for (let p = 0; p < PROCESSES; p++)
    for (const which of ['alone', 'beside'] as const)
      runs[which].push(
        Number(
          execFileSync(process.execPath, ['--import', 'tsx', self, '--one', which, ...(withEscrow ? [] : ['--no-escrow'])], {
            encoding: 'utf8',
          }).trim(),
        ),
      )
  console.log('| `limiter.hit`, allowed, one hot key | ns per hit (median of 5 processes) | the processes |')
  console.log('| --- | ---: | --- |')
  for (const which of ['alone', 'beside'] as const)
    console.log(
      `| ${which === 'alone' ? 'alone in its process' : 'beside limiters with other features'} | ${median(runs[which]).toFixed(1)} | ${runs[which].map((v) => v.toFixed(1)).join(', ')} |`,
    )
}
