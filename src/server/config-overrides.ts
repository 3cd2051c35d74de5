import { type Raw, section } from './config-env.js'
import { userIdProblem } from './http-input.js'

// The per-user limits of the config's policies (`overrides` in `rate-limiter` and in each
// policy): the schema checks their shape, this checks each user id as a request's user id is
// checked, so an override can name only an id a request can send.
//
// Overrides are not inherited: `rate-limiter.overrides` is for the default policy only. An
// override is an absolute number chosen against one policy's `max-requests`; a named policy
// with a limit of its own (5 logins a minute) must not give a user the 1000 meant for the API.

/**
 * Adds an issue for every override whose user id no request could send, and for two ids of one
 * policy that are one key once normalized (`normalize`, as `key-normalization` says), naming its key path.
 */
export function overrideIssues(
  raw: Raw,
  maxUserIdLength: number,
  normalize: (key: string) => string,
  issues: Array<{ path: string[]; message: string }>,
): void {
  const sections: Array<[string[], Raw]> = [[['rate-limiter'], section(raw, 'rate-limiter')]]
  for (const [name, value] of Object.entries(section(raw, 'policies')))
    if (typeof value === 'object' && value !== null) sections.push([['policies', name], value as Raw])
  for (const [at, policy] of sections) {
    const overrides = policy.overrides
    if (typeof overrides !== 'object' || overrides === null || Array.isArray(overrides)) continue // the schema reports it
    const seen = new Map<string, string>()
    for (const userId of Object.keys(overrides)) {
      const problem = userIdProblem(userId, maxUserIdLength, 'the user id')
      if (problem !== undefined) {
        issues.push({ path: [...at, 'overrides', userId], message: problem })
        continue
      }
      const key = normalize(userId)
      const before = seen.get(key)
      if (before !== undefined)
        issues.push({
          path: [...at, 'overrides', userId],
          message: `names the same user as ${JSON.stringify(before)} in Unicode's NFC (key-normalization: nfc); keep one`,
        })
      else seen.set(key, userId)
    }
  }
}

/** A policy section's own overrides, user id → max-requests (empty when it sets none). */
export function overridesOf(raw: Raw): ReadonlyMap<string, number> {
  const out = new Map<string, number>()
  const overrides = raw.overrides
  if (typeof overrides !== 'object' || overrides === null) return out
  for (const [userId, value] of Object.entries(overrides as Raw)) {
    const max = (value as Raw | null)?.['max-requests']
    if (typeof max === 'number') out.set(userId, max)
  }
  return out
}
