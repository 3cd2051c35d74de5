import { ConfigError } from '../core/errors.js'

/** The seed's key prefix (RLaaS): keys are `rlaas:rate_limit:<userId>…`. */
export const DEFAULT_PREFIX = 'rlaas:rate_limit'

/** What a scope name may be: it sits between `@` and `:` in a key, so it holds neither. */
export const SCOPE_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/

/** Options that name the keys of a Redis algorithm. */
export interface KeyOptions {
  /** First part of every key. @default "rlaas:rate_limit" */
  readonly prefix?: string
  /**
   * A scope of their own for these keys, such as the service's policy name: keys become
   * `<prefix>@<scope>:fixed:<userId>:<window>` and `<prefix>@<scope>:log:<userId>`. Without it,
   * the seed's exact keys. Letters, digits, `_`, `.`, `-`, at most 64.
   */
  readonly scope?: string
  /** Wrap the user id in braces, a Redis Cluster hash tag (`<prefix>:{u1}:<window>`). @default false */
  readonly hashTag?: boolean
}

/**
 * The key names of the two seed algorithms. Without a scope they are exactly the seed's:
 * `<prefix>:<userId>:<window>` (fixed window) and `<prefix>:<userId>` (sliding log). With one,
 * `<prefix>@<scope>:fixed:<userId>:<window>` and `<prefix>@<scope>:log:<userId>`.
 *
 * Unambiguous by construction: the character after the prefix tells the seed keys (`:`) from
 * scoped ones (`@`); a scope holds no `:`, so it ends at the first one; the algorithm tag is a
 * fixed word; the user id is the rest (up to the last `:` for the fixed window, whose window is
 * digits). So no user id of one scope or algorithm names a key of another. The one overlap left
 * is the seed's own, within the unscoped keys: sliding-log user `u1:29923298` and fixed-window
 * user `u1` in bucket 29923298 share a name. The scripts check the key's type for that case (see
 * lua.ts), which only arises while both algorithms' keys exist, after a switch of `use-algo`.
 */
export class KeyNames {
  readonly prefix: string
  readonly scope: string | undefined
  readonly hashTag: boolean
  private readonly fixedHead: string
  private readonly logHead: string
  private readonly open: string
  private readonly close: string

  constructor(options: KeyOptions = {}) {
    const prefix = options.prefix ?? DEFAULT_PREFIX
    if (typeof prefix !== 'string' || prefix.length === 0)
      throw new ConfigError('INVALID_OPTION', `prefix must be a non-empty string, got ${String(prefix)}`)
    const scope = options.scope
    if (scope !== undefined && (typeof scope !== 'string' || !SCOPE_PATTERN.test(scope)))
      throw new ConfigError(
        'INVALID_OPTION',
        `scope must be letters, digits, "_", "." and "-" (at most 64, starting with a letter or digit), got ${JSON.stringify(scope)}`,
      )
    this.prefix = prefix
    this.scope = scope
    this.hashTag = options.hashTag === true
    this.fixedHead = scope === undefined ? `${prefix}:` : `${prefix}@${scope}:fixed:`
    this.logHead = scope === undefined ? `${prefix}:` : `${prefix}@${scope}:log:`
    this.open = this.hashTag ? '{' : ''
    this.close = this.hashTag ? '}' : ''
  }

  /** The fixed window's STRING of `userId` in bucket `window` (`floor(nowMs / windowMs)`). */
  fixedWindow(userId: string, window: number): string {
    return `${this.fixedHead}${this.open}${userId}${this.close}:${window}`
  }

  /** The sliding log's ZSET of `userId`. */
  slidingLog(userId: string): string {
    return `${this.logHead}${this.open}${userId}${this.close}`
  }
}
