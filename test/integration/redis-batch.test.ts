/**
 * The service's checks batched (src/algorithms/script-batch.ts): the checks the Redis
 * algorithms make in one event-loop iteration leave as one script call per 16, each answered as
 * it would be alone, in the order made. Against the shared Redis (127.0.0.1:6379), and a
 * redis-server of the test's own for SCRIPT FLUSH and a freeze. The client's evalsha is wrapped
 * to record the calls that leave (how many keys each).
 */
import assert from 'node:assert/strict'
import { createHash, randomUUID } from 'node:crypto'
import { after, before, describe, it } from 'node:test'
import { Cluster, Redis } from 'ioredis'
import {
  MemoryFixedWindow,
  MemorySlidingLog,
  type RateLimitAlgorithm,
  RedisFixedWindow,
  RedisSlidingLog,
} from '../../src/algorithms/index.js'
import { FIXED_WINDOW_CHECK } from '../../src/algorithms/lua.js'
import { createFakeClock } from '../../src/core/clock.js'
import { StoreError } from '../../src/core/errors.js'
import { keySlot } from '../../src/strategies/redis/key-slot.js'
import { evalScript, type LuaScript, luaScript } from '../../src/strategies/redis/scripts.js'
import { deleteTestKeys, sharedClusterPorts, sharedRedisUrl } from '../support/redis-server.js'
import { type OwnRedis, startOwnRedis, until } from './server-helpers.js'
import { seededRandom } from '../support/random.js'

const prefix = `rltest-batch-${randomUUID().slice(0, 8)}`
const url = await sharedRedisUrl()
const clients: (Redis | Cluster)[] = []
const T0 = 1_800_000_000_000
const clock = (): number => T0

after(() => deleteTestKeys(url, prefix, clients))

interface Sent {
  sha: string
  keys: number
}

/** A ready client whose script calls are recorded as they leave. */
async function recordingClient<C extends Redis | Cluster>(client: C): Promise<{ client: C; sent: Sent[] }> {
  clients.push(client)
  await client.ping()
  const sent: Sent[] = []
  const evalsha = client.evalsha.bind(client) as (...args: unknown[]) => Promise<unknown>
  const evalSource = client.eval.bind(client) as (...args: unknown[]) => Promise<unknown>
  Object.assign(client, {
    evalsha: (sha: string, keys: number, ...rest: unknown[]) => {
      sent.push({ sha, keys })
      return evalsha(sha, keys, ...rest)
    },
    // a client's first call of a script is an EVAL (strategies/redis/scripts.ts)
    eval: (source: string, keys: number, ...rest: unknown[]) => {
      sent.push({ sha: createHash('sha1').update(source).digest('hex'), keys })
      return evalSource(source, keys, ...rest)
    },
  })
  return { client, sent }
}

describe("the service's checks, batched", { timeout: 60_000 }, () => {
  it('sends the checks of one iteration as one call per 16, the first as soon as it is full', async () => {
    const { client, sent } = await recordingClient(new Redis(url))
    const fixed = new RedisFixedWindow({ client, limit: 1000, windowMs: 60_000, prefix, clock })
    const checks: Promise<{ allowed: boolean; count: number }>[] = []
    const sentAfter: number[] = []
    for (let i = 0; i < 40; i++) {
      checks.push(fixed.check(`spread-${i}`))
      sentAfter.push(sent.length)
    }
    // nothing leaves before the 16th check; then one call of 16 keys, and the 32nd another
    assert.deepEqual(
      sentAfter,
      Array.from({ length: 40 }, (_, i) => (i < 15 ? 0 : i < 31 ? 1 : 2)),
    )
    const results = await Promise.all(checks)
    assert.ok(results.every((r) => r.allowed && r.count === 1))
    assert.deepEqual(
      sent.map((s) => s.keys),
      [16, 16, 8],
    )
    assert.ok(sent.every((s) => s.sha === FIXED_WINDOW_CHECK.batch.sha))
  })

  it('sends a lone check as the plain script', async () => {
    const { client, sent } = await recordingClient(new Redis(url))
    const fixed = new RedisFixedWindow({ client, limit: 10, windowMs: 60_000, prefix, clock })
    for (let i = 1; i <= 3; i++) assert.equal((await fixed.check('alone')).count, i)
    assert.deepEqual(
      sent,
      Array.from({ length: 3 }, () => ({ sha: FIXED_WINDOW_CHECK.sha, keys: 1 })),
    )
  })

  it('answers each check of a batch as it would be answered alone, in the order made', async () => {
    const { client, sent } = await recordingClient(new Redis(url))
    const fixed = new RedisFixedWindow({ client, limit: 25, windowMs: 60_000, prefix, clock, rememberDenials: false })
    const log = new RedisSlidingLog({ client, limit: 25, windowMs: 60_000, prefix: `${prefix}-log`, clock })
    const both = await Promise.all([
      Promise.all(Array.from({ length: 40 }, () => fixed.check('one-user'))),
      Promise.all(Array.from({ length: 40 }, () => log.check('one-user'))),
    ])
    const [fixedResults, logResults] = both
    // denied requests count, as the seed's INCR: the counts run 1 to 40
    assert.deepEqual(
      fixedResults.map((r) => [r.allowed, r.count]),
      Array.from({ length: 40 }, (_, i) => [i < 25, i + 1]),
    )
    assert.deepEqual(
      logResults.map((r) => [r.allowed, r.count]),
      Array.from({ length: 40 }, (_, i) => [i < 25, Math.min(i + 1, 25)]),
    )
    assert.ok(logResults.slice(25).every((r) => r.retryAfterMs === 60_000))
    assert.equal(sent.length, 6, 'three calls per algorithm: 16, 16 and 8 checks')
  })

  it('gives every check its own limit and cost', async () => {
    const { client, sent } = await recordingClient(new Redis(url))
    const fixed = new RedisFixedWindow({ client, limit: 1000, windowMs: 60_000, prefix, clock })
    const small = fixed.withLimit(5)
    const results = await Promise.all([small.check('mixed', 3), fixed.check('mixed', 3), small.check('mixed', 1), small.check('mixed', 3)])
    assert.deepEqual(
      results.map((r) => [r.allowed, r.count, r.limit]),
      [
        [true, 3, 5],
        [true, 6, 1000],
        [false, 7, 5],
        [false, 10, 5],
      ],
    )
    assert.deepEqual(
      sent.map((s) => s.keys),
      [4],
    )
  })

  it('fails only the check whose key Redis cannot count', async () => {
    const { client } = await recordingClient(new Redis(url))
    const fixed = new RedisFixedWindow({ client, limit: 10, windowMs: 60_000, prefix, clock })
    await client.set(fixed.key('not-a-number'), 'abc', 'EX', 60)
    const results = await Promise.allSettled([fixed.check('fine-1'), fixed.check('not-a-number'), fixed.check('fine-2')])
    assert.equal(results[0].status, 'fulfilled')
    assert.equal(results[2].status, 'fulfilled')
    const failed = results[1]
    assert.equal(failed.status, 'rejected')
    assert.ok(failed.reason instanceof StoreError)
    assert.equal(failed.reason.code, 'STORE_ERROR')
    assert.match(failed.reason.message, /not an integer/)
    assert.equal(await client.get(fixed.key('not-a-number')), 'abc', 'the value is left as it was')
  })

  it('sends the checks made before a reset ahead of it', async () => {
    const { client } = await recordingClient(new Redis(url))
    const fixed = new RedisFixedWindow({ client, limit: 10, windowMs: 60_000, prefix, clock })
    const checks = [fixed.check('reset-after'), fixed.check('reset-after'), fixed.check('reset-after')]
    const reset = fixed.reset('reset-after')
    assert.deepEqual(
      (await Promise.all(checks)).map((r) => r.count),
      [1, 2, 3],
    )
    await reset
    assert.equal((await fixed.check('reset-after')).count, 1)
  })

  it('answers as the memory version when the clock steps back across a bucket boundary and forward again', async () => {
    const { client } = await recordingClient(new Redis(url))
    const clock = createFakeClock(T0)
    const options = { limit: 5, windowMs: 60_000, clock: clock.now }
    const memory = new MemoryFixedWindow(options)
    const onRedis = new RedisFixedWindow({ ...options, client, prefix: `${prefix}-step-back` })
    const boundary = Math.ceil(T0 / 60_000) * 60_000
    const answers: Array<[boolean, number][]> = [[], []]
    const both = async (user: string) => {
      answers[0]?.push(((r) => [r.allowed, r.count] as [boolean, number])(memory.check(user)))
      answers[1]?.push(((r) => [r.allowed, r.count] as [boolean, number])(await onRedis.check(user)))
    }
    for (let round = 0; round < 3; round++) {
      clock.set(boundary + 10)
      for (let i = 0; i < 3; i++) await both('stepper')
      clock.set(boundary - 1) // 11 ms back: the bucket before
      await both('stepper')
      await both('other')
    }
    assert.deepEqual(answers[0], answers[1])
    assert.equal(answers[1]?.filter(([allowed], i) => allowed && i % 5 < 3).length, 5, 'the later bucket admits 5 in all')
  })

  for (const rememberDenials of [true, false])
    it(`answers batches of random checks and reads as the memory versions answer them one by one (remember-denials ${rememberDenials ? 'on' : 'off'})`, async () => {
      const { client, sent } = await recordingClient(new Redis(url))
      const clock = createFakeClock(T0)
      const options = { limit: 7, windowMs: 5_000, clock: clock.now }
      const redisOptions = { ...options, client, rememberDenials }
      const pairs: Array<[string, RateLimitAlgorithm, RateLimitAlgorithm]> = [
        [
          'fixed window',
          new MemoryFixedWindow(options),
          new RedisFixedWindow({ ...redisOptions, prefix: `${prefix}-random-fw-${rememberDenials}` }),
        ],
        [
          'fixed window, denied requests not counted',
          new MemoryFixedWindow({ ...options, countDenied: false }),
          new RedisFixedWindow({ ...redisOptions, countDenied: false, prefix: `${prefix}-random-fw-uncounted-${rememberDenials}` }),
        ],
        [
          'sliding log',
          new MemorySlidingLog(options),
          new RedisSlidingLog({ ...redisOptions, prefix: `${prefix}-random-log-${rememberDenials}` }),
        ],
      ]
      const random = seededRandom(7)
      for (let step = 0; step < 60; step++) {
        clock.advance(Math.floor(random() * 900))
        // one event-loop turn's worth: checks of three users with mixed costs, and reads among them
        const group = Array.from({ length: 1 + Math.floor(random() * 24) }, () => ({
          user: `random-${Math.floor(random() * 3)}`,
          cost: random() < 0.8 ? 1 : 1 + Math.floor(random() * 8),
          peek: random() < 0.15,
        }))
        for (const [name, memory, onRedis] of pairs) {
          const ask = (a: RateLimitAlgorithm, g: (typeof group)[number]) => (g.peek ? a.peek(g.user) : a.check(g.user, g.cost))
          const actual = await Promise.all(group.map((g) => ask(onRedis, g)))
          const expected = []
          for (const g of group) expected.push(await ask(memory, g))
          assert.deepEqual(actual, expected, `${name}, step ${step}`)
        }
      }
      assert.ok(
        sent.some((s) => s.keys > 1),
        'some checks left in batches',
      )
    })

  it('leaves a Cluster client one call per check (the keys of a script must share a slot)', async () => {
    const ports = await sharedClusterPorts()
    const { client, sent } = await recordingClient(new Cluster(ports.map((port) => ({ host: '127.0.0.1', port }))))
    // each master's first call is an EVAL, so a node that lacks the script (a fresh cluster) makes
    // no NOSCRIPT retry, which would be recorded as a second call
    const fixed = new RedisFixedWindow({ client, limit: 10, windowMs: 60_000, prefix, clock })
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) => fixed.check(`cluster-${i}`)))
    assert.ok(results.every((r) => r.allowed && r.count === 1))
    assert.deepEqual(
      sent.map((s) => s.keys),
      Array.from({ length: 20 }, () => 1),
    )
  })

  it("keeps a read behind the writes made after it when a Cluster node has seen the writes' script but not the read's", async () => {
    const ports = await sharedClusterPorts()
    const client = new Cluster(ports.map((port) => ({ host: '127.0.0.1', port })))
    clients.push(client)
    await client.ping()
    // scripts no node has cached yet: a comment of their own makes their SHA new
    const tag = randomUUID()
    const write = luaScript(`-- ${tag}\nreturn redis.call('INCR', KEYS[1])`)
    const read = luaScript(`-- ${tag}\nreturn tonumber(redis.call('GET', KEYS[1]) or '0')`)
    // two keys whose slots two different masters own
    const owner = (key: string) => client.slots[keySlot(key)]?.[0]
    const keys = Array.from({ length: 64 }, (_, i) => `${prefix}:cluster-order-${i}`)
    const onA = keys[0] as string
    const onB = keys.find((key) => owner(key) !== owner(onA))
    assert.ok(onB !== undefined && owner(onA) !== undefined, 'two masters own the test keys')
    const call = (script: LuaScript, key: string) => evalScript(client, script, 1, [key], Number)
    // the client's first write goes to A and its first read to B: A holds the write's script only
    assert.equal(await call(write, onA), 1)
    assert.equal(await call(read, onB), 0)
    // on A, a read then two writes, sent in one turn: the read must not count the writes
    const answers = await Promise.all([call(read, onA), call(write, onA), call(write, onA)])
    assert.deepEqual(answers, [1, 2, 3])
  })
})

describe('batched checks on a Redis of their own', { timeout: 60_000 }, () => {
  let own: OwnRedis
  let client: Redis
  before(async () => {
    own = await startOwnRedis()
    client = new Redis(own.url, { maxRetriesPerRequest: 1 })
    clients.push(client)
  })
  after(async () => {
    own?.thaw()
    await own?.kill()
  })

  it('loads the batch script again after SCRIPT FLUSH', async () => {
    const fixed = new RedisFixedWindow({ client, limit: 10, windowMs: 60_000, prefix, clock })
    assert.equal((await Promise.all([fixed.check('flushed'), fixed.check('flushed')]))[1]?.count, 2)
    await client.script('FLUSH')
    const again = await Promise.all([fixed.check('flushed'), fixed.check('flushed'), fixed.check('flushed')])
    assert.deepEqual(
      again.map((r) => r.count),
      [3, 4, 5],
    )
  })

  it("keeps a read behind the checks made after it when Redis lacks only the read's script", async () => {
    // another client has the batch script cached; the read's script is not, as after a deploy
    // that changed one script
    await client.script('FLUSH')
    const warm = new RedisFixedWindow({ client, limit: 10, windowMs: 60_000, prefix, clock })
    await Promise.all([warm.check('warm'), warm.check('warm')])
    const other = new Redis(own.url, { maxRetriesPerRequest: 1 })
    try {
      const fixed = new RedisFixedWindow({ client: other, limit: 10, windowMs: 60_000, prefix, clock })
      const before = [fixed.check('ordered'), fixed.check('ordered'), fixed.check('ordered')]
      const read = fixed.peek('ordered')
      const later = [fixed.check('ordered'), fixed.check('ordered')]
      assert.deepEqual(
        (await Promise.all(before)).map((r) => r.count),
        [1, 2, 3],
      )
      assert.equal((await read).count, 3, 'the read counts the checks made before it only')
      assert.deepEqual(
        (await Promise.all(later)).map((r) => r.count),
        [4, 5],
      )
    } finally {
      other.disconnect()
    }
  })

  it('a batch Redis reaches after its deadline changes nothing', async () => {
    const fixed = new RedisFixedWindow({ client, limit: 100, windowMs: 60_000, prefix, clock, timeoutMs: 300 })
    // a few answered calls teach the algorithm Redis's clock, so the calls carry a deadline
    for (let i = 0; i < 3; i++) await fixed.check('frozen')
    own.freeze()
    let answers: PromiseSettledResult<unknown>[]
    try {
      answers = await Promise.allSettled(Array.from({ length: 5 }, () => fixed.check('frozen')))
    } finally {
      own.thaw()
    }
    assert.deepEqual(
      answers.map((a) => (a.status === 'rejected' ? (a.reason as StoreError).code : 'answered')),
      Array.from({ length: 5 }, () => 'STORE_TIMEOUT'),
    )
    // Redis runs what was queued in order: once a later call answers, the batch has run
    await until(
      async () =>
        await fixed.check('frozen-probe').then(
          () => true,
          () => false,
        ),
      5_000,
      'Redis to answer again',
    )
    assert.equal(await client.get(fixed.key('frozen')), '3')
  })
})
