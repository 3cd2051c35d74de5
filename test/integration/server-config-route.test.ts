/* eslint-disable @typescript-eslint/no-explicit-any -- the answer is JSON, read field by field */
/**
 * GET /v1/config: the config in force as JSON in the config file's shape, after the environment
 * overrides, secrets redacted; the Envoy domains and rules loaded; the last reload attempt (a
 * refused one with its error, while the config in force stays the old one); the version; and an
 * admin token when auth is on. A real service in-process, asked over HTTP.
 */
import assert from 'node:assert/strict'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, it } from 'node:test'
import { call, freePort, root, startTestService, until } from './server-helpers.js'

const ADMIN = 'admin-token-0001'
const CLIENT = 'client-token-0001'
const auth = (token: string) => ({ authorization: `Bearer ${token}` })

/** GET /v1/config, with the raw text (to look for secrets anywhere in it) and the parsed body. */
async function readConfig(base: string, token?: string): Promise<{ status: number; text: string; body: Record<string, any> }> {
  const res = await fetch(`${base}/v1/config`, { headers: token === undefined ? {} : auth(token) })
  const text = await res.text()
  return { status: res.status, text, body: JSON.parse(text) as Record<string, any> }
}

const memory = (limit: number) =>
  `rate-limiter: { use-algo: fixed-window-algo, max-requests: ${limit}, window-size: 60 }\nstore: { type: memory }\n`

describe('GET /v1/config', { timeout: 30_000 }, () => {
  it('redacts tokens, passwords and the credentials of store URLs, keeping host, port and db', async () => {
    // no Redis listens there: the service starts with its store down, and this route never calls it
    const port = await freePort()
    const t = await startTestService(
      `rate-limiter: { max-requests: 10 }
store: { type: redis, url: "redis://app:file-secret-1@127.0.0.1:${port}/3", timeout-ms: 200 }
auth: { tokens: [${CLIENT}, second-client-token], admin-tokens: [${ADMIN}] }
`,
    )
    try {
      const { status, text, body } = await readConfig(t.url, ADMIN)
      assert.equal(status, 200)
      for (const secret of ['file-secret-1', 'app:', CLIENT, 'second-client-token', ADMIN])
        assert.ok(!text.includes(secret), `${secret} appears in the answer`)
      assert.equal(body.config.store.url, `redis://<redacted>@127.0.0.1:${port}/3`)
      assert.equal(body.config.store.type, 'redis')
      assert.equal(body.config.store['timeout-ms'], 200)
      // the count of tokens stays visible, their values do not
      assert.deepEqual(body.config.auth, { tokens: ['<redacted>', '<redacted>'], 'admin-tokens': ['<redacted>'] })
    } finally {
      await t.close()
    }
  })

  it('shows the environment overrides and what the service listens on, every default filled in', async () => {
    const port = await freePort()
    const t = await startTestService(
      `${memory(5).replace('store: { type: memory }', `store: { type: redis, url: "redis://127.0.0.1:${port}/0", timeout-ms: 200 }`)}policies:
  login: { use-algo: sliding-window-algo, max-requests: 3, deny-list: [10.0.0.0/8] }
  api: { use-algo: sliding-window-counter-algo, max-requests: 100, sync-rate: 0.5, overrides: { partner-1: { max-requests: 500 } } }
`,
      {
        env: {
          RATELIMITING_STORE_URL: `redis://:env-secret-2@127.0.0.1:${port}/5?password=env-secret-3&db=5`,
          RATELIMITING_SHADOW_MODE: 'yes',
          RATELIMITING_ADMIN_TOKENS: 'env-admin-token-1',
        },
      },
    )
    try {
      const { status, text, body } = await readConfig(t.url, 'env-admin-token-1')
      assert.equal(status, 200, 'the admin token from the environment is in force')
      assert.ok(!text.includes('env-secret') && !text.includes('env-admin-token-1'), text)
      const config = body.config
      assert.equal(config.store.url, `redis://<redacted>@127.0.0.1:${port}/5?password=<redacted>&db=5`)
      assert.equal(config['shadow-mode'], true)
      assert.deepEqual(config.auth, { tokens: [], 'admin-tokens': ['<redacted>'] })
      // in force: the port it listens on (the file says none; the test asked for any)
      assert.equal(config.server.port, t.service.port)
      assert.equal(config.server.host, '127.0.0.1')
      assert.equal(config.server['max-body-bytes'], 8192)
      assert.equal(config['log-level'], 'info')
      assert.equal(config['key-normalization'], 'nfc')
      assert.deepEqual(config['rate-limiter'], {
        'use-algo': 'fixed-window-algo',
        'max-requests': 5,
        'window-size': 60,
        'sync-rate': 0.1,
        'shadow-mode': false,
        'deny-list': [],
        'allow-list': [],
        overrides: {},
        'key-prefix': 'rlaas:rate_limit',
        'hash-tag': false,
        'on-store-error': 'error',
        'overrides-refresh': 1,
      })
      // named policies with what they inherit; sync-rate only where it applies
      assert.deepEqual(config.policies.login, {
        'use-algo': 'sliding-window-algo',
        'max-requests': 3,
        'window-size': 60,
        'shadow-mode': false,
        'deny-list': ['10.0.0.0/8'],
        'allow-list': [],
        overrides: {},
      })
      assert.equal(config.policies.api['sync-rate'], 0.5)
      assert.deepEqual(config.policies.api.overrides, { 'partner-1': { 'max-requests': 500 } })
      assert.equal(config.envoy['use-algo'], 'fixed-window-algo')
      assert.equal(config['forward-auth']['key-header'], 'x-real-ip')
      assert.equal(body.source, t.file)
    } finally {
      await t.close()
    }
  })

  it('a refused reload shows its error while the config in force stays the old one', async () => {
    const t = await startTestService(memory(5))
    try {
      let { body } = await readConfig(t.url)
      assert.equal(body.lastReload, null, 'no reload yet')
      assert.equal(body.version, (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string }).version)

      t.write(memory(7))
      assert.equal(await t.service.reload(), true)
      ;({ body } = await readConfig(t.url))
      assert.equal(body.config['rate-limiter']['max-requests'], 7)
      assert.equal(body.lastReload.ok, true)
      assert.equal(body.lastReload.source, 'api')
      assert.equal(body.lastReload.error, undefined)
      const applied = Date.parse(body.lastReload.at as string)

      t.write(memory(9).replace('max-requests: 9', 'max-requests: "ten"'))
      assert.equal(await t.service.reload('SIGHUP'), false)
      ;({ body } = await readConfig(t.url))
      assert.equal(body.lastReload.ok, false)
      assert.equal(body.lastReload.source, 'signal')
      assert.equal(body.lastReload.trigger, 'SIGHUP')
      assert.match(body.lastReload.error as string, /rate-limiter\.max-requests: must be an integer/)
      assert.ok(Date.parse(body.lastReload.at as string) >= applied)
      assert.equal(body.config['rate-limiter']['max-requests'], 7, 'the config in force is the one applied before')
    } finally {
      await t.close()
    }
  })

  it('a reload by the file watch is recorded as such', async () => {
    const t = await startTestService(memory(5), { watch: true, watchDebounceMs: 20 })
    try {
      t.write(`${memory(5)}unknown-key: 1\n`)
      let last: Record<string, any> = {}
      await until(async () => (last = (await readConfig(t.url)).body.lastReload ?? {}).at !== undefined, 5000, 'the watch reloads')
      assert.equal(last.source, 'watch')
      assert.equal(last.trigger, 'file change')
      assert.equal(last.ok, false)
      assert.match(last.error as string, /unknown-key: unknown key/)
    } finally {
      await t.close()
    }
  })

  it('lists the Envoy domains and their rules as the domain files write them', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'rl-config-route-'))
    mkdirSync(path.join(dir, 'domains'))
    writeFileSync(
      path.join(dir, 'domains', 'edge.yaml'),
      `domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: minute, requests_per_unit: 3 }
  - key: path
    value: /login
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 1, algorithm: sliding-window-algo }
  - key: tier
    value: internal
    rate_limit: { unlimited: true }
  - key: api_key
    descriptors:
      - key: method
        value: POST
        rate_limit: { name: post_limit, unit: hour, requests_per_unit: 2, algorithm: sliding-window-counter-algo, sync_rate: 0.5 }
`,
    )
    writeFileSync(path.join(dir, 'domains', 'quiet.yaml'), 'domain: quiet\ndescriptors:\n  - key: anything\n')
    const t = await startTestService(`${memory(5)}envoy: { domains: ${path.join(dir, 'domains')} }\n`)
    try {
      const { body } = await readConfig(t.url)
      const file = path.join(dir, 'domains', 'edge.yaml')
      assert.deepEqual(body.domainFiles, [file, path.join(dir, 'domains', 'quiet.yaml')])
      assert.equal(body.config.envoy.domains, path.join(dir, 'domains'))
      assert.deepEqual(
        body.domains.map((d: { domain: string }) => d.domain),
        ['edge', 'quiet'],
      )
      assert.deepEqual(body.domains[1].rules, [], 'a domain without a limit has no rules')
      assert.deepEqual(body.domains[0].rules, [
        {
          file,
          path: 'descriptors.0',
          stats_key: 'edge.remote_address',
          entries: [{ key: 'remote_address' }],
          rate_limit: { unit: 'minute', requests_per_unit: 3, algorithm: 'fixed-window-algo' },
          shadow_mode: false,
          quota_mode: false,
        },
        {
          file,
          path: 'descriptors.1',
          stats_key: 'edge.path_/login',
          entries: [{ key: 'path', value: '/login' }],
          rate_limit: { unit: 'second', requests_per_unit: 1, algorithm: 'sliding-window-algo' },
          shadow_mode: true,
          quota_mode: false,
        },
        {
          file,
          path: 'descriptors.2',
          stats_key: 'edge.tier_internal',
          entries: [{ key: 'tier', value: 'internal' }],
          rate_limit: { unlimited: true },
          shadow_mode: false,
          quota_mode: false,
        },
        {
          file,
          path: 'descriptors.3.descriptors.0',
          stats_key: 'edge.api_key.method_POST',
          entries: [{ key: 'api_key' }, { key: 'method', value: 'POST' }],
          rate_limit: { unit: 'hour', requests_per_unit: 2, algorithm: 'sliding-window-counter-algo', sync_rate: 0.5, name: 'post_limit' },
          shadow_mode: false,
          quota_mode: false,
        },
      ])
    } finally {
      await t.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it('needs an admin token when auth is on: 401 without a token, 403 with a client token', async () => {
    const t = await startTestService(`${memory(5)}auth: { tokens: [${CLIENT}], admin-tokens: [${ADMIN}] }\n`)
    try {
      const none = await call(`${t.url}/v1/config`)
      assert.equal(none.status, 401)
      assert.equal(none.body?.error, 'unauthorized')
      assert.equal(none.headers.get('www-authenticate'), 'Bearer realm="ratelimiting"')
      assert.equal((await call(`${t.url}/v1/config`, { headers: auth('wrong-token-0000') })).status, 401)
      const client = await call(`${t.url}/v1/config`, { headers: auth(CLIENT) })
      assert.equal(client.status, 403)
      assert.deepEqual(client.body, { error: 'forbidden', message: 'reading the config needs an admin token' })
      assert.equal((await call(`${t.url}/v1/config`, { headers: auth(ADMIN) })).status, 200)
      const post = await call(`${t.url}/v1/config`, { method: 'POST', headers: auth(ADMIN) })
      assert.equal(post.status, 405)
      assert.equal(post.headers.get('allow'), 'GET')
    } finally {
      await t.close()
    }
  })
})
