import net from 'node:net'
import { ConfigError, StoreError } from '../../core/errors.js'
import { type Deadline, deadline } from '../../core/timeout.js'

/** One meta command: the line without its CRLF and, for `ms`, the data block. */
export interface MetaCommand {
  /** Routes the command: commands with the same key go to the same server, in order. */
  readonly key: string
  /** The command line, such as `mg <key> v c`. */
  readonly line: string
  /** The data block of an `ms`: ASCII text (the strategy only stores ASCII). */
  readonly data?: string
}

/** A server's answer to one meta command. */
export interface MetaReply {
  /** `HD`, `VA`, `EN`, `NS`, `EX`, `NF`, `MN`, or `ERROR` for ERROR / CLIENT_ERROR / SERVER_ERROR. */
  readonly code: string
  /** The return flags (`c123`, `t60`, ...), or the error text for `ERROR`. */
  readonly flags: readonly string[]
  /** The value of a `VA` reply. */
  readonly value?: Buffer
}

/** Options of {@link MemcachedClient}. */
export interface MemcachedClientOptions {
  /** `host:port` of each server; keys are spread over them by rendezvous hashing. */
  readonly servers: readonly string[]
  /**
   * Longest wait for the replies of one pipeline, ms. On expiry the connection is destroyed
   * (every command waiting on it fails) and the next call reconnects. @default 1000
   */
  readonly timeoutMs?: number
}

const CRLF = Buffer.from('\r\n')
const STRATEGY = 'memcached'

/** The commands of one `send`, waiting for their replies. */
interface Batch {
  readonly replies: MetaReply[]
  readonly expected: number
  readonly resolve: (replies: MetaReply[]) => void
  readonly reject: (err: Error) => void
  readonly deadline: Deadline
}

function fnv1a(text: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

/** One TCP connection to one server; replies are matched to commands in order. */
class Connection {
  readonly host: string
  readonly port: number
  private socket: net.Socket | undefined
  private batches: Batch[] = []
  private head = 0
  private buffer: Buffer = Buffer.alloc(0)
  private outgoing = ''
  private flushing = false

  constructor(host: string, port: number) {
    this.host = host
    this.port = port
  }

  /** Writes every command in one socket write (one round trip) and resolves with their replies. */
  send(commands: readonly MetaCommand[], timeoutMs: number): Promise<MetaReply[]> {
    const socket = this.socket ?? this.open()
    let text = ''
    for (const c of commands) text += c.data === undefined ? `${c.line}\r\n` : `${c.line}\r\n${c.data}\r\n`
    return new Promise<MetaReply[]>((resolve, reject) => {
      const what = `${this.host}:${this.port}: reply`
      const bound = deadline(timeoutMs, STRATEGY, what, (err) => this.fail(socket, err), 'the writes may have landed')
      this.batches.push({ replies: [], expected: commands.length, resolve, reject, deadline: bound })
      // Sends of one event-loop turn leave in one write: at 256 hits in flight the socket write
      // (a syscall each) was a third of the CPU; see bench/memcached.bench.ts.
      this.outgoing += text
      if (!this.flushing) {
        this.flushing = true
        process.nextTick(() => this.flush())
      }
    })
  }

  // What is outgoing belongs to the current socket: a failed socket's share was dropped with it.
  private flush(): void {
    this.flushing = false
    const text = this.outgoing
    this.outgoing = ''
    if (text.length > 0) this.socket?.write(text, 'latin1')
  }

  close(): void {
    if (this.socket !== undefined) this.fail(this.socket, new StoreError('STORE_UNAVAILABLE', STRATEGY, 'client closed'))
  }

  private open(): net.Socket {
    const socket = net.connect({ host: this.host, port: this.port })
    socket.setNoDelay(true)
    this.socket = socket
    this.buffer = Buffer.alloc(0)
    socket.on('data', (chunk: Buffer) => this.read(chunk))
    socket.on('error', (err) =>
      this.fail(socket, new StoreError('STORE_UNAVAILABLE', STRATEGY, `${this.host}:${this.port}: ${err.message}`, { cause: err })),
    )
    socket.on('close', () =>
      this.fail(socket, new StoreError('STORE_UNAVAILABLE', STRATEGY, `${this.host}:${this.port}: connection closed`)),
    )
    return socket
  }

  /** Drops the connection and fails every batch waiting on it (their replies can no longer be matched). */
  private fail(socket: net.Socket, err: Error): void {
    if (this.socket !== socket) return
    this.socket = undefined
    this.outgoing = ''
    socket.destroy()
    const waiting = this.batches.slice(this.head)
    this.batches = []
    this.head = 0
    for (const batch of waiting) {
      batch.deadline.settle()
      batch.reject(err)
    }
  }

  private read(chunk: Buffer): void {
    const buf = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk])
    let offset = 0
    for (;;) {
      const eol = buf.indexOf(CRLF, offset)
      if (eol < 0) break
      const line = buf.toString('latin1', offset, eol)
      let reply: MetaReply
      let next = eol + 2
      if (line.startsWith('VA ')) {
        const tokens = line.split(' ')
        const size = Number(tokens[1])
        if (buf.length < next + size + 2) break
        reply = { code: 'VA', flags: tokens.slice(2), value: buf.subarray(next, next + size) }
        next += size + 2
      } else if (line === 'ERROR' || line.startsWith('CLIENT_ERROR') || line.startsWith('SERVER_ERROR')) {
        reply = { code: 'ERROR', flags: [line] }
      } else {
        const space = line.indexOf(' ')
        reply = space < 0 ? { code: line, flags: [] } : { code: line.slice(0, space), flags: line.slice(space + 1).split(' ') }
      }
      offset = next
      const batch = this.batches[this.head]
      if (batch === undefined) continue
      batch.replies.push(reply)
      if (batch.replies.length === batch.expected) {
        this.head++
        if (this.head === this.batches.length) {
          this.batches = []
          this.head = 0
        }
        batch.deadline.settle()
        batch.resolve(batch.replies)
      }
    }
    // keep the unread tail only (copied, so a big chunk is not pinned by a small tail)
    this.buffer = offset === 0 ? buf : offset >= buf.length ? Buffer.alloc(0) : Buffer.from(buf.subarray(offset))
  }
}

/**
 * A small memcached client for the meta text protocol (memcached 1.6+): commands for one server
 * are pipelined on one connection, so a batch costs one round trip per server involved. It has
 * only what the strategy needs; share one between strategies with `new MemcachedStrategy({ client })`.
 *
 * @example
 * const client = new MemcachedClient({ servers: ['127.0.0.1:11211'] })
 * const [reply] = await client.exec([{ key: 'k', line: 'mg k v' }])
 */
export class MemcachedClient {
  readonly servers: readonly string[]
  readonly timeoutMs: number
  /** Pipelines sent (one per server per call: a round trip each) and commands sent. */
  readonly stats = { roundTrips: 0, commands: 0 }
  private readonly connections: Connection[]

  constructor(options: MemcachedClientOptions) {
    if (typeof options !== 'object' || options === null) throw new ConfigError('INVALID_OPTION', 'memcached: options must be an object')
    const { servers, timeoutMs = 1000 } = options
    if (!Array.isArray(servers) || servers.length === 0)
      throw new ConfigError('INVALID_OPTION', `memcached: servers must be a non-empty array of "host:port", got ${String(servers)}`)
    this.connections = servers.map((s: unknown) => {
      const m = typeof s === 'string' ? /^\[?([^\]\s]+?)\]?:(\d{1,5})$/.exec(s) : null
      const port = Number(m?.[2])
      if (m === null || !(port > 0 && port < 65536))
        throw new ConfigError('INVALID_OPTION', `memcached: servers entries must be "host:port", got ${JSON.stringify(s)}`)
      return new Connection(m[1] as string, port)
    })
    if (typeof timeoutMs !== 'number' || !Number.isFinite(timeoutMs) || timeoutMs <= 0)
      throw new ConfigError('INVALID_OPTION', `memcached: timeoutMs must be a positive number, got ${String(timeoutMs)}`)
    this.servers = [...servers]
    this.timeoutMs = timeoutMs
  }

  /** Index of the server that owns `key` (rendezvous hashing: stable when servers are added). */
  serverOf(key: string): number {
    const n = this.connections.length
    if (n === 1) return 0
    let best = 0
    let bestScore = -1
    for (let i = 0; i < n; i++) {
      const score = fnv1a(`${this.servers[i]}\u0000${key}`)
      if (score > bestScore) {
        bestScore = score
        best = i
      }
    }
    return best
  }

  /**
   * Sends the commands, pipelined per server (in order for each server), and resolves with the
   * replies in the order of `commands`. Rejects with a StoreError if a server is unreachable or
   * too slow; the connection is then dropped and the next call reconnects.
   */
  async exec(commands: readonly MetaCommand[]): Promise<MetaReply[]> {
    if (commands.length === 0) return []
    this.stats.commands += commands.length
    if (this.connections.length === 1) {
      this.stats.roundTrips++
      return (this.connections[0] as Connection).send(commands, this.timeoutMs)
    }
    const groups = new Map<number, { commands: MetaCommand[]; positions: number[] }>()
    for (const [i, c] of commands.entries()) {
      const server = this.serverOf(c.key)
      let group = groups.get(server)
      if (group === undefined) {
        group = { commands: [], positions: [] }
        groups.set(server, group)
      }
      group.commands.push(c)
      group.positions.push(i)
    }
    this.stats.roundTrips += groups.size
    const out = new Array<MetaReply>(commands.length)
    await Promise.all(
      [...groups].map(async ([server, group]) => {
        const replies = await (this.connections[server] as Connection).send(group.commands, this.timeoutMs)
        for (const [j, reply] of replies.entries()) out[group.positions[j] as number] = reply
      }),
    )
    return out
  }

  /** Closes every connection; commands still waiting fail. */
  close(): void {
    for (const c of this.connections) c.close()
  }
}
