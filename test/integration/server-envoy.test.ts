/**
 * Envoy's rate limit protocol end to end: a gRPC client built only from Envoy's .proto files
 * (proto/, loaded with @grpc/proto-loader, no code of ours) calls ShouldRateLimit and
 * grpc.health.v1 on the service, and POST /json answers the same in the proto3 JSON mapping; on
 * the memory store, the shared Redis, and the shared Redis Cluster.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the client is made from Envoy's .proto files at run time: its messages have no static types */
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import * as grpc from '@grpc/grpc-js'
import { loadSync } from '@grpc/proto-loader'
import { Cluster, Redis } from 'ioredis'
import { runCli } from '../../src/server/cli-main.js'
import { type Message, rlsClient } from '../support/envoy-client.js'
import { sharedClusterPorts } from '../support/redis-server.js'
import {
  deleteKeys,
  keysUnder,
  root,
  SHARED_REDIS_URL,
  startOwnRedis,
  startTestService,
  type TestService,
  uniquePrefix,
  until,
} from './server-helpers.js'

const healthDefinition = loadSync('health/v1/health.proto', {
  includeDirs: [path.join(root, 'node_modules/grpc-health-check/proto')],
  keepCase: true,
  enums: String,
})
const healthPkg = (grpc.loadPackageDefinition(healthDefinition) as any).grpc.health.v1

const EDGE = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: path
    value: /login
    shadow_mode: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: tier
    value: internal
    rate_limit: { unlimited: true }
  - key: api_key
    descriptors:
      - key: method
        value: POST
        rate_limit: { name: post_limit, unit: hour, requests_per_unit: 2 }
      - key: method
        rate_limit: { name: any_method, unit: hour, requests_per_unit: 100 }
  - key: plan
    value: free
    rate_limit: { name: free_plan, unit: minute, requests_per_unit: 5, replaces: [{ name: per_user }] }
  - key: user
    rate_limit: { name: per_user, unit: minute, requests_per_unit: 1 }
  - key: log_rule
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: sliding-window-algo }
  - key: counter_rule
    rate_limit: { unit: minute, requests_per_unit: 2, algorithm: sliding-window-counter-algo, sync_rate: 0 }
  - key: detailed
    detailed_metric: true
    rate_limit: { unit: minute, requests_per_unit: 1 }
  - key: shadow_detailed
    detailed_metric: true
    shadow_mode: true
    rate_limit: { unit: hour, requests_per_unit: 1 }
`

const entries = (...pairs: string[]) => {
  const out: Array<{ key: string; value: string }> = []
  for (let i = 0; i < pairs.length; i += 2) out.push({ key: pairs[i] as string, value: pairs[i + 1] as string })
  return { entries: out }
}

interface Gateway {
  readonly svc: TestService
  readonly client: ReturnType<typeof rlsClient>
  readonly dir: string
  close(): Promise<void>
}

async function startGateway(storeYaml: string, extra = ''): Promise<Gateway> {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-envoy-'))
  mkdirSync(path.join(dir, 'domains'))
  writeFileSync(path.join(dir, 'domains', 'edge.yaml'), EDGE)
  const svc = await startTestService(
    `${storeYaml}\ngrpc: { port: 0 }\nenvoy: { domains: ${path.join(dir, 'domains')}, response-headers: x-ratelimit }\n${extra}`,
    {
      grpcPort: 0,
    },
  )
  const client = rlsClient(svc.service.grpc?.port as number)
  return {
    svc,
    client,
    dir,
    async close() {
      client.close()
      await svc.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

function behavesAsTheReference(name: string, store: () => Promise<{ yaml: string; cleanup?: () => Promise<void> }>): void {
  describe(`ShouldRateLimit over gRPC (${name})`, () => {
    let gw: Gateway
    let cleanup: (() => Promise<void>) | undefined
    const ip = `10.0.0.${Math.floor(Math.random() * 250)}`
    before(async () => {
      const s = await store()
      cleanup = s.cleanup
      gw = await startGateway(s.yaml)
    })
    after(async () => {
      await gw?.close()
      await cleanup?.()
    })

    it('answers each descriptor in order with its limit, remaining and reset, then OVER_LIMIT past the limit', async () => {
      const answers: Message[] = []
      for (let i = 0; i < 4; i++) answers.push(await gw.client.call({ domain: 'edge', descriptors: [entries('remote_address', ip)] }))
      assert.deepEqual(
        answers.map((a) => [a.overall_code, a.statuses[0].code, a.statuses[0].limit_remaining]),
        [
          ['OK', 'OK', 2],
          ['OK', 'OK', 1],
          ['OK', 'OK', 0],
          ['OVER_LIMIT', 'OVER_LIMIT', 0],
        ],
      )
      const status = answers[0]?.statuses[0]
      assert.equal(status.current_limit.requests_per_unit, 3)
      assert.equal(status.current_limit.unit, 'MINUTE')
      const reset = Number(status.duration_until_reset.seconds)
      assert.ok(reset >= 1 && reset <= 60, `duration_until_reset ${reset} s within the minute`)
      // the reference's X-RateLimit headers, from the descriptor with the least left
      const headers = Object.fromEntries((answers[3]?.response_headers_to_add as Message[]).map((h) => [h.key, h.value]))
      assert.deepEqual({ limit: headers['X-RateLimit-Limit'], remaining: headers['X-RateLimit-Remaining'] }, { limit: '3', remaining: '0' })
    })

    it('an unknown descriptor or domain is OK without a limit; unlimited says the largest uint32', async () => {
      const a = await gw.client.call({
        domain: 'edge',
        descriptors: [entries('nothing', 'here'), entries('tier', 'internal'), entries('remote_address', `${ip}-x`)],
      })
      assert.equal(a.overall_code, 'OK')
      assert.equal(a.statuses.length, 3)
      assert.equal(a.statuses[0].current_limit ?? null, null)
      assert.equal(a.statuses[1].limit_remaining, 4_294_967_295)
      assert.equal(a.statuses[2].limit_remaining, 2)
      const unknown = await gw.client.call({ domain: 'nope', descriptors: [entries('remote_address', ip)] })
      assert.equal(unknown.overall_code, 'OK')
    })

    it('nested descriptors: the most specific value wins, and each rule counts on its own', async () => {
      const key = `k-${ip}`
      const post = () => gw.client.call({ domain: 'edge', descriptors: [entries('api_key', key, 'method', 'POST')] })
      const get = () => gw.client.call({ domain: 'edge', descriptors: [entries('api_key', key, 'method', 'GET')] })
      assert.equal((await post()).statuses[0].current_limit.name, 'post_limit')
      assert.equal((await post()).overall_code, 'OK')
      assert.equal((await post()).overall_code, 'OVER_LIMIT')
      const g = await get()
      assert.equal(g.statuses[0].current_limit.name, 'any_method')
      assert.equal(g.statuses[0].limit_remaining, 99)
    })

    it('hits_addend of the request and of a descriptor; a descriptor hits_addend of 0 reads without counting', async () => {
      const addr = `${ip}-hits`
      const a = await gw.client.call({ domain: 'edge', hits_addend: 2, descriptors: [entries('remote_address', addr)] })
      assert.equal(a.statuses[0].limit_remaining, 1)
      const read = await gw.client.call({
        domain: 'edge',
        descriptors: [{ ...entries('remote_address', addr), hits_addend: { value: 0 } }],
      })
      assert.equal(read.statuses[0].limit_remaining, 1)
      const b = await gw.client.call({ domain: 'edge', descriptors: [{ ...entries('remote_address', addr), hits_addend: { value: 2 } }] })
      assert.equal(b.overall_code, 'OVER_LIMIT')
    })

    it("a descriptor's own limit overrides the domain file's", async () => {
      const d = { ...entries('remote_address', `${ip}-override`), limit: { requests_per_unit: 1, unit: 'SECOND' } }
      const first = await gw.client.call({ domain: 'edge', descriptors: [d] })
      assert.deepEqual([first.statuses[0].current_limit.requests_per_unit, first.statuses[0].current_limit.unit], [1, 'SECOND'])
      const second = await gw.client.call({ domain: 'edge', descriptors: [d] })
      // the second hit in the same second is over, unless the second just turned
      assert.ok(second.overall_code === 'OVER_LIMIT' || Number(second.statuses[0].duration_until_reset.seconds) === 1)
    })

    it('a descriptor value of any length counts as itself, under a key and a metric label of bounded length', async () => {
      // two 60 KB values that differ only at their end
      const long = (end: string) => `${'v'.repeat(60_000)}-${ip}-${end}`
      const codes: string[] = []
      for (const d of [
        entries('detailed', long('a')),
        entries('detailed', long('a')),
        entries('detailed', long('b')),
        { ...entries('remote_address', long('a')), limit: { requests_per_unit: 1, unit: 'MINUTE' } },
        { ...entries('remote_address', long('a')), limit: { requests_per_unit: 1, unit: 'MINUTE' } },
        { ...entries('remote_address', long('b')), limit: { requests_per_unit: 1, unit: 'MINUTE' } },
      ])
        codes.push((await gw.client.call({ domain: 'edge', descriptors: [d] })).overall_code)
      assert.deepEqual(codes, ['OK', 'OVER_LIMIT', 'OK', 'OK', 'OVER_LIMIT', 'OK'])
      const res = await fetch(`${gw.svc.url}/metrics`)
      assert.equal(res.status, 200)
      const rules = new Set<string>()
      for (const m of (await res.text()).matchAll(/^ratelimiting_rule_hits_total\{domain="edge",rule="([^"]*)"/gm))
        if ((m[1] as string).includes(`-${ip}-`) || (m[1] as string).length > 200) rules.add(m[1] as string)
      // detailed_metric and a descriptor's own limit name each value: four labels, none longer than 256
      assert.equal(rules.size, 4, [...rules].join('\n'))
      for (const rule of rules) assert.ok(rule.length <= 256, `a rule label of ${rule.length} characters`)
    })

    it('replaces: a matched rule drops the rule it names in the same request', async () => {
      const u = `u-${ip}`
      const both = () => gw.client.call({ domain: 'edge', descriptors: [entries('plan', 'free'), entries('user', u)] })
      const answers = [await both(), await both()]
      // per_user (1 a minute) is replaced by free_plan: no limit for it, the second request passes
      assert.deepEqual(
        answers.map((a) => a.overall_code),
        ['OK', 'OK'],
      )
      assert.equal(answers[1]?.statuses[1].current_limit ?? null, null)
      const alone = [await gw.client.call({ domain: 'edge', descriptors: [entries('user', u)] })]
      alone.push(await gw.client.call({ domain: 'edge', descriptors: [entries('user', u)] }))
      assert.deepEqual(
        alone.map((a) => a.overall_code),
        ['OK', 'OVER_LIMIT'],
      )
    })

    it('shadow_mode: counted and answered OK, shown in the metrics', async () => {
      const login = () => gw.client.call({ domain: 'edge', descriptors: [entries('path', '/login')] })
      const answers = [await login(), await login(), await login()]
      assert.deepEqual(
        answers.map((a) => [a.overall_code, a.statuses[0].code]),
        [
          ['OK', 'OK'],
          ['OK', 'OK'],
          ['OK', 'OK'],
        ],
      )
      const metrics = await (await fetch(`${gw.svc.url}/metrics`)).text()
      assert.match(metrics, /ratelimiting_shadow_denials_total\{domain="edge",rule="edge\.path_\/login"\} [1-9]/)
      assert.match(metrics, /ratelimiting_rule_hits_total\{domain="edge",rule="edge\.path_\/login",kind="shadow_mode"\} [1-9]/)
      assert.match(metrics, /ratelimiting_grpc_request_duration_seconds_count\{method="ShouldRateLimit",code="OK"\} [1-9]/)
    })

    it('the sliding log and the counter algorithm decide rules of their own', async () => {
      for (const key of ['log_rule', 'counter_rule']) {
        const d = entries(key, ip)
        const codes: string[] = []
        for (let i = 0; i < 3; i++) codes.push((await gw.client.call({ domain: 'edge', descriptors: [d] })).overall_code)
        assert.deepEqual(codes, ['OK', 'OK', 'OVER_LIMIT'], key)
      }
    })

    it('POST /json takes the JSON request and answers 200, then 429, in the proto3 JSON mapping', async () => {
      const body = JSON.stringify({
        domain: 'edge',
        descriptors: [{ entries: [{ key: 'remote_address', value: `${ip}-json` }] }],
        hitsAddend: 2,
      })
      const post = () => fetch(`${gw.svc.url}/json`, { method: 'POST', headers: { 'content-type': 'application/json' }, body })
      const first = await post()
      assert.equal(first.status, 200)
      const j = (await first.json()) as Message
      assert.equal(j.overallCode, 'OK')
      assert.deepEqual(j.statuses[0].currentLimit, { requestsPerUnit: 3, unit: 'MINUTE' })
      assert.equal(j.statuses[0].limitRemaining, 1)
      assert.match(j.statuses[0].durationUntilReset, /^\d+s$/)
      const second = await post()
      assert.equal(second.status, 429)
      assert.equal(((await second.json()) as Message).statuses[0].code, 'OVER_LIMIT')
      const bad = await fetch(`${gw.svc.url}/json`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'a', valu: 'b' }] }] }),
      })
      assert.equal(bad.status, 400)
      assert.match(((await bad.json()) as Message).message, /descriptors\[0\]\.entries\[0\]: unknown field "valu"/)
      // JSON can carry a lone surrogate, which gRPC's UTF-8 cannot: it is escaped into the counter key, not an error
      const lone = await fetch(`${gw.svc.url}/json`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"domain":"edge","descriptors":[{"entries":[{"key":"remote_address","value":"\\ud800"}],"limit":{"requestsPerUnit":5,"unit":"MINUTE"}},{"entries":[{"key":"remote_address","value":"\\udc00"}]}]}',
      })
      assert.equal(lone.status, 200)
      assert.deepEqual(
        ((await lone.json()) as Message).statuses.map((st: Message) => st.limitRemaining),
        [4, 2],
      )
    })

    it('a request Envoy would not send is INVALID_ARGUMENT, naming what is wrong', async () => {
      await assert.rejects(
        gw.client.call({ domain: '', descriptors: [entries('a', 'b')] }),
        /INVALID_ARGUMENT: rate limit domain must not be empty/,
      )
      await assert.rejects(
        gw.client.call({ domain: 'edge', descriptors: [] }),
        /INVALID_ARGUMENT: rate limit descriptor list must not be empty/,
      )
      await assert.rejects(
        gw.client.call({ domain: 'edge', descriptors: [{ entries: [] }] }),
        /INVALID_ARGUMENT: descriptors\[0\]: entries must not be empty/,
      )
      await assert.rejects(
        gw.client.call({ domain: 'edge', descriptors: [{ ...entries('a', 'b'), limit: { requests_per_unit: 1 } }] }),
        /INVALID_ARGUMENT: descriptors\[0\]\.limit\.unit/,
      )
    })
  })
}

behavesAsTheReference('memory', async () => ({ yaml: 'store: { type: memory }' }))

const redisPrefix = uniquePrefix()
behavesAsTheReference('redis', async () => ({
  yaml: `store: { type: redis, url: "${SHARED_REDIS_URL}" }\nrate-limiter: { key-prefix: "${redisPrefix}" }`,
  async cleanup() {
    const redis = new Redis(SHARED_REDIS_URL)
    // the rules' keys are the service's own: under <prefix>~envoy
    const keys = await keysUnder(redis, `${redisPrefix}~envoy@rule:fixed:`)
    assert.ok(keys.length > 0, 'fixed-window rules write under <prefix>~envoy@rule:fixed:')
    // a descriptor value of 60 KB makes a key of bounded length: the prefix, the scope, 256 and the window
    const envoyKeys = await keysUnder(redis, `${redisPrefix}~envoy`)
    assert.ok(Math.max(...envoyKeys.map((k) => k.length)) <= redisPrefix.length + 300, 'the longest key')
    await deleteKeys(redis, redisPrefix)
    redis.disconnect()
  },
}))

const clusterPrefix = uniquePrefix()
behavesAsTheReference('redis cluster', async () => {
  const ports = await sharedClusterPorts()
  return {
    yaml: `store: { type: redis, nodes: [${ports.map((p) => `"127.0.0.1:${p}"`).join(', ')}] }\nrate-limiter: { key-prefix: "${clusterPrefix}" }`,
    async cleanup() {
      const cluster = new Cluster(ports.map((port) => ({ host: '127.0.0.1', port })))
      for (const node of cluster.nodes('master')) await deleteKeys(node as unknown as Redis, clusterPrefix)
      cluster.disconnect()
    },
  }
})

describe("ShouldRateLimit on a Redis of the test's own: one script call per request", () => {
  // INFO commandstats of a redis-server no other test uses: the script calls one request makes
  const scriptCalls = async (redis: Redis): Promise<number> => {
    const stats = await redis.info('commandstats')
    let calls = 0
    for (const m of stats.matchAll(/^cmdstat_(?:evalsha|eval):calls=(\d+)/gm)) calls += Number(m[1])
    return calls
  }

  it('the descriptors of one request that share a rule algorithm are counted in one call, each as alone', async () => {
    const own = await startOwnRedis()
    const redis = new Redis(own.url)
    const gw = await startGateway(`store: { type: redis, url: "${own.url}", remember-denials: false }`)
    try {
      const request = {
        domain: 'edge',
        descriptors: [
          entries('remote_address', 'batched'),
          entries('user', 'batched'),
          entries('api_key', 'k', 'method', 'POST'),
          entries('log_rule', 'batched'),
        ],
      }
      // the first request also loads the scripts (NOSCRIPT, then EVAL): not counted
      await gw.client.call({
        domain: 'edge',
        descriptors: [
          entries('remote_address', 'warm'),
          entries('user', 'warm'),
          entries('api_key', 'w', 'method', 'POST'),
          entries('log_rule', 'warm'),
        ],
      })
      const answers: Message[] = []
      const calls: number[] = []
      for (let i = 0; i < 2; i++) {
        const before = await scriptCalls(redis)
        answers.push(await gw.client.call(request))
        calls.push((await scriptCalls(redis)) - before)
      }
      // three fixed-window rules in one call, the sliding-log rule in another
      assert.deepEqual(calls, [2, 2])
      assert.deepEqual(
        answers.map((a) => a.statuses.map((st: Message) => [st.code, st.limit_remaining])),
        [
          [
            ['OK', 2],
            ['OK', 0],
            ['OK', 1],
            ['OK', 1],
          ],
          [
            ['OK', 1],
            ['OVER_LIMIT', 0],
            ['OK', 0],
            ['OK', 0],
          ],
        ],
      )
    } finally {
      await gw.close()
      redis.disconnect()
      await own.kill()
    }
  })
})

describe('the gateway around ShouldRateLimit', () => {
  it('grpc.health.v1 says SERVING for the whole server and for the rate limit service', async () => {
    const gw = await startGateway('store: { type: memory }')
    try {
      const health = new healthPkg.Health(`127.0.0.1:${gw.svc.service.grpc?.port}`, grpc.credentials.createInsecure())
      const check = (service: string) =>
        new Promise<Message>((resolve, reject) =>
          health.Check({ service }, (err: Error | null, r: Message) => (err ? reject(err) : resolve(r))),
        )
      assert.equal((await check('')).status, 'SERVING')
      assert.equal((await check('envoy.service.ratelimit.v3.RateLimitService')).status, 'SERVING')
      health.close()
    } finally {
      await gw.close()
    }
  })

  it('global shadow mode (RATELIMITING_SHADOW_MODE) answers OK on gRPC, /json and /v1/check, and counts it', async () => {
    const gw = await startGateway('store: { type: memory }', 'rate-limiter: { max-requests: 1 }\nshadow-mode: true')
    try {
      const d = { domain: 'edge', descriptors: [entries('remote_address', 'shadowed')] }
      const codes: string[] = []
      for (let i = 0; i < 5; i++) codes.push((await gw.client.call(d)).overall_code)
      assert.deepEqual(codes, ['OK', 'OK', 'OK', 'OK', 'OK'])
      const json = await fetch(`${gw.svc.url}/json`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(d),
      })
      assert.equal(json.status, 200)
      assert.equal(json.headers.get('x-ratelimit-shadow'), 'denied')
      const checks = []
      for (let i = 0; i < 2; i++)
        checks.push(
          await fetch(`${gw.svc.url}/v1/check`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: '{"userId":"u1"}',
          }),
        )
      assert.deepEqual(
        checks.map((c) => c.status),
        [200, 200],
      )
      const second = (await checks[1]?.json()) as Message
      assert.equal(second.shadowDenied, true)
      assert.equal(checks[1]?.headers.get('x-ratelimit-shadow'), 'denied')
      const metrics = await (await fetch(`${gw.svc.url}/metrics`)).text()
      assert.match(metrics, /ratelimiting_global_shadow_mode_total\{domain="edge"\} [1-9]/)
      assert.match(metrics, /ratelimiting_shadow_denials_total\{policy="default"\} 1/)
    } finally {
      await gw.close()
    }
  })

  it('a changed domain file applies on reload; a broken one is refused and the rules stay', async () => {
    const gw = await startGateway('store: { type: memory }')
    try {
      const file = path.join(gw.dir, 'domains', 'edge.yaml')
      writeFileSync(file, 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: hour, requests_per_unit: 7 }\n')
      assert.equal(await gw.svc.service.reload('test'), true)
      const a = await gw.client.call({ domain: 'edge', descriptors: [entries('remote_address', 'reloaded')] })
      assert.deepEqual([a.statuses[0].current_limit.requests_per_unit, a.statuses[0].current_limit.unit], [7, 'HOUR'])
      writeFileSync(
        file,
        'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: fortnight, requests_per_unit: 7 }\n',
      )
      assert.equal(await gw.svc.service.reload('test'), false)
      const rejected = gw.svc.logs.find((l) => l.msg === 'config reload rejected; the running config stays')
      assert.match(JSON.stringify(rejected?.issues), /edge\.yaml.*unit/)
      const b = await gw.client.call({ domain: 'edge', descriptors: [entries('remote_address', 'reloaded')] })
      assert.equal(b.statuses[0].limit_remaining, 5)
    } finally {
      await gw.close()
    }
  })

  it("a descriptor's own limit of 0 per unit, or without requests_per_unit, is OVER_LIMIT, as a domain file's rule of 0", async () => {
    const gw = await startGateway('store: { type: memory }')
    try {
      const zero = await gw.client.call({
        domain: 'edge',
        descriptors: [
          entries('remote_address', 'zero-1'),
          { ...entries('remote_address', 'zero-2'), limit: { requests_per_unit: 0, unit: 'MINUTE' } },
        ],
      })
      assert.deepEqual(
        [zero.overall_code, zero.statuses.map((st: Message) => [st.code, st.limit_remaining, st.current_limit.unit])],
        [
          'OVER_LIMIT',
          [
            ['OK', 2, 'MINUTE'],
            ['OVER_LIMIT', 0, 'MINUTE'],
          ],
        ],
      )
      const json = await fetch(`${gw.svc.url}/json`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          domain: 'edge',
          descriptors: [{ entries: [{ key: 'remote_address', value: 'zero-3' }], limit: { unit: 'SECOND' } }],
        }),
      })
      assert.equal(json.status, 429)
      assert.deepEqual(((await json.json()) as Message).statuses, [
        { code: 'OVER_LIMIT', currentLimit: { unit: 'SECOND' }, durationUntilReset: '1s' },
      ])
      const metrics = await (await fetch(`${gw.svc.url}/metrics`)).text()
      assert.match(metrics, /ratelimiting_rule_hits_total\{domain="edge",rule="edge\.remote_address_zero-2",kind="over_limit"\} 1/)
    } finally {
      await gw.close()
    }
  })

  it("a reload keeps the counts of descriptors' own limits, on the memory store too", async () => {
    const gw = await startGateway('store: { type: memory }')
    try {
      const d = { ...entries('remote_address', 'own-limit'), limit: { requests_per_unit: 4, unit: 'HOUR' } }
      const remaining: number[] = []
      for (let i = 0; i < 3; i++) remaining.push((await gw.client.call({ domain: 'edge', descriptors: [d] })).statuses[0].limit_remaining)
      assert.equal(await gw.svc.service.reload('test'), true)
      remaining.push((await gw.client.call({ domain: 'edge', descriptors: [d] })).statuses[0].limit_remaining)
      // another default algorithm counts anew
      gw.svc.write(readFileSync(gw.svc.file, 'utf8').replace('envoy: {', 'envoy: { use-algo: sliding-window-algo,'))
      assert.equal(await gw.svc.service.reload('test'), true)
      remaining.push((await gw.client.call({ domain: 'edge', descriptors: [d] })).statuses[0].limit_remaining)
      assert.deepEqual(remaining, [3, 2, 1, 0, 3])
    } finally {
      await gw.close()
    }
  })

  it('shadow_mode with detailed_metric: the log keeps at most 1000 values apart, the metrics count every one', async () => {
    const gw = await startGateway('store: { type: memory }')
    try {
      // 2048 values, each over the limit by its own hits: 32 requests of 64 descriptors at once
      const calls = []
      for (let r = 0; r < 32; r++) {
        const descriptors = []
        for (let i = 0; i < 64; i++) descriptors.push({ ...entries('shadow_detailed', `value-${r}-${i}`), hits_addend: { value: 2 } })
        calls.push(gw.client.call({ domain: 'edge', descriptors }))
      }
      assert.deepEqual(new Set((await Promise.all(calls)).map((a) => a.overall_code)), new Set(['OK']))
      const lines = gw.svc.logs.filter((l) => l.msg === 'shadow mode: would have denied')
      assert.equal(lines.filter((l) => typeof l.rule === 'string').length, 1000)
      assert.deepEqual(
        lines.filter((l) => l.otherSubjects === true).map((l) => l.suppressed),
        [0],
      )
      const metrics = await (await fetch(`${gw.svc.url}/metrics`)).text()
      assert.equal(
        [...metrics.matchAll(/^ratelimiting_shadow_denials_total\{domain="edge",rule="edge\.shadow_detailed_value-\S+ 1$/gm)].length,
        2048,
      )
    } finally {
      await gw.close()
    }
  })

  it('a change of a domain file is picked up without a signal when the service watches', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'rl-envoy-watch-'))
    mkdirSync(path.join(dir, 'domains'))
    const file = path.join(dir, 'domains', 'edge.yaml')
    writeFileSync(file, EDGE)
    const svc = await startTestService(`store: { type: memory }\ngrpc: { port: 0 }\nenvoy: { domains: ${path.join(dir, 'domains')} }\n`, {
      grpcPort: 0,
      watch: true,
      watchDebounceMs: 50,
    })
    const client = rlsClient(svc.service.grpc?.port as number)
    try {
      writeFileSync(file, 'domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: day, requests_per_unit: 9 }\n')
      await until(
        async () => {
          const a = await client.call({ domain: 'edge', descriptors: [entries('remote_address', 'watched')] })
          return a.statuses[0].current_limit?.requests_per_unit === 9
        },
        10_000,
        'the new rule',
      )
    } finally {
      client.close()
      await svc.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('check-config validates the domain files: exit 3 naming the file', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'rl-envoy-check-'))
    try {
      writeFileSync(
        path.join(dir, 'bad.yaml'),
        'domain: edge\ndescriptors:\n  - key: a\n    rate_limit: { unlimited: true, unit: second, requests_per_unit: 1 }\n',
      )
      writeFileSync(path.join(dir, 'config.yaml'), 'store: { type: memory }\nenvoy: { domains: bad.yaml }\n')
      const out: string[] = []
      const io = { stdout: (t: string) => out.push(t), stderr: (t: string) => out.push(t), env: {}, onSignal: () => () => undefined }
      assert.equal(await runCli(['check-config', path.join(dir, 'config.yaml')], io), 3)
      assert.match(out.join(''), /bad\.yaml:\d+:\d+: .*unlimited/)
      writeFileSync(path.join(dir, 'bad.yaml'), EDGE)
      out.length = 0
      assert.equal(await runCli(['check-config', path.join(dir, 'config.yaml')], io), 0)
      assert.match(out.join(''), /envoy rules: \d+ in 1 file/)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
