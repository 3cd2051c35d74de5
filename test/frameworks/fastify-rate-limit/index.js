'use strict'
// Stands in for @fastify/rate-limit's index.js, which the vendored tests require as '../index':
// the pinned package itself, with our store as the default store. A registration that names no
// `store` gets `store: createFastifyStore()`; one that names `redis` (the package's Redis store)
// gets our store on that same client, `createFastifyStore({ strategy: new RedisStrategy({ client }) })`.
// A test that passes its own `store` keeps it. Nothing else changes: what a test asserts is the
// package's behaviour over our store. RATELIMITING_SUITE_BASELINE=1 exports the package
// untouched (the run that checks the harness against the package's own stores).
const upstream = require('@fastify/rate-limit')

if (process.env.RATELIMITING_SUITE_BASELINE === '1') {
  module.exports = upstream
} else {
  const { createFastifyStore } = require('../../../src/adapters/fastify.ts')
  const { RedisStrategy } = require('../../../src/strategies/redis/index.ts')

  const withOurStore = (options) => {
    if (options === null || typeof options !== 'object' || options.store !== undefined) return options
    const { redis, nameSpace, ...rest } = options
    if (redis === undefined) return { ...rest, store: createFastifyStore() }
    const strategy = new RedisStrategy({ client: redis })
    return { ...rest, store: createFastifyStore({ strategy, ...(nameSpace === undefined ? {} : { namespace: nameSpace }) }) }
  }

  const rateLimit = function fastifyRateLimit(fastify, options) {
    return upstream(fastify, withOurStore(options))
  }
  // fastify-plugin's marks (skip-override, display name, plugin meta) and the named exports
  for (const key of Reflect.ownKeys(upstream)) {
    if (key === 'length' || key === 'name' || key === 'prototype') continue
    rateLimit[key] = upstream[key]
  }
  rateLimit.default = rateLimit
  rateLimit.fastifyRateLimit = rateLimit
  module.exports = rateLimit
}
