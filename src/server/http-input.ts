import { isUtf8 } from 'node:buffer'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { userIdEncodingProblem } from '../algorithms/options.js'
import { sendError } from './http-responses.js'

// What the service checks of a request before anything reaches an algorithm: user ids and keys,
// and JSON bodies.

// A control character (C0, DEL, C1): refused in user ids, which end up in keys and logs.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/

/** Why a user id (or a key, in messages that call it `name`) is refused, or undefined when it is fine. */
export function userIdProblem(userId: unknown, maxLength: number, name = 'userId'): string | undefined {
  if (userId === undefined) return `${name} is required`
  if (typeof userId !== 'string')
    return `${name} must be a string, got ${userId === null ? 'null' : Array.isArray(userId) ? 'an array' : typeof userId}`
  if (userId.length === 0) return `${name} must not be empty`
  if (userId.length > maxLength) return `${name} must be at most ${maxLength} characters, got ${userId.length}`
  if (CONTROL.test(userId)) return `${name} must not contain control characters`
  return userIdEncodingProblem(userId)
}

/** Whether a Content-Type header says JSON: `application/json`, parameters allowed (charset utf-8 only). */
export function isJson(contentType: string | undefined): boolean {
  if (contentType === 'application/json') return true
  if (contentType === undefined) return false
  const [type, ...params] = contentType.split(';')
  if ((type as string).trim().toLowerCase() !== 'application/json') return false
  for (const param of params) {
    const [name, value] = param.split('=')
    if (name?.trim().toLowerCase() === 'charset' && value?.trim().replace(/^"|"$/g, '').toLowerCase() !== 'utf-8') return false
  }
  return true
}

/**
 * Reads a JSON body of at most `server.max-body-bytes` (Content-Type application/json, UTF-8)
 * and calls `then` with the parsed value; every failure is answered here.
 */
export function readJsonBody(
  req: IncomingMessage,
  res: ServerResponse,
  max: number,
  example: string,
  then: (input: unknown) => void,
): void {
  if (!isJson(req.headers['content-type'])) {
    const got = req.headers['content-type'] === undefined ? 'none' : JSON.stringify(req.headers['content-type'])
    sendError(res, 415, 'unsupported_media_type', `the body must be JSON, sent with Content-Type: application/json; got ${got}`)
    return
  }
  const declared = req.headers['content-length']
  if (declared !== undefined && Number(declared) > max) {
    tooLarge(res, max)
    return
  }
  const chunks: Buffer[] = []
  let size = 0
  let over = false
  req.on('data', (chunk: Buffer) => {
    if (over) return
    size += chunk.length
    if (size > max) {
      over = true
      tooLarge(res, max)
      return
    }
    chunks.push(chunk)
  })
  req.on('error', () => undefined) // the client went away; nothing to answer
  req.on('end', () => {
    if (over) return
    const body = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks)
    // invalid UTF-8 would decode to U+FFFD, so different bytes would name the same user
    if (!isUtf8(body)) {
      sendError(res, 400, 'invalid_json', 'the body must be JSON in UTF-8')
      return
    }
    let input: unknown
    try {
      input = JSON.parse(body.toString('utf8'))
    } catch {
      sendError(res, 400, 'invalid_json', example)
      return
    }
    then(input)
  })
}

function tooLarge(res: ServerResponse, max: number): void {
  // the rest of the body is not read: close the connection after the answer
  sendError(res, 413, 'payload_too_large', `the body must be at most ${max} bytes`, { connection: 'close' })
}
