// The `store` keys of Redis Sentinel (`sentinels`, `master-name`, `password`,
// `sentinel-password`): their cross-key rules and the parsing of a Sentinel's address, one
// function for both, so that check-config refuses exactly what serve could not open.

type Raw = Record<string, unknown>
type Issue = { path: string[]; message: string }

/** The port of a Sentinel written without one (Redis Sentinel's own default). */
export const DEFAULT_SENTINEL_PORT = 26_379

/** A Sentinel as the config writes it, `host[:port]` (`[::1]:26379` for IPv6), or undefined when malformed. */
export function sentinelAddress(text: string): { host: string; port: number } | undefined {
  let url: URL
  try {
    url = new URL(`redis://${text}`)
  } catch {
    return undefined
  }
  // anything the URL parser dropped or rewrote (a path, user info, a trailing comma) is not an address
  if (url.hostname === '' || url.host.toLowerCase() !== text.toLowerCase()) return undefined
  const port = url.port === '' ? DEFAULT_SENTINEL_PORT : Number(url.port)
  if (port < 1) return undefined
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
  return { host, port }
}

const PASSWORDS = ['password', 'sentinel-password'] as const

/** The problems of a redis `store` section's Sentinel keys (their types are the schema's, but for the passwords). */
export function sentinelIssues(store: Raw): Issue[] {
  const issues: Issue[] = []
  // the passwords' values stay out of every message: the schema leaves their type to this check
  for (const key of PASSWORDS)
    if (store[key] !== undefined && (typeof store[key] !== 'string' || store[key] === ''))
      issues.push({ path: ['store', key], message: 'must be a non-empty string (quote it in YAML if it looks like a number)' })
  const sentinels = store.sentinels
  if (sentinels === undefined) {
    if (store['master-name'] !== undefined)
      issues.push({ path: ['store', 'master-name'], message: 'is for store.sentinels (Redis Sentinel)' })
    for (const key of PASSWORDS)
      if (store[key] !== undefined)
        issues.push({
          path: ['store', key],
          message: 'is for store.sentinels (Redis Sentinel); with store.url, write the password in the URL (redis://:password@host:port)',
        })
    return issues
  }
  if (store.url !== undefined)
    issues.push({ path: ['store', 'sentinels'], message: 'give either url (one server) or sentinels (Redis Sentinel), not both' })
  if (store.nodes !== undefined)
    issues.push({ path: ['store', 'sentinels'], message: 'give either nodes (a Redis Cluster) or sentinels (Redis Sentinel), not both' })
  if (store['master-name'] === undefined)
    issues.push({
      path: ['store', 'master-name'],
      message: 'is required with store.sentinels: the name the Sentinels monitor the master under (sentinel monitor <name> …)',
    })
  if (Array.isArray(sentinels))
    sentinels.forEach((value: unknown, i) => {
      if (typeof value === 'string' && sentinelAddress(value) === undefined)
        issues.push({
          path: ['store', 'sentinels', String(i)],
          message: `must be host:port (a Sentinel; port ${DEFAULT_SENTINEL_PORT} when left out), got ${JSON.stringify(value)}`,
        })
    })
  return issues
}
