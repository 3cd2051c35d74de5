'use strict'
// ioredis as the vendored tests see it (see setup.js): the same client class, connected to the
// runner's own Redis server whatever host and port the test gives.
const Redis = require('ioredis')

const port = Number(process.env.RATELIMITING_SUITE_REDIS_PORT)
// every client a test opened; setup.js disconnects them after each test (a test that failed
// never reached its quit(), and an open client keeps the file's process alive)
const opened = new Set()

class PrivateRedis extends Redis {
  constructor(options = {}) {
    if (!Number.isInteger(port) || port <= 0) {
      throw new Error('RATELIMITING_SUITE_REDIS_PORT is not set: the vendored Redis tests run FLUSHALL and must use a private server')
    }
    super({ ...options, host: '127.0.0.1', port })
    opened.add(this)
  }
}

/**
 * Disconnects every client opened since the last call and, if there was one, empties the
 * private server as the test's own last line (FLUSHALL) would have.
 */
async function disconnectAll() {
  if (opened.size === 0) return
  for (const client of opened) client.disconnect()
  opened.clear()
  const cleaner = new Redis({ host: '127.0.0.1', port })
  await cleaner.flushall()
  await cleaner.quit()
}

// ioredis's class has read-only statics named default and Redis: define, do not assign
module.exports = PrivateRedis
Object.defineProperty(PrivateRedis, 'default', { value: PrivateRedis })
Object.defineProperty(PrivateRedis, 'Redis', { value: PrivateRedis })
Object.defineProperty(PrivateRedis, 'disconnectAll', { value: disconnectAll })
