import { keyListEntryProblem } from '../core/key-lists.js'
import { type Raw, section } from './config-env.js'

// The deny and allow lists of the config's policies (`deny-list`, `allow-list` in `rate-limiter`
// and in each policy): the schema checks they are lists of strings, this checks each entry as
// the limiter does (a CIDR range must be a valid address and prefix length).

/** The list keys a policy may carry, as written in the config. */
export const LIST_KEYS = ['deny-list', 'allow-list'] as const

/** Adds an issue for every malformed entry of every policy's lists, naming the entry's key path. */
export function listIssues(raw: Raw, issues: Array<{ path: string[]; message: string }>): void {
  const sections: Array<[string[], Raw]> = [[['rate-limiter'], section(raw, 'rate-limiter')]]
  for (const [name, value] of Object.entries(section(raw, 'policies')))
    if (typeof value === 'object' && value !== null) sections.push([['policies', name], value as Raw])
  for (const [at, policy] of sections)
    for (const key of LIST_KEYS) {
      const list = policy[key]
      if (!Array.isArray(list)) continue
      list.forEach((entry: unknown, i: number) => {
        if (typeof entry !== 'string' || entry.length === 0) return // the schema reports it
        const problem = keyListEntryProblem(entry)
        if (problem !== undefined) issues.push({ path: [...at, key, String(i)], message: `${JSON.stringify(entry)}: ${problem}` })
      })
    }
}

/** A policy's lists: its own when it sets them (an empty list clears the inherited one), else `base`'s. */
export function policyListsOf(
  raw: Raw,
  base: { denyList: readonly string[]; allowList: readonly string[] },
): { denyList: readonly string[]; allowList: readonly string[] } {
  return {
    denyList: (raw['deny-list'] as string[] | undefined) ?? base.denyList,
    allowList: (raw['allow-list'] as string[] | undefined) ?? base.allowList,
  }
}
