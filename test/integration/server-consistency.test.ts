/**
 * Answers agree with counts (docs/SERVICE.md, "What a 503 means for the count"): a request
 * answered 503 while Redis was frozen is not counted when Redis resumes; a request that can get
 * no answer (pipelined behind a 413) is not counted; user ids that are not well-formed Unicode
 * are refused alike on every store, instead of collapsing into one counter on Redis only.
 */
import assert from 'node:assert/strict'
import { connect } from 'node:net'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { MemoryFixedWindow, MemorySlidingLog, RedisFixedWindow, RedisSlidingLog } from '../../src/algorithms/index.js'
import {
  call,
  check,
  deleteKeys,
  type OwnRedis,
  SHARED_REDIS_URL,
  startOwnRedis,
  startTestService,
  type TestService,
  uniquePrefix,
  until,
} from './server-helpers.js'

describe('what a 503 means for the count', { timeout: 60_000 }, () => {
  let own: OwnRedis
  let t: TestService
  before(async () => {
    own = await startOwnRedis()
    t = await startTestService(`
rate-limiter: { use-algo: sliding-window-algo, max-requests: 100, window-size: 60 }
policies:
  fixed: { use-algo: fixed-window-algo, window-size: 3600 }
  counter: { use-algo: sliding-window-counter-algo, sync-rate: 0 }
store: { type: redis, url: "${own.url}", timeout-ms: 300 }
`)
  })
  after(async () => {
    own?.thaw()
    await t?.close()
    await own?.kill()
  })

  for (const policy of ['default', 'fixed']) {
    it(`${policy}: 3 x 200, then 5 x 503 while Redis is frozen, leave a count of 3 once it resumes`, async () => {
      const user = `frozen-${policy}`
      for (let i = 0; i < 3; i++) assert.equal((await check(t.url, { userId: user, policy })).status, 200)
      own.freeze()
      try {
        const answers = await Promise.all(Array.from({ length: 5 }, () => check(t.url, { userId: user, policy })))
        assert.deepEqual(
          answers.map((a) => a.status),
          [503, 503, 503, 503, 503],
        )
      } finally {
        own.thaw()
      }
      // Redis runs what was queued on the connection in order: once a later call answers, the
      // five scripts sent during the freeze have run (past their deadline, changing nothing)
      await until(async () => (await check(t.url, { userId: `${user}-probe`, policy })).status === 200, 5_000, 'Redis to answer again')
      const read = await call(`${t.url}/v1/users/${user}?policy=${policy}`)
      assert.equal(read.body?.count, 3)
    })
  }

  it('counter algorithm with sync-rate 0: a 503 counts, as documented (the engine never drops a hit)', async () => {
    const user = 'frozen-counter'
    for (let i = 0; i < 3; i++) assert.equal((await check(t.url, { userId: user, policy: 'counter' })).status, 200)
    own.freeze()
    try {
      const answers = await Promise.all(Array.from({ length: 5 }, () => check(t.url, { userId: user, policy: 'counter' })))
      assert.deepEqual(
        answers.map((a) => a.status),
        [503, 503, 503, 503, 503],
      )
    } finally {
      own.thaw()
    }
    await until(
      async () => (await call(`${t.url}/v1/users/${user}?policy=counter`)).body?.count === 8,
      10_000,
      'the kept hits to reach Redis',
    )
  })
})

/** Sends `text` on a connection of its own and returns everything the server sent until it closed. */
function exchange(base: string, text: string): Promise<string> {
  const { hostname, port } = new URL(base)
  return new Promise((resolve, reject) => {
    const socket = connect(Number(port), hostname)
    let out = ''
    socket.on('data', (d) => {
      out += d.toString()
    })
    socket.on('close', () => resolve(out))
    socket.on('error', (err) => (out === '' ? reject(err) : resolve(out)))
    socket.write(text)
  })
}

function post(body: string, extra = ''): string {
  return `POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`
}

for (const store of ['redis', 'memory'] as const) {
  describe(`requests no answer can reach, and ids Redis cannot store (${store} store)`, { timeout: 60_000 }, () => {
    const prefix = uniquePrefix()
    let redis: Redis
    let t: TestService
    before(async () => {
      redis = new Redis(SHARED_REDIS_URL)
      const storeSection = store === 'redis' ? `store: { type: redis, url: "${SHARED_REDIS_URL}" }` : 'store: { type: memory }'
      t = await startTestService(`
server: { max-body-bytes: 1024 }
rate-limiter: { use-algo: sliding-window-algo, max-requests: 100, window-size: 60, key-prefix: "${prefix}" }
policies:
  fixed: { use-algo: fixed-window-algo }
  counter: { use-algo: sliding-window-counter-algo, sync-rate: 0 }
${storeSection}
`)
    })
    after(async () => {
      await t?.close()
      await deleteKeys(redis, prefix)
      redis.disconnect()
    })

    it('does not count a request pipelined behind a 413', async () => {
      const big = JSON.stringify({ userId: 'big', pad: 'x'.repeat(2000) })
      const out = await exchange(t.url, post(big) + post(JSON.stringify({ userId: 'behind-413' })))
      assert.match(out, /^HTTP\/1\.1 413 /)
      assert.equal(out.split('HTTP/1.1 ').length, 2, `one answer only: ${out}`)
      assert.equal((await call(`${t.url}/v1/users/behind-413`)).body?.count, 0)
    })

    it('does not count requests pipelined behind a 413 that waits for an answer still being decided', async () => {
      // the first check is decided (on Redis, asynchronously) while the 413 behind it is queued:
      // the five checks behind the 413 can get no answer, so they must not be counted
      const big = JSON.stringify({ userId: 'big', pad: 'x'.repeat(2000) })
      const valid = post(JSON.stringify({ userId: 'around-413' }))
      const out = await exchange(t.url, valid + post(big) + valid.repeat(5))
      assert.deepEqual(out.match(/HTTP\/1\.1 \d+/g), ['HTTP/1.1 200', 'HTTP/1.1 413'], `two answers, then the connection closes: ${out}`)
      assert.equal((await call(`${t.url}/v1/users/around-413`)).body?.count, 1)
    })

    it('counts and answers requests pipelined behind answered ones', async () => {
      const one = post(JSON.stringify({ userId: 'pipelined' }))
      const out = await exchange(t.url, one + one + post(JSON.stringify({ userId: 'pipelined' }), 'Connection: close\r\n'))
      assert.equal(out.split('HTTP/1.1 200 ').length, 4, out)
      assert.equal((await call(`${t.url}/v1/users/pipelined`)).body?.count, 3)
    })

    for (const policy of ['default', 'fixed', 'counter']) {
      it(`${policy}: refuses ids with a lone surrogate, and keeps a real U+FFFD apart`, async () => {
        for (const [json, unit, index] of [
          ['"\\ud800"', 'd800', 0],
          ['"\\udfff"', 'dfff', 0],
          ['"a\\ud800"', 'd800', 1],
          ['"\\ude00\\ud83d"', 'de00', 0],
        ] as const) {
          const a = await check(t.url, `{"userId":${json},"policy":"${policy}"}`)
          assert.equal(a.status, 400, json)
          assert.equal(a.body?.error, 'invalid_request')
          assert.equal(a.body?.message, `userId must be well-formed Unicode, but has a lone surrogate \\u${unit} at index ${index}`)
        }
        assert.equal((await check(t.url, { userId: 'a\ufffd', policy })).body?.count, 1)
        assert.equal(
          (await check(t.url, { userId: 'a\ud83d\ude00', policy })).body?.count,
          1,
          'a surrogate pair is a character like any other',
        )
        assert.equal((await call(`${t.url}/v1/users/${encodeURIComponent('a\ufffd')}?policy=${policy}`)).body?.count, 1)
      })
    }

    it('refuses a body that is not UTF-8', async () => {
      const res = await fetch(`${t.url}/v1/check`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: Buffer.concat([Buffer.from('{"userId":"a'), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]),
      })
      assert.equal(res.status, 400)
      assert.match(((await res.json()) as { message: string }).message, /must be JSON in UTF-8/)
    })
  })
}

describe('the algorithms refuse ids with a lone surrogate on every store', { timeout: 30_000 }, () => {
  let redis: Redis
  before(() => {
    redis = new Redis(SHARED_REDIS_URL)
  })
  after(() => redis.disconnect())

  it('throws a TypeError INVALID_KEY before touching the store', async () => {
    const prefix = uniquePrefix()
    const options = { limit: 5, windowMs: 60_000 }
    const all = [
      new MemoryFixedWindow(options),
      new MemorySlidingLog(options),
      new RedisFixedWindow({ ...options, client: redis, prefix }),
      new RedisSlidingLog({ ...options, client: redis, prefix }),
    ]
    for (const algorithm of all) {
      for (const id of ['\ud800', 'x\udfff']) {
        const invalid = (err: unknown) =>
          err instanceof TypeError && (err as { code?: string }).code === 'INVALID_KEY' && /lone surrogate/.test(err.message)
        await assert.rejects(async () => algorithm.check(id), invalid, `${algorithm.name} on ${algorithm.store}`)
        await assert.rejects(async () => algorithm.peek(id), invalid)
        await assert.rejects(async () => algorithm.reset(id), invalid)
      }
    }
    await deleteKeys(redis, prefix)
  })
})
