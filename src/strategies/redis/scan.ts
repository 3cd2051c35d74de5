import { namespacePattern, type ParsedName, parseWindowName } from './key-names.js'
import type { RedisNodeAdapter } from './client-adapter.js'

/** A key-window name SCAN found, and what it names. */
export interface FoundName {
  readonly name: string
  readonly parsed: ParsedName
}

/**
 * Yields, page by page, the parsed names of every key-window of a namespace (`head`), on every
 * given master. `desync` is called with a reply that is not a SCAN reply.
 */
export async function* scanNamespace(
  masters: readonly RedisNodeAdapter[],
  head: string,
  scanCount: number,
  desync: (reply: unknown) => never,
): AsyncGenerator<FoundName[]> {
  const pattern = namespacePattern(head)
  const seen = new Set<string>()
  for (const node of masters) {
    let cursor = '0'
    do {
      const reply = await node.scan(cursor, pattern, scanCount)
      if (!Array.isArray(reply) || typeof reply[0] !== 'string' || !Array.isArray(reply[1])) desync(reply)
      cursor = reply[0]
      const page: FoundName[] = []
      for (const name of reply[1]) {
        // SCAN may return a name twice; a slot migrating mid-scan may show it on two masters
        if (seen.has(name)) continue
        seen.add(name)
        const parsed = parseWindowName(name, head)
        if (parsed !== undefined) page.push({ name, parsed })
      }
      if (page.length > 0) yield page
    } while (cursor !== '0')
  }
}
