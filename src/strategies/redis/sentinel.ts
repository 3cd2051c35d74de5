import { ConfigError } from '../../core/errors.js'
import type { RedisStrategyOptions } from './options.js'

// No import of the driver here: the service builds its own client from these options, loading
// ioredis only when a config asks for Redis.

/** The Sentinel options of {@link RedisStrategyOptions}, named as ioredis names them. */
export type RedisSentinelOptions = Pick<RedisStrategyOptions, 'sentinels' | 'name' | 'password' | 'sentinelPassword'>

function nonEmptyString(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0
}

function isPort(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value > 0 && value < 65_536
}

/**
 * Checks the Sentinel options, naming the one refused: `sentinels` with `name`, neither with
 * `client` or `url`, the passwords only with `sentinels`. Returns whether they are given.
 */
export function checkSentinelOptions(options: RedisSentinelOptions & { readonly client?: unknown; readonly url?: unknown }): boolean {
  const { sentinels, name, password, sentinelPassword } = options
  if (sentinels === undefined) {
    if (name !== undefined) throw new ConfigError('INVALID_OPTION', "redis: name is the master's name for sentinels; give sentinels too")
    for (const [option, value] of [
      ['password', password],
      ['sentinelPassword', sentinelPassword],
    ] as const)
      if (value !== undefined)
        throw new ConfigError(
          'INVALID_OPTION',
          `redis: ${option} is for sentinels; with url write the password in the URL, with client set it on the client`,
        )
    return false
  }
  if (options.client !== undefined || options.url !== undefined)
    throw new ConfigError('INVALID_OPTION', 'redis: give one of client, url or sentinels, not several')
  if (!Array.isArray(sentinels) || sentinels.length === 0)
    throw new ConfigError('INVALID_OPTION', 'redis: sentinels must be a non-empty array of { host, port }')
  sentinels.forEach((s: unknown, i) => {
    const { host, port } = (typeof s === 'object' && s !== null ? s : {}) as { host?: unknown; port?: unknown }
    if (!nonEmptyString(host) || !isPort(port))
      throw new ConfigError(
        'INVALID_OPTION',
        `redis: sentinels[${i}] must be { host, port } with a port from 1 to 65535, got ${JSON.stringify(s)}`,
      )
  })
  if (!nonEmptyString(name))
    throw new ConfigError(
      'INVALID_OPTION',
      `redis: sentinels need name, the master's name in the Sentinels' config, got ${JSON.stringify(name)}`,
    )
  // the passwords stay out of the messages
  if (password !== undefined && !nonEmptyString(password))
    throw new ConfigError('INVALID_OPTION', 'redis: password must be a non-empty string')
  if (sentinelPassword !== undefined && !nonEmptyString(sentinelPassword))
    throw new ConfigError('INVALID_OPTION', 'redis: sentinelPassword must be a non-empty string')
  return true
}

/**
 * The ioredis options of a client the library or the service makes for a Sentinel-managed
 * master: the addresses and passwords, and how it follows a failover (with {@link watchFailovers}).
 *
 * - `retryStrategy`: reconnects every 50 to 250 ms. Until the Sentinels name the new master a
 *   reconnect finds the dead one; every attempt asks them again, so a short period finds the new
 *   master soon after they name it (ioredis's default backs off to 2 s).
 * - `disconnectTimeout`: how long a reconnect ordered by {@link watchFailovers} waits for the
 *   hung master's connection to close before destroying it (ioredis waits 2 s).
 * - a reconnect on READONLY: a client still connected to a demoted master asks the Sentinels
 *   again. The failed call is not resent: the caller's fail policy or the next sync handles it.
 *
 * Not ioredis's own `failoverDetector`: a `+switch-master` that arrives while the client is
 * reconnecting (asking a Sentinel) makes that connect fail, and ioredis then ends the client for
 * good ("Connection is closed." on every later call); its watchers also print to stderr when a
 * Sentinel is down.
 */
export function sentinelClientOptions(options: RedisSentinelOptions): Record<string, unknown> {
  return {
    sentinels: (options.sentinels ?? []).map(({ host, port }) => ({ host, port })),
    name: options.name,
    ...(options.password !== undefined ? { password: options.password } : {}),
    ...(options.sentinelPassword !== undefined ? { sentinelPassword: options.sentinelPassword } : {}),
    disconnectTimeout: 500,
    retryStrategy: (attempt: number) => Math.min(attempt * 50, 250),
    reconnectOnError: (err: Error) => err.message.startsWith('READONLY'),
  }
}

/** What {@link watchFailovers} needs of the client it moves: an ioredis `Redis`. */
export interface FollowingClient {
  readonly status: string
  readonly stream?: { readonly remoteAddress?: string; readonly remotePort?: number }
  disconnect(reconnect?: boolean): void
  once(event: 'end', listener: () => void): unknown
}

interface SentinelSubscriber {
  on(event: 'message', listener: (channel: string, message: string) => void): unknown
  on(event: 'error', listener: (err: Error) => void): unknown
  subscribe(channel: string): Promise<unknown>
  disconnect(): void
}

/**
 * Moves `client` to the new master as soon as a Sentinel announces it (`+switch-master`): a
 * master that hangs instead of dying (SIGSTOP, a partition) keeps its connections open, and
 * without this every call would time out until it came back or TCP gave up
 * (test/integration/redis-sentinel.test.ts, "a frozen master"). One subscriber connection per
 * Sentinel, made with `Redis` (the driver's class, passed in: the service loads it on demand),
 * closed when the client ends. Only a client connected to another master is reconnected; one
 * that is reconnecting asks the Sentinels anyway.
 */
export function watchFailovers(
  client: FollowingClient,
  Redis: new (options: Record<string, unknown>) => SentinelSubscriber,
  options: RedisSentinelOptions,
): void {
  const subscribers = (options.sentinels ?? []).map(({ host, port }) => {
    const subscriber = new Redis({
      host,
      port,
      ...(options.sentinelPassword !== undefined ? { password: options.sentinelPassword } : {}),
      // the SUBSCRIBE waits for a Sentinel that is down, and is sent again after a reconnect
      maxRetriesPerRequest: null,
      retryStrategy: (attempt: number) => Math.min(attempt * 200, 2000),
    })
    subscriber.on('error', () => undefined)
    subscriber.on('message', (_channel, message) => {
      // "<name> <old ip> <old port> <new ip> <new port>"
      const [name, , , newHost, newPort] = message.split(' ')
      if (name !== options.name || client.status !== 'ready') return
      const stream = client.stream
      if (stream?.remoteAddress === newHost && stream?.remotePort === Number(newPort)) return
      client.disconnect(true)
    })
    subscriber.subscribe('+switch-master').catch(() => undefined)
    return subscriber
  })
  client.once('end', () => {
    for (const subscriber of subscribers) subscriber.disconnect()
  })
}
