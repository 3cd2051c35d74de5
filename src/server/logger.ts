import { type Logger, pino } from 'pino'
import type { LogLevel } from './config.js'

/**
 * The service's logger: JSON lines on stdout (pino), one object per event with `level`, `time`
 * (ISO 8601) and `msg`. Errors are serialized with their message, code and stack.
 */
export function createLogger(level: LogLevel, destination?: NodeJS.WritableStream): Logger {
  const options = {
    name: 'ratelimiting',
    level,
    timestamp: pino.stdTimeFunctions.isoTime,
    serializers: { err: pino.stdSerializers.err },
  }
  return destination === undefined ? pino(options) : pino(options, destination)
}
