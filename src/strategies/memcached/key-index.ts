import { StoreError } from '../../core/errors.js'
import type { MemcachedClient, MetaCommand, MetaReply } from './client.js'
import { indexedKey, type KeySpace } from './keys.js'

/**
 * The key index of each window, for `getCounters`: memcached cannot list keys, so each
 * (namespace, size, start) has `shards` append-only items listing the keys written there
 * (docs/STORES-memcached.md, "The key index"). This process remembers which key-windows it has
 * indexed already, until they expire, so a key is appended once, with its first write.
 */
export class KeyIndex {
  private readonly client: MemcachedClient
  private readonly keys: KeySpace
  private readonly shards: number
  private readonly indexed = new Map<string, { expiresAtMs: number; keys: Set<string> }>()
  private nextPruneMs = 0

  constructor(client: MemcachedClient, keys: KeySpace, shards: number) {
    this.client = client
    this.keys = keys
    this.shards = shards
  }

  /** The index item (shard) that lists `key` for its window. */
  shardOf(namespace: string, key: string, windowSizeMs: number, windowStartMs: number): string {
    let h = 0
    for (let i = 0; i < key.length; i++) h = (Math.imul(h, 31) + key.charCodeAt(i)) | 0
    return this.keys.index(namespace, windowSizeMs, windowStartMs, (h >>> 0) % this.shards)
  }

  /** True (and remembers it) when this process has not yet put the key-window in the index. */
  mark(namespace: string, key: string, windowSizeMs: number, windowStartMs: number, expiresAtMs: number): boolean {
    const id = `${namespace}\u0000${windowSizeMs}\u0000${windowStartMs}`
    let w = this.indexed.get(id)
    if (w === undefined) {
      w = { expiresAtMs, keys: new Set() }
      this.indexed.set(id, w)
    }
    if (w.keys.has(key)) return false
    w.keys.add(key)
    return true
  }

  /**
   * Forgets windows that have expired, at most once a second of engine time: what is remembered
   * stays bounded without a timer. (memcached drops the windows themselves by their TTL, so the
   * strategy has no purge: it is optional in the contract.)
   */
  prune(nowMs: number): void {
    if (nowMs < this.nextPruneMs) return
    this.nextPruneMs = nowMs + 1000
    for (const [id, w] of this.indexed) if (w.expiresAtMs <= nowMs) this.indexed.delete(id)
  }

  /** Every key the index lists for one window, each once. */
  async keysOf(namespace: string, windowSizeMs: number, windowStartMs: number): Promise<string[]> {
    const commands: MetaCommand[] = []
    for (let shard = 0; shard < this.shards; shard++) {
      const index = this.keys.index(namespace, windowSizeMs, windowStartMs, shard)
      commands.push({ key: index, line: `mg ${index} v` })
    }
    const replies = await this.client.exec(commands)
    const keys = new Set<string>()
    for (const reply of replies) {
      if (reply.code === 'EN') continue
      if (reply.code !== 'VA' || reply.value === undefined)
        throw new StoreError('STORE_ERROR', 'memcached', `index read failed: ${describe(reply)}`)
      // entries are `k<base64url of the key's UTF-16> `; the k keeps the empty key apart from the separators
      for (const entry of reply.value.toString('latin1').split(' ')) {
        if (entry.startsWith('k')) keys.add(indexedKey(entry.slice(1)))
      }
    }
    return [...keys]
  }
}

/** A reply, for an error message. */
export function describe(reply: MetaReply | undefined): string {
  if (reply === undefined) return 'no reply'
  return reply.code === 'ERROR' ? reply.flags.join(' ') : `${reply.code} ${reply.flags.join(' ')}`.trim()
}

/** The CAS token of a reply read with the `c` flag, if it carries one. */
export function casOf(reply: MetaReply | undefined): string | undefined {
  const flag = reply?.flags.find((f) => f.startsWith('c'))
  return flag === undefined ? undefined : flag.slice(1)
}
