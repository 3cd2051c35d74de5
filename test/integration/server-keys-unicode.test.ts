/**
 * Keys in one Unicode form (docs/SERVICE.md, "Keys and Unicode"): with `key-normalization: nfc`
 * (the default) "José" typed as U+00E9 and as "e" + U+0301 is one user on every route, in the
 * deny and allow lists, the config's and the runtime overrides, and Envoy's descriptors and domain
 * files; with `none` they are two, as opaque bytes. On the memory store and the shared Redis.
 */
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { Redis } from 'ioredis'
import { parseConfig } from '../../src/server/config.js'
import { rlsClient } from '../support/envoy-client.js'
import { call, check, deleteKeys, SHARED_REDIS_URL, startTestService, type TestService, uniquePrefix } from './server-helpers.js'

const NFC = 'Jos\u00e9'
const NFD = 'Jose\u0301'
const NFD_RENEE = 'Rene\u0301e'

const DOMAIN = `domain: edge
descriptors:
  - key: user
    value: "${NFC}"
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: user
    rate_limit: { unit: minute, requests_per_unit: 100 }
`

interface Setup {
  readonly svc: TestService
  readonly client: ReturnType<typeof rlsClient>
  close(): Promise<void>
}

async function start(storeYaml: string, normalization: string): Promise<Setup> {
  const dir = mkdtempSync(path.join(tmpdir(), 'rl-unicode-'))
  mkdirSync(path.join(dir, 'domains'))
  writeFileSync(path.join(dir, 'domains', 'edge.yaml'), DOMAIN)
  const svc = await startTestService(
    `${storeYaml}
${normalization}
auth: { tokens: [user-token-1], admin-tokens: [admin-token-1] }
grpc: { port: 0 }
envoy: { domains: ${path.join(dir, 'domains')} }
policies:
  login:
    max-requests: 5
    deny-list: ["Zo\u00eb"]
    allow-list: ["Fran\u00e7ois"]
    overrides: { "${NFD_RENEE}": { max-requests: 1 } }
`,
    { grpcPort: 0 },
  )
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

const user = { authorization: 'Bearer user-token-1' }
const admin = { authorization: 'Bearer admin-token-1' }

for (const store of ['memory', 'redis'] as const) {
  describe(`key-normalization: nfc, the default (${store} store)`, { timeout: 60_000 }, () => {
    const prefix = uniquePrefix()
    let s: Setup
    let redis: Redis | undefined
    before(async () => {
      if (store === 'redis') redis = new Redis(SHARED_REDIS_URL)
      s = await start(
        store === 'redis'
          ? `store: { type: redis, url: "${SHARED_REDIS_URL}" }\nrate-limiter: { key-prefix: "${prefix}" }`
          : 'store: { type: memory }',
        '',
      )
    })
    after(async () => {
      await s?.close()
      if (redis !== undefined) {
        await deleteKeys(redis, prefix)
        redis.disconnect()
      }
    })

    it('counts both spellings of one name as one user: 5 hits of the NFC spelling leave the NFD one none', async () => {
      for (let i = 0; i < 5; i++) assert.equal((await check(s.svc.url, { userId: NFC, policy: 'login' }, user)).status, 200)
      const nfd = await check(s.svc.url, { userId: NFD, policy: 'login' }, user)
      assert.equal(nfd.status, 429)
      assert.equal(nfd.body?.count, 5)
      const read = await call(`${s.svc.url}/v1/users/${encodeURIComponent(NFD)}?policy=login`, { headers: user })
      assert.equal(read.body?.count, 5)
    })

    it('matches list entries written in one form against ids sent in the other', async () => {
      const denied = await check(s.svc.url, { userId: 'Zoe\u0308', policy: 'login' }, user)
      assert.equal(denied.status, 429)
      assert.equal(denied.body?.reason, 'denylist')
      const allowed = await check(s.svc.url, { userId: 'Franc\u0327ois', policy: 'login' }, user)
      assert.equal(allowed.body?.reason, 'allowlist')
    })

    it("applies the config's and the runtime overrides whichever form named the user", async () => {
      // the config names Renée in NFD; a request in NFC gets its limit of 1
      const renee = 'Ren\u00e9e'
      assert.equal((await check(s.svc.url, { userId: renee, policy: 'login' }, user)).body?.limit, 1)
      // a runtime override set for the NFD spelling is read back and applied under the NFC one
      const put = await call(`${s.svc.url}/v1/overrides/login/${encodeURIComponent('Ame\u0301lie')}`, {
        method: 'PUT',
        headers: { ...admin, 'content-type': 'application/json' },
        body: JSON.stringify({ maxRequests: 2 }),
      })
      assert.equal(put.status, 200)
      assert.equal(put.body?.userId, 'Am\u00e9lie')
      assert.equal((await check(s.svc.url, { userId: 'Am\u00e9lie', policy: 'login' }, user)).body?.limit, 2)
    })

    it("matches Envoy's descriptors against the domain file's values in one form, over gRPC and /json", async () => {
      const call1 = await s.client.call({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: NFD }] }] })
      assert.equal(call1.statuses[0].current_limit.requests_per_unit, 2)
      const call2 = await s.client.call({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: NFC }] }] })
      assert.equal(call2.statuses[0].limit_remaining, 0)
      const json = await fetch(`${s.svc.url}/json`, {
        method: 'POST',
        headers: { ...user, 'content-type': 'application/json' },
        body: JSON.stringify({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: NFD }] }] }),
      })
      assert.equal(json.status, 429)
    })
  })
}

describe('key-normalization: none compares the code points as sent', { timeout: 60_000 }, () => {
  let s: Setup
  before(async () => {
    s = await start('store: { type: memory }', 'key-normalization: none')
  })
  after(async () => {
    await s?.close()
  })

  it('keeps the two spellings apart, in counts, lists and domain files', async () => {
    for (let i = 0; i < 5; i++) await check(s.svc.url, { userId: NFC, policy: 'login' }, user)
    assert.equal((await check(s.svc.url, { userId: NFD, policy: 'login' }, user)).body?.count, 1)
    assert.equal((await check(s.svc.url, { userId: 'Zoe\u0308', policy: 'login' }, user)).body?.reason, 'limit')
    const envoy = await s.client.call({ domain: 'edge', descriptors: [{ entries: [{ key: 'user', value: NFD }] }] })
    assert.equal(envoy.statuses[0].current_limit.requests_per_unit, 100)
  })
})

describe('the config names each user once in NFC', () => {
  it('refuses two overrides of one policy that are one user in NFC, and takes them with key-normalization: none', () => {
    const yaml = (extra: string) =>
      `store: { type: memory }\n${extra}\nrate-limiter:\n  overrides:\n    "${NFC}": { max-requests: 1 }\n    "${NFD}": { max-requests: 2 }\n`
    assert.throws(
      () => parseConfig(yaml(''), 'ratelimiting.yaml'),
      (err: Error) => /rate-limiter\.overrides\.Jose\u0301: names the same user as "Jos\u00e9" in Unicode's NFC/.test(err.message),
    )
    assert.equal(parseConfig(yaml('key-normalization: none'), 'ratelimiting.yaml').keyNormalization, 'none')
    assert.throws(() => parseConfig('store: { type: memory }\nkey-normalization: nfd\n', 'ratelimiting.yaml'), /key-normalization/)
  })
})
