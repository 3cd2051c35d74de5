/** What the store benchmarks (Redis, PostgreSQL, memcached) share: the load loop and the log. */

/** A subject of a store benchmark, as the load loop sees it. */
export interface LoadSubject {
  /** Decisions made back to back before yielding to the event loop (local decisions never yield). */
  readonly batch: number
  /** Decisions per second to hold, instead of as many as possible. */
  readonly pace?: number
  /** One decision; a Promise is awaited, a value returned synchronously is used as it is. */
  readonly decide: (key: string) => unknown
}

/**
 * Runs `inFlight` workers over `keys` for `ms`; each finishes its decision before the next (a
 * decision that comes back synchronously, as periodic mode returns it, is not awaited, as the
 * adapters do not await it).
 */
export async function measureDecisions(
  subject: LoadSubject,
  keys: readonly string[],
  inFlight: number,
  ms: number,
): Promise<{ decisions: number; seconds: number }> {
  let decisions = 0
  const started = performance.now()
  const deadline = started + ms
  const worker = async (w: number): Promise<void> => {
    let i = w * 7919
    while (performance.now() < deadline) {
      for (let b = 0; b < subject.batch; b++) {
        const decision = subject.decide(keys[i++ % keys.length] as string)
        if (decision instanceof Promise) await decision
        decisions++
      }
      if (subject.pace !== undefined) {
        // hold the rate: wait until the clock catches up with the decisions made
        const wait = started + (decisions * 1000) / subject.pace - performance.now()
        if (wait > 0) await new Promise((r) => setTimeout(r, wait))
      } else if (subject.batch > 1) {
        // let timers (the periodic sync) and I/O run between batches, as between a server's requests
        await new Promise((r) => setImmediate(r))
      }
    }
  }
  await Promise.all(Array.from({ length: inFlight }, (_, w) => worker(w)))
  return { decisions, seconds: (performance.now() - started) / 1000 }
}

/** A progress line on stderr (stdout stays for the result). */
export function log(line: string): void {
  process.stderr.write(`[bench] ${line}\n`)
}

/** What one round of one subject measured. */
export interface RoundSample {
  readonly decisions: number
  readonly seconds: number
  /** Client CPU (user + system) of this process during the round, µs. */
  readonly cpuUs: number
  /** How much each counter of `probe` moved during the round. */
  readonly counters: Readonly<Record<string, number>>
}

/**
 * Runs `rounds` rounds of every subject, interleaved, the order reversed every other round (A B,
 * B A, ...) so that load drifting on a shared machine, and what a round leaves behind (garbage,
 * the server's state), weigh on every subject alike. `probe` reads counters (a server's
 * commands, CPU time) before and after each round.
 */
export async function interleavedRounds<S extends LoadSubject>(
  subjects: readonly S[],
  keys: readonly string[],
  inFlight: number,
  rounds: number,
  ms: number,
  probe: (subject: S) => Promise<Record<string, number>> = async () => ({}),
): Promise<RoundSample[][]> {
  const samples = subjects.map(() => [] as RoundSample[])
  for (let r = 0; r < rounds; r++) {
    const order = subjects.map((_, i) => i)
    if (r % 2 === 1) order.reverse()
    for (const i of order) {
      const subject = subjects[i] as S
      const before = await probe(subject)
      const cpuBefore = process.cpuUsage()
      const { decisions, seconds } = await measureDecisions(subject, keys, inFlight, ms)
      const cpu = process.cpuUsage(cpuBefore)
      const after = await probe(subject)
      const counters: Record<string, number> = {}
      for (const name of Object.keys(after)) counters[name] = (after[name] as number) - (before[name] ?? 0)
      samples[i]?.push({ decisions, seconds, cpuUs: cpu.user + cpu.system, counters })
    }
  }
  return samples
}
