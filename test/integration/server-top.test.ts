/* eslint-disable @typescript-eslint/no-explicit-any -- the answers are JSON, read field by field */
/**
 * GET /v1/top: who is being limited, per policy and per Envoy rule, over real HTTP: a service
 * in-process on the memory store, traffic through POST /v1/check and POST /json, the top keys
 * read back; its 400s and 404s; and the admin token it needs when auth is on.
 */
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, it } from 'node:test'
import { call, check, startTestService } from './server-helpers.js'

const ADMIN = 'admin-token-top-1'
const CLIENT = 'client-token-top-1'
const bearer = (token: string) => ({ authorization: `Bearer ${token}` })

const EDGE = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 2 }
  - key: tier
    value: internal
    rate_limit: { unlimited: true }
`

describe('GET /v1/top', { timeout: 30_000 }, () => {
  it('lists the keys of a policy by denials and by hits, with counts and error bounds', async () => {
    const t = await startTestService(
      `rate-limiter: { use-algo: fixed-window-algo, max-requests: 3, window-size: 60 }
store: { type: memory }
policies:
  login: { use-algo: sliding-window-algo, max-requests: 2, window-size: 60 }
`,
    )
    try {
      // heavy sends 10 (7 denied), medium 4 (2 denied), 20 light users one each
      for (let i = 0; i < 10; i++) await check(t.url, { userId: 'heavy', policy: 'login' })
      for (let i = 0; i < 4; i++) await check(t.url, { userId: 'medium', policy: 'login' })
      for (let i = 0; i < 20; i++) await check(t.url, { userId: `light-${i}`, policy: 'login' })
      await check(t.url, { userId: 'elsewhere' })

      const { status, body } = await call(`${t.url}/v1/top?policy=login&n=3`)
      assert.equal(status, 200)
      const top = body as any
      assert.equal(top.policy, 'login')
      assert.equal(top.windowSeconds, 60)
      assert.deepEqual(top.byDenials, [
        { key: 'heavy', count: 8, error: 0 },
        { key: 'medium', count: 2, error: 0 },
      ])
      assert.equal(top.byHits.length, 3)
      assert.deepEqual(top.byHits.slice(0, 2), [
        { key: 'heavy', count: 10, error: 0 },
        { key: 'medium', count: 4, error: 0 },
      ])
      // the default policy's, without ?policy
      const other = (await call(`${t.url}/v1/top`)).body as any
      assert.equal(other.policy, 'default')
      assert.deepEqual(other.byHits, [{ key: 'elsewhere', count: 1, error: 0 }])
      assert.deepEqual(other.byDenials, [])
    } finally {
      await t.close()
    }
  })

  it('answers 400 naming the bad parameter, 404 for an unknown policy, domain or rule', async () => {
    const t = await startTestService('store: { type: memory }\n')
    try {
      const problems: Array<[string, number, RegExp]> = [
        ['?n=0', 400, /^n must/],
        ['?n=abc', 400, /^n must/],
        ['?n=101', 400, /^n must/],
        ['?policy=', 400, /^policy/],
        ['?policy=default&domain=edge&rule=x', 400, /^policy/],
        ['?domain=edge', 400, /^rule/],
        ['?rule=edge.x', 400, /^domain/],
        ['?policy=nope', 404, /"nope" is not configured/],
        ['?domain=edge&rule=edge.remote_address', 404, /domain "edge"/],
      ]
      for (const [query, expected, message] of problems) {
        const { status, body } = await call(`${t.url}/v1/top${query}`)
        assert.equal(status, expected, query)
        assert.match(String(body?.message), message, query)
      }
    } finally {
      await t.close()
    }
  })

  it('counts the Envoy decisions per rule (by stats key) and the own limits per domain', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'rl-top-'))
    mkdirSync(path.join(dir, 'domains'))
    writeFileSync(path.join(dir, 'domains', 'edge.yaml'), EDGE)
    const t = await startTestService(`store: { type: memory }\nenvoy: { domains: ${path.join(dir, 'domains')} }\n`)
    const post = (descriptors: unknown[]) =>
      fetch(`${t.url}/json`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ domain: 'edge', descriptors }),
      })
    try {
      for (let i = 0; i < 5; i++) await post([{ entries: [{ key: 'remote_address', value: '10.0.0.1' }] }])
      await post([{ entries: [{ key: 'remote_address', value: '10.0.0.2' }] }])
      await post([{ entries: [{ key: 'tier', value: 'internal' }] }])
      for (let i = 0; i < 3; i++) await post([{ entries: [{ key: 'api', value: 'k1' }], limit: { requestsPerUnit: 1, unit: 'MINUTE' } }])

      const rule = (await call(`${t.url}/v1/top?domain=edge&rule=edge.remote_address`)).body as any
      assert.equal(rule.domain, 'edge')
      assert.equal(rule.rule, 'edge.remote_address')
      assert.equal(rule.byHits.length, 2)
      assert.deepEqual(
        rule.byHits.map((e: any) => e.count),
        [5, 1],
      )
      assert.match(rule.byHits[0].key, /10\.0\.0\.1/)
      assert.equal(rule.byDenials.length, 1)
      assert.equal(rule.byDenials[0].count, 3)

      const own = (await call(`${t.url}/v1/top?domain=edge&rule=own-limits`)).body as any
      assert.equal(own.byHits[0].count, 3)
      assert.equal(own.byDenials[0].count, 2)
      assert.match(own.byHits[0].key, /k1/)

      // an unlimited rule counts nothing, and is no rule of /v1/top
      assert.equal((await call(`${t.url}/v1/top?domain=edge&rule=edge.tier_internal`)).status, 404)
    } finally {
      await t.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('needs an admin token when auth is on', async () => {
    const t = await startTestService(`store: { type: memory }\nauth: { tokens: [${CLIENT}], admin-tokens: [${ADMIN}] }\n`)
    try {
      assert.equal((await check(t.url, { userId: 'u1' }, bearer(CLIENT))).status, 200)
      assert.equal((await call(`${t.url}/v1/top`)).status, 401)
      const asClient = await call(`${t.url}/v1/top`, { headers: bearer(CLIENT) })
      assert.equal(asClient.status, 403)
      assert.match(String(asClient.body?.message), /admin token/)
      const asAdmin = await call(`${t.url}/v1/top`, { headers: bearer(ADMIN) })
      assert.equal(asAdmin.status, 200)
      assert.deepEqual((asAdmin.body as any).byHits, [{ key: 'u1', count: 1, error: 0 }])
    } finally {
      await t.close()
    }
  })
})
