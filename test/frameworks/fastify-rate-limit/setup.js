'use strict'
// Preloaded (node --require) into every process of the vendored @fastify/rate-limit suite.
//
// 1. `require('ioredis')` from the vendored tests gets a client of the Redis server the runner
//    started for this run (RATELIMITING_SUITE_REDIS_PORT), never the shared one on 6379: those
//    tests end with FLUSHALL. Without the variable, constructing a client throws.
// 2. After each test, mock timers a failed test left enabled are reset, the Redis clients it
//    opened are disconnected and the private Redis is emptied (the test would have done all of
//    it itself had an assertion not stopped it), so one failure does not fail the tests after it
//    ("MockTimers is already enabled", counts left in Redis) or keep the file's process alive.
//    Nothing a test asserts is touched.
const Module = require('node:module')
const path = require('node:path')
const { afterEach, mock } = require('node:test')

const suiteDir = path.join(__dirname, 'test')
const privateRedis = path.join(__dirname, 'private-redis.js')
const resolve = Module._resolveFilename
Module._resolveFilename = function (request, parent, ...rest) {
  if (request === 'ioredis' && parent?.filename?.startsWith(suiteDir)) return privateRedis
  return resolve.call(this, request, parent, ...rest)
}

afterEach(async () => {
  mock.timers.reset()
  await require(privateRedis).disconnectAll()
})
