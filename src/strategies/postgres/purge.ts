/**
 * The PostgreSQL strategy's purge run (`purge()`, `purgeNow()` and the automatic purge): bounded
 * DELETE statements on one session, under a session advisory lock so that one process purges a
 * namespace at a time.
 */
import type { PurgeReport } from './options.js'
import type { PgClientLike, Sessions, Statement } from './sessions.js'

const SQLSTATE_UNDEFINED_TABLE = '42P01'

/** What one purge run needs of its strategy. */
export interface PurgeRun {
  /** The advisory lock's name: one per table and namespace. */
  readonly lockKey: string
  readonly graceMs: number
  /** Rows one statement deletes at most (its last parameter). */
  readonly batchSize: number
  /** Statements per window size (and for the blocks) at most. */
  readonly maxBatches: number
  /** Deletes expired windows: $1 namespace, $2 size, $3 cutoff, $4 batch size. */
  readonly windows: Statement
  /** Deletes ended blocks: $1 namespace, $2 cutoff, $3 batch size. */
  readonly blocks: Statement
  /** Called once per statement sent. */
  readonly onStatement: () => void
}

/**
 * Deletes the namespace's windows of `windowSizesMs` that expired at `nowMs`, and its blocks that
 * ended `graceMs` before it; returns at once (`locked: false`) when another session holds the lock.
 */
export async function runPurge(
  sessions: Sessions,
  run: PurgeRun,
  namespace: string,
  windowSizesMs: readonly number[],
  nowMs: number,
): Promise<PurgeReport> {
  const client = await sessions.checkout('purge')
  let broken: Error | undefined
  let locked = false
  const report = { locked: false, deleted: 0, blocksDeleted: 0, batches: 0 }
  try {
    const got = await sessions.timed(client, 'purge', {
      text: 'SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS locked',
      values: [run.lockKey],
    })
    locked = (got.rows[0] as { locked: boolean } | undefined)?.locked === true
    report.locked = locked
    if (!locked) return report
    for (const size of windowSizesMs) {
      // expired when start + 2 * size + grace <= now, as in windowExpiresAtMs
      const cutoff = nowMs - run.graceMs - 2 * size
      report.deleted += await deleteBatches(sessions, client, run, report, run.windows, [namespace, size, cutoff])
    }
    // a block is kept graceMs past its end, as a window is: clocks of the fleet differ a little
    report.blocksDeleted = await deleteBatches(sessions, client, run, report, run.blocks, [namespace, nowMs - run.graceMs]).catch(
      (err: unknown) => {
        // a table migrated by a version without blocks holds none; pushes with blocks say to migrate
        if ((err as { cause?: { code?: unknown } }).cause?.code === SQLSTATE_UNDEFINED_TABLE) return 0
        throw err
      },
    )
    return report
  } catch (err) {
    broken = err instanceof Error ? err : new Error(String(err))
    throw sessions.storeError('purge', err)
  } finally {
    if (locked && broken === undefined) {
      await sessions
        .timed(client, 'purge', {
          text: 'SELECT pg_advisory_unlock(hashtextextended($1, 0))',
          values: [run.lockKey],
        })
        .catch((err: unknown) => {
          broken = err instanceof Error ? err : new Error(String(err))
        })
    }
    // a broken session is destroyed, which also releases its advisory lock
    client.release(broken)
  }
}

// Runs a bounded DELETE (the batch size its last parameter) until one deletes less than a
// batch or maxBatches have run; answers the rows deleted.
async function deleteBatches(
  sessions: Sessions,
  client: PgClientLike,
  run: PurgeRun,
  report: { batches: number },
  statement: Statement,
  values: unknown[],
): Promise<number> {
  let deleted = 0
  for (let i = 0; i < run.maxBatches; i++) {
    run.onStatement()
    report.batches++
    const result = await sessions.timed(client, 'purge', {
      name: statement.name,
      text: statement.text,
      values: [...values, run.batchSize],
    })
    const n = result.rowCount ?? 0
    deleted += n
    if (n < run.batchSize) break
  }
  return deleted
}
