/**
 * The simple API (the Go limiter's): 5 calls per second per client, in local memory, then the
 * same limiter shared by two "processes" through one store with calls racing for the last slot.
 *
 * Run: node --import tsx examples/simple.ts
 */
import { MemoryStrategy } from '../src/index.js'
import { perSecond } from '../src/simple/index.js'

export async function runSimpleExample(): Promise<string[]> {
  const lines: string[] = []
  const limiter = perSecond(5)
  const answers = Array.from({ length: 7 }, () => limiter.allow('client-1'))
  lines.push(`local: ${answers.map((a) => (a ? 'allow' : 'deny')).join(' ')}`)
  lines.push(`stats: ${JSON.stringify(limiter.allowWithStats('client-1'))}`)

  // two processes, one store: a memcached or Redis strategy in production
  const store = new MemoryStrategy()
  const web1 = perSecond(5, { store, name: 'api' })
  const web2 = perSecond(5, { store, name: 'api' })
  const racing = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? web1 : web2).allow('client-1')))
  lines.push(`shared: ${racing.filter(Boolean).length} of ${racing.length} concurrent calls allowed`)
  await Promise.all([web1.close(), web2.close(), limiter.close()])
  return lines
}

if (import.meta.url === `file://${process.argv[1]}`) {
  for (const line of await runSimpleExample()) console.log(line)
}
