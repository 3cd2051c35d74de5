import { createHash } from 'node:crypto'
import { StoreError } from '../core/errors.js'
import { withTimeout } from '../core/timeout.js'
import type { RedisScriptClient } from './types.js'

/** A Lua script with its SHA1, run by SHA (one round trip once the server has it). */
export interface LuaScript {
  readonly source: string
  readonly sha1: string
}

/** Prepares a script: its SHA1 is computed once, at load. */
export function luaScript(source: string): LuaScript {
  return { source, sha1: createHash('sha1').update(source).digest('hex') }
}

function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('NOSCRIPT')
}

/** Wraps a driver error into a StoreError: unreachable (connection) or any other failure. */
function storeError(err: unknown): StoreError {
  if (err instanceof StoreError) return err
  const message = err instanceof Error ? err.message : String(err)
  const unavailable =
    /ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|Connection is closed|enableOfflineQueue|Stream isn't writeable|max retries|MaxRetriesPerRequest|connect/i.test(
      message,
    )
  return new StoreError(unavailable ? 'STORE_UNAVAILABLE' : 'STORE_ERROR', 'redis', message, { cause: err })
}

async function evalScript(client: RedisScriptClient, script: LuaScript, keys: readonly string[], args: readonly (string | number)[]) {
  try {
    return await client.evalsha(script.sha1, keys.length, ...keys, ...args)
  } catch (err) {
    // a restarted or flushed server forgot the script: EVAL runs it and caches it again
    if (!isNoScript(err)) throw err
    return await client.eval(script.source, keys.length, ...keys, ...args)
  }
}

/**
 * Runs `script` by EVALSHA, falling back to EVAL on NOSCRIPT, bounded by `timeoutMs`.
 * Failures reject with a {@link StoreError} (`STORE_UNAVAILABLE`, `STORE_TIMEOUT` or `STORE_ERROR`).
 */
export async function runScript(
  client: RedisScriptClient,
  script: LuaScript,
  keys: readonly string[],
  args: readonly (string | number)[],
  timeoutMs: number,
): Promise<unknown> {
  try {
    return await withTimeout(evalScript(client, script, keys, args), timeoutMs, 'redis', 'script')
  } catch (err) {
    throw storeError(err)
  }
}

/** Reads an integer array reply, naming the script when Redis answered something else. */
export function integers(reply: unknown, length: number, what: string): number[] {
  if (!Array.isArray(reply) || reply.length < length)
    throw new StoreError('STORE_ERROR', 'redis', `${what}: unexpected reply ${String(reply)}`)
  return reply.map((v) => Number(v))
}
