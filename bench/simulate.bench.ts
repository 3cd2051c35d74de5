/**
 * How long `ratelimiting simulate` takes on a 1,000,000-line access log: writes a combined log
 * (the first 1,000,000 requests of a Poisson trace over 5,000 log-normal keys: 1,013 s) under
 * .tmp/ once, then runs the command in this process on the default grid and prints the time to
 * read the log and replay it, cells on worker threads (one per CPU; `--jobs 1` for one at a
 * time). Not a test: re-run it with `npm run bench:simulate`; extra arguments go to the command
 * and replace the default's (`--nodes 1,4 --sync-rate 2` narrows the grid; `--jobs N`, `--json F`).
 */
import { createWriteStream, existsSync, mkdirSync } from 'node:fs'
import { once } from 'node:events'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { runSimulate } from '../src/simulate/cli.js'
import { syntheticTrace } from '../src/simulate/profiles.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const LINES = 1_000_000
const log = path.join(root, '.tmp', 'simulate-1m.log')
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec']

function clf(ms: number): string {
  const d = new Date(ms)
  const p = (n: number) => String(n).padStart(2, '0')
  return `${p(d.getUTCDate())}/${MONTHS[d.getUTCMonth()]}/${d.getUTCFullYear()}:${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())} +0000`
}

async function writeLog(): Promise<void> {
  mkdirSync(path.dirname(log), { recursive: true })
  // 5,000 keys at a median of 4 % of 100 per 60 s, sigma 1.5: about 278 requests a second for 1 hour
  const trace = syntheticTrace({ profile: 'poisson', limit: 100, windowSec: 60, durationSec: 3600, keys: 5000, medianShare: 0.04 })
  const out = createWriteStream(log)
  const n = Math.min(LINES, trace.length)
  for (let i = 0; i < n; i++) {
    const ip = `10.${(trace.keys[i] as number) >> 8}.${(trace.keys[i] as number) & 255}.1`
    if (!out.write(`${ip} - - [${clf(trace.times[i] as number)}] "GET /api HTTP/1.1" 200 512 "-" "bench"\n`)) await once(out, 'drain')
  }
  out.end()
  await once(out, 'finish')
  console.log(`wrote ${n} lines to ${path.relative(root, log)}${n < LINES ? ` (the trace had ${trace.length})` : ''}`)
}

if (!existsSync(log)) await writeLog()
// the default grid, each of its flags replaced by the same flag given on the command line
const DEFAULTS: Record<string, string> = {
  '--nodes': '1,4,16',
  '--sync-rate': '0.05,0.5,2',
  '--algorithms': 'fixed-window,sliding-log,counter',
}
const args = process.argv.slice(2)
const grid = [...Object.entries(DEFAULTS).flatMap(([flag, value]) => (args.includes(flag) ? [] : [flag, value])), ...args]
// the machine is shared: say how busy it was
const load = () => os.loadavg()[0]?.toFixed(1)
const loadBefore = load()
const started = performance.now()
const code = await runSimulate([log, '--limit', '100', '--window', '60', ...grid], {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  stderrIsTTY: process.stderr.isTTY === true,
})
console.log(
  `\nsimulate ${grid.join(' ')}: ${((performance.now() - started) / 1000).toFixed(1)} s in all (exit ${code}; ` +
    `${os.availableParallelism()} CPUs, load average ${loadBefore} before, ${load()} after)`,
)
