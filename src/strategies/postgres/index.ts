/**
 * `ratelimiting/postgres`: the PostgreSQL strategy. See docs/STORES-postgres.md for the DDL,
 * `migrate()`, the purge and how faults are handled.
 */
import type { PostgresStrategyOptions } from './options.js'
import { PostgresStrategy } from './postgres-strategy.js'

export type { PostgresStrategyOptions, PurgeReport } from './options.js'
export type { PgClientLike, PgPoolLike } from './sessions.js'
export type { SynchronousCommit } from './sql.js'
export { PostgresStrategy } from './postgres-strategy.js'

/** Options of {@link createPostgresStrategy}: the strategy's, plus whether to migrate first. */
export interface CreatePostgresStrategyOptions extends PostgresStrategyOptions {
  /** Run `migrate()` before returning the strategy. @default false */
  readonly migrate?: boolean
}

/**
 * Makes a {@link PostgresStrategy} and, with `migrate: true`, creates its table first: the
 * factory behind `strategy: "postgres"` (`strategyOpts` are these options).
 *
 * @example
 * const store = await createPostgresStrategy({ connectionString: process.env.DATABASE_URL, migrate: true })
 */
export async function createPostgresStrategy(options: CreatePostgresStrategyOptions): Promise<PostgresStrategy> {
  const { migrate = false, ...rest } = options ?? {}
  const strategy = new PostgresStrategy(rest)
  if (migrate === true) {
    try {
      await strategy.migrate()
    } catch (err) {
      await strategy.close()
      throw err
    }
  }
  return strategy
}
