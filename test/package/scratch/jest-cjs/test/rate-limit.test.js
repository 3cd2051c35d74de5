// Jest's default mode: CommonJS test files, babel-jest for them, node_modules required untransformed.
const express = require('express')
const { rateLimit } = require('express-rate-limit')
const ratelimiting = require('ratelimiting')
const { RateLimitingStore } = require('ratelimiting/express')

const subpaths = ['redis', 'postgres', 'memcached', 'simple', 'express', 'fastify', 'hono', 'nestjs', 'algorithms', 'server']

test('every subpath requires, with the classes of one engine', () => {
  for (const subpath of subpaths) expect(Object.keys(require(`ratelimiting/${subpath}`)).length).toBeGreaterThan(0)
  expect(() => new RateLimitingStore({ namespace: '' })).toThrow(ratelimiting.ConfigError)
})

test('express-rate-limit with our store admits 2 requests, then 429', async () => {
  const app = express()
  app.use(rateLimit({ windowMs: 60_000, limit: 2, standardHeaders: 'draft-8', legacyHeaders: false, store: new RateLimitingStore() }))
  app.get('/', (_req, res) => res.send('ok'))
  const server = app.listen(0, '127.0.0.1')
  await new Promise((resolve) => server.once('listening', resolve))
  try {
    const statuses = []
    for (let i = 0; i < 3; i++) statuses.push((await fetch(`http://127.0.0.1:${server.address().port}/`)).status)
    expect(statuses).toEqual([200, 200, 429])
  } finally {
    server.close()
  }
})

test('a store by name loads on demand inside Jest (no dynamic import of an ES module)', async () => {
  const rl = ratelimiting.RateLimiting.newInstance('jest')
  const prefix = process.env.RATELIMITING_KEY_PREFIX ?? `scratch:${process.pid}`
  rl.new({
    windowSizes: [3600],
    syncRate: 0,
    strategy: 'redis',
    strategyOpts: { url: process.env.RATELIMITING_REDIS_URL ?? 'redis://127.0.0.1:6379', prefix },
  })
  try {
    expect(await rl.increment('k', 3600, 3)).toBe(3)
  } finally {
    await rl.close()
  }
})
