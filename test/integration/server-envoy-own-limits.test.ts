/**
 * Descriptors' own limits (rls v3 `limit`) under attack, over gRPC and POST /json on a real
 * service: any number of distinct limits is served (the least recently used algorithm object is
 * dropped, never a request refused), a dropped limit keeps its counts, and a unit is looked up as
 * data, never through the prototype chain (docs/GATEWAY.md, "Requests and answers").
 */
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { MAX_OVERRIDE_LIMITS } from '../../src/server/gateway/envoy-rules.js'
import { type Message, rlsClient } from '../support/envoy-client.js'
import { deleteKeys, SHARED_REDIS_URL, startTestService, type TestService, uniquePrefix } from './server-helpers.js'

const DOMAIN = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3 }
`

interface Gateway {
  readonly svc: TestService
  readonly client: ReturnType<typeof rlsClient>
  close(): Promise<void>
}

async function startGateway(storeYaml: string): Promise<Gateway> {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-own-limits-'))
  mkdirSync(path.join(dir, 'domains'))
  writeFileSync(path.join(dir, 'domains', 'edge.yaml'), DOMAIN)
  const svc = await startTestService(`${storeYaml}\ngrpc: { port: 0 }\nenvoy: { domains: ${path.join(dir, 'domains')} }\n`, { grpcPort: 0 })
  const client = rlsClient(svc.service.grpc?.port as number)
  return {
    svc,
    client,
    async close() {
      client.close()
      await svc.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

const own = (value: string, requestsPerUnit: number, unit = 'HOUR') => ({
  entries: [{ key: 'remote_address', value }],
  limit: { requests_per_unit: requestsPerUnit, unit },
})

function postJson(base: string, body: unknown): Promise<Response> {
  return fetch(`${base}/json`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
}

for (const store of ['memory', 'redis'] as const) {
  describe(`descriptors' own limits (${store} store)`, { timeout: 120_000 }, () => {
    const prefix = uniquePrefix()
    let gw: Gateway
    let redis: Redis | undefined
    before(async () => {
      if (store === 'redis') redis = new Redis(SHARED_REDIS_URL)
      gw = await startGateway(
        store === 'redis'
          ? `store: { type: redis, url: "${SHARED_REDIS_URL}" }\nrate-limiter: { key-prefix: "${prefix}" }`
          : 'store: { type: memory }',
      )
    })
    after(async () => {
      await gw?.close()
      if (redis !== undefined) {
        await deleteKeys(redis, prefix)
        redis.disconnect()
      }
    })

    it(`serves more than ${MAX_OVERRIDE_LIMITS} distinct limits, and a limit dropped meanwhile keeps its counts`, async () => {
      // the victim's limit of 3 per hour, used up
      const victim = own('victim', 3)
      const first: string[] = []
      for (let i = 0; i < 4; i++) first.push((await gw.client.call({ domain: 'edge', descriptors: [victim] })).overall_code)
      assert.deepEqual(first, ['OK', 'OK', 'OK', 'OVER_LIMIT'])
      // an attacker's flood of distinct limits, over gRPC and /json: every one is answered
      const flood = MAX_OVERRIDE_LIMITS + 200
      const codes = new Map<string, number>()
      for (let start = 0; start < flood; start += 64) {
        const batch: Array<Promise<string>> = []
        for (let n = start; n < Math.min(flood, start + 64); n++) {
          const d = own(`attacker-${n}`, 10 + n)
          batch.push(
            n % 2 === 0
              ? gw.client.call({ domain: 'edge', descriptors: [d] }).then((r: Message) => String(r.overall_code))
              : postJson(gw.svc.url, {
                  domain: 'edge',
                  descriptors: [{ entries: d.entries, limit: { requestsPerUnit: d.limit.requests_per_unit, unit: 'HOUR' } }],
                }).then((r) => String(r.status)),
          )
        }
        for (const code of await Promise.all(batch)) codes.set(code, (codes.get(code) ?? 0) + 1)
      }
      assert.deepEqual(Object.fromEntries(codes), { OK: flood / 2, '200': flood / 2 })
      // the victim's limit was dropped from the kept objects, not its counts
      const again = await gw.client.call({ domain: 'edge', descriptors: [victim] })
      assert.equal(again.overall_code, 'OVER_LIMIT')
      // and a new limit after the flood is served too
      const fresh = await gw.client.call({ domain: 'edge', descriptors: [own('after-flood', 2)] })
      assert.equal(fresh.overall_code, 'OK')
      assert.equal(fresh.statuses[0].limit_remaining, 1)
    })

    it('counts one descriptor once whatever limit each request gives it, as the reference (its cache key holds no limit)', async () => {
      const codes: string[] = []
      for (const requestsPerUnit of [5, 2, 5, 3]) {
        const r = await gw.client.call({ domain: 'edge', descriptors: [own('shifting', requestsPerUnit)] })
        codes.push(`${r.overall_code}:${r.statuses[0].limit_remaining}`)
      }
      // 1st of 5 leaves 4; the 2nd hit against 2 leaves 0; the 3rd against 5 leaves 2; the 4th against 3 is over
      assert.deepEqual(codes, ['OK:4', 'OK:0', 'OK:2', 'OVER_LIMIT:0'])
    })

    it('answers a unit named after an Object property with 400 naming the field, and logs no error', async () => {
      for (const unit of ['__proto__', 'constructor', 'toString', 'valueOf', 'hasOwnProperty']) {
        const res = await postJson(gw.svc.url, {
          domain: 'edge',
          descriptors: [{ entries: [{ key: 'remote_address', value: 'proto' }], limit: { requestsPerUnit: 5, unit } }],
        })
        assert.equal(res.status, 400, unit)
        const body = (await res.json()) as { error: string; message: string }
        assert.equal(body.error, 'invalid_request')
        assert.equal(body.message, `descriptors[0].limit.unit must be a defined RateLimitUnit, got ${unit}`)
      }
      assert.deepEqual(
        gw.svc.logs.filter((l) => (l.level as number) >= 50),
        [],
      )
    })
  })
}
