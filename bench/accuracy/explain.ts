/**
 * Why a cell of the accuracy harness went over the limit: replays one synthetic trace through
 * one cell of simulated processes (runCell of src/simulate/replay.ts, as bench/accuracy/run.ts
 * does), finds the keys whose truly admitted hits exceeded the limit in some window-long
 * interval, and prints the worst one's decisions around that interval: time from the trace's
 * start, the process, the outcome and the rate it decided on (before the hit). docs/ACCURACY.md
 * cites it.
 *
 *   npm run bench:accuracy:explain -- --profile steady --sync 0.5 --no-count-denied
 *   npm run bench:accuracy:explain -- --profile boundary --sync 2
 *   npm run bench:accuracy:explain -- --profile poisson --sync 2 --seed 2 --escrow
 *
 * Flags: --profile (poisson, steady, boundary, pacing), --nodes (8), --sync seconds (0.5),
 * --duration seconds (as run.ts: 600 for poisson, 1200 for the others), --seed (1), --escrow (the counter with escrow),
 * --no-count-denied, --key N (the Nth worst key, from 0). Limit 100 per 60 s, hits to the
 * processes in turn.
 */
import { parseArgs } from 'node:util'
import { PROFILE_NAMES, type ProfileName, syntheticTrace } from '../../src/simulate/profiles.js'
import { algorithmEntry, runCell } from '../../src/simulate/replay.js'

const { values } = parseArgs({
  options: {
    profile: { type: 'string', default: 'steady' },
    nodes: { type: 'string', default: '8' },
    sync: { type: 'string', default: '0.5' },
    duration: { type: 'string' },
    seed: { type: 'string', default: '1' },
    key: { type: 'string', default: '0' },
    escrow: { type: 'boolean', default: false },
    'no-count-denied': { type: 'boolean', default: false },
  },
})
const profile = values.profile as ProfileName
if (!PROFILE_NAMES.includes(profile)) throw new RangeError(`--profile must be one of ${PROFILE_NAMES.join(', ')}, got ${profile}`)
const number = (flag: string, text: string | undefined, integer: boolean): number => {
  const n = Number(text)
  if (!Number.isFinite(n) || n < 0 || (integer && !Number.isInteger(n)))
    throw new RangeError(`--${flag} takes a ${integer ? 'whole ' : ''}number >= 0, got ${text}`)
  return n
}
const LIMIT = 100
const WINDOW_MS = 60_000
const nodes = number('nodes', values.nodes, true)
const syncRate = number('sync', values.sync, false)
const seed = number('seed', values.seed, true)
const nth = number('key', values.key, true)
const countDenied = !values['no-count-denied']
const durationSec = values.duration === undefined ? (profile === 'poisson' ? 600 : 1200) : number('duration', values.duration, true)
const trace = syntheticTrace({
  profile,
  limit: LIMIT,
  windowSec: WINDOW_MS / 1000,
  durationSec,
  seed,
  ...(profile === 'poisson' ? { keys: 1000 } : {}),
})

interface Decision {
  readonly t: number
  readonly node: number
  readonly allowed: boolean
  readonly rate: number
}
const decisions: Decision[][] = trace.keyNames.map(() => [])
await runCell(
  trace,
  { algorithm: algorithmEntry(values.escrow ? 'counter-escrow' : 'counter'), nodes, syncRate },
  {
    limit: LIMIT,
    windowSec: WINDOW_MS / 1000,
    countDenied,
    onHit: (key, t, node, allowed, rate) => decisions[key]?.push({ t, node, allowed, rate }),
  },
)

// each key's busiest window-long interval (t − window, t] of admitted hits
const over: { key: number; count: number; from: number; to: number }[] = []
for (const [key, list] of decisions.entries()) {
  const admitted = list.filter((d) => d.allowed).map((d) => d.t)
  let first = 0
  let best = { count: 0, from: 0, to: 0 }
  for (let last = 0; last < admitted.length; last++) {
    while ((admitted[first] as number) <= (admitted[last] as number) - WINDOW_MS) first++
    if (last - first + 1 > best.count) best = { count: last - first + 1, from: admitted[first] as number, to: admitted[last] as number }
  }
  if (best.count > LIMIT) over.push({ key, ...best })
}
over.sort((a, b) => b.count - a.count)
const t0 = trace.times[0] as number
const sec = (t: number) => ((t - t0) / 1000).toFixed(3)
console.log(
  `${profile}, ${nodes} processes, sync ${syncRate} s, seed ${seed}, ${countDenied ? 'denied hits count' : 'denied hits do not count'}${values.escrow ? ', escrow' : ''}: ${over.length} key(s) over ${LIMIT} per ${WINDOW_MS / 1000} s`,
)
for (const o of over.slice(0, 5)) console.log(`  ${trace.keyNames[o.key]}: ${o.count} admitted in [${sec(o.from)} s, ${sec(o.to)} s]`)
const shown = over[nth]
if (shown !== undefined) {
  console.log(
    `\n${trace.keyNames[shown.key]}, the first and last 3 s of that interval (s from the trace's start, process, outcome, rate before):`,
  )
  for (const d of decisions[shown.key] ?? []) {
    const near = (d.t >= shown.from - 3000 && d.t <= shown.from + 3000) || (d.t >= shown.to - 3000 && d.t <= shown.to + 1000)
    if (near) console.log(`  ${sec(d.t)}  n${d.node}  ${d.allowed ? 'allow' : 'deny '}  ${d.rate.toFixed(2)}`)
  }
}
