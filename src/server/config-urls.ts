// The checks of store addresses: check-config must refuse what serve would then fail to open,
// such as "redis://127.0.0.1:7490," (a trailing comma in the port, which ioredis cannot parse).

type Raw = Record<string, unknown>
type Issue = { path: string[]; message: string }

/** Why `text` is not a redis:// or rediss:// URL with a host, or undefined when it is one. */
function redisUrlProblem(text: string): string | undefined {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return `must be a redis:// or rediss:// URL, got ${JSON.stringify(text)}, which is not a valid URL`
  }
  if (url.protocol !== 'redis:' && url.protocol !== 'rediss:') return `must be a redis:// or rediss:// URL, got ${JSON.stringify(text)}`
  if (url.hostname === '') return `must name a host, got ${JSON.stringify(text)}`
  return undefined
}

/** Why a Redis Cluster node is not `host[:port]` or a Redis URL, or undefined when it is. */
function clusterNodeProblem(node: string): string | undefined {
  if (node.includes('://')) return redisUrlProblem(node)
  try {
    const url = new URL(`redis://${node}`)
    if (url.hostname !== '' && url.host.toLowerCase() === node.toLowerCase()) return undefined
  } catch {
    // reported below
  }
  return `must be host:port or a redis:// URL, got ${JSON.stringify(node)}`
}

// What the memcached client accepts (src/strategies/memcached/client.ts).
const MEMCACHED_SERVER = /^\[?([^\]\s]+?)\]?:(\d{1,5})$/

function memcachedServerProblem(server: string): string | undefined {
  const port = Number(MEMCACHED_SERVER.exec(server)?.[2])
  return port > 0 && port < 65_536 ? undefined : `must be host:port, got ${JSON.stringify(server)}`
}

/** The problems of the `store` section's addresses for `storeType`. */
export function urlProblems(storeType: string, store: Raw): Issue[] {
  const issues: Issue[] = []
  if (storeType === 'redis' && typeof store.url === 'string') {
    const problem = redisUrlProblem(store.url)
    if (problem !== undefined) issues.push({ path: ['store', 'url'], message: problem })
  }
  if (storeType === 'postgres' && typeof store.url === 'string' && !/^postgres(ql)?:\/\//.test(store.url))
    issues.push({ path: ['store', 'url'], message: `must be a postgres:// or postgresql:// URL, got ${JSON.stringify(store.url)}` })
  const check = storeType === 'redis' ? clusterNodeProblem : storeType === 'memcached' ? memcachedServerProblem : undefined
  const key = storeType === 'redis' ? 'nodes' : 'servers'
  const values = store[key]
  if (check !== undefined && Array.isArray(values)) {
    values.forEach((value: unknown, i) => {
      const problem = typeof value === 'string' ? check(value) : undefined
      if (problem !== undefined) issues.push({ path: ['store', key, String(i)], message: problem })
    })
  }
  return issues
}
