import { createHash } from 'node:crypto'
import type { AuthConfig } from './config.js'

/** What a request's bearer token grants. */
export type Grant = 'none' | 'client' | 'admin'

function digest(token: string): string {
  return createHash('sha256').update(token).digest('base64')
}

/**
 * Checks bearer tokens. Tokens are kept as SHA-256 digests and looked up by digest, so the
 * lookup time says nothing about how much of a guessed token was right.
 */
export class TokenAuth {
  /** False when the config has no tokens: every request is then an admin. */
  readonly enabled: boolean
  private readonly clients: ReadonlySet<string>
  private readonly admins: ReadonlySet<string>

  constructor(config: AuthConfig | undefined) {
    this.clients = new Set((config?.tokens ?? []).map(digest))
    this.admins = new Set((config?.adminTokens ?? []).map(digest))
    this.enabled = this.clients.size > 0 || this.admins.size > 0
  }

  /** The grant of an `Authorization` header value. */
  grant(header: string | undefined): Grant {
    if (!this.enabled) return 'admin'
    if (header === undefined || header.length < 8 || header.slice(0, 7).toLowerCase() !== 'bearer ') return 'none'
    const d = digest(header.slice(7).trim())
    if (this.admins.has(d)) return 'admin'
    return this.clients.has(d) ? 'client' : 'none'
  }
}
