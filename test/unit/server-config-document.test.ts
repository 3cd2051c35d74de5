/* eslint-disable @typescript-eslint/no-explicit-any -- the document is JSON, read field by field */
/**
 * The document GET /v1/config answers (src/server/config-document.ts): the config file's shape,
 * so it parses back to the same config, and no secret left in it.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { type ServiceConfig, parseConfig } from '../../src/server/config.js'
import { configDocument, REDACTED, redactUrl } from '../../src/server/config-document.js'

describe('redactUrl', () => {
  const cases: Array<[string, string]> = [
    ['redis://app:hunter2@127.0.0.1:6379/2', 'redis://<redacted>@127.0.0.1:6379/2'],
    ['redis://:hunter2@redis.internal:6379', 'redis://<redacted>@redis.internal:6379'],
    ['rediss://default:p%40ss@[::1]:6380/0', 'rediss://<redacted>@[::1]:6380/0'],
    ['redis://127.0.0.1:6379/0', 'redis://127.0.0.1:6379/0'],
    // several hosts, and a password as a query parameter
    [
      'postgres://app:pw@db1:5432,db2:5432/rl?sslmode=require&password=pw2#x',
      'postgres://<redacted>@db1:5432,db2:5432/rl?sslmode=require&password=<redacted>#x',
    ],
    ['postgres://db:5432/rl?sslpassword=k&application_name=rl', 'postgres://db:5432/rl?sslpassword=<redacted>&application_name=rl'],
    // unencoded '/', '?' and '@' in a password: everything up to the last '@' goes
    ['postgres://app:pa/ss@db/rl', 'postgres://<redacted>@db/rl'],
    ['postgres://app:pa?ss@db/rl', 'postgres://<redacted>@db/rl'],
    ['redis://app:p@ss@127.0.0.1:6379', 'redis://<redacted>@127.0.0.1:6379'],
    // no scheme: memcached servers, cluster nodes
    ['user:pw@10.0.0.1:11211', '<redacted>@10.0.0.1:11211'],
    ['10.0.0.1:11211', '10.0.0.1:11211'],
  ]
  for (const [url, redacted] of cases)
    it(`${url} → ${redacted}`, () => {
      assert.equal(redactUrl(url), redacted)
    })
})

describe('configDocument', () => {
  const text = `log-level: warn
key-normalization: none
server: { host: 127.0.0.1, port: 9090, max-body-bytes: 4096, headers: draft-7, headers-timeout-ms: 2000, request-timeout-ms: 4000, max-connections: 50 }
rate-limiter:
  use-algo: fixed-window-algo
  max-requests: 10
  window-size: 30
  key-prefix: app:rl
  hash-tag: true
  on-store-error: allow
  overrides-refresh: 5
  deny-list: [203.0.113.0/24, scraper-7]
  overrides: { user-42: { max-requests: 1000 } }
policies:
  login: { use-algo: sliding-window-algo, max-requests: 5, allow-list: [] , shadow-mode: true }
  api: { use-algo: sliding-window-counter-algo, max-requests: 500, window-size: 3600, sync-rate: 0.5, overrides: { p1: { max-requests: 9 } } }
store: { type: redis, url: "redis://127.0.0.1:6379/1", timeout-ms: 300, remember-denials: false, batch-across-slots: true }
shadow-mode: false
envoy: { use-algo: sliding-window-algo, response-headers: x-ratelimit, near-limit-ratio: 0.5, max-descriptors: 8 }
forward-auth: { key-header: X-Client, key-entry: first, denied-status: 429 }
`

  it('is the config file of the same config: parsed back, it is equal', () => {
    const config = parseConfig(text, '/etc/rl/ratelimiting.yaml')
    const doc = configDocument(config)
    // JSON is YAML
    assert.deepEqual(parseConfig(JSON.stringify(doc), '/etc/rl/ratelimiting.yaml'), config)
    const minimal = parseConfig('store: { type: memory }\n', '/etc/rl/minimal.yaml')
    assert.deepEqual(parseConfig(JSON.stringify(configDocument(minimal)), '/etc/rl/minimal.yaml'), minimal)
  })

  it('shows what the service applies over the file: the ports it got and --log-level', () => {
    const config = parseConfig(
      `${text}grpc: { port: 0 }\nenvoy: { domains: /etc/rl/domains }\n`.replace(/^envoy: \{ use-algo.*\n/m, ''),
      'x.yaml',
    )
    const doc = configDocument(config, { host: '0.0.0.0', port: 41234, logLevel: 'debug', grpcPort: 41235 }) as Record<string, any>
    assert.equal(doc.server.host, '0.0.0.0')
    assert.equal(doc.server.port, 41234)
    assert.equal(doc['log-level'], 'debug')
    assert.equal(doc.grpc.port, 41235)
    assert.equal(doc.grpc['max-concurrent-streams'], 1000)
    assert.equal(doc.envoy.domains, '/etc/rl/domains')
  })

  it('redacts tokens, password-like keys and the credentials of every string of the store section', () => {
    const config = parseConfig(
      `store: { type: redis, url: "redis://app:pw-1@10.0.0.5:6379/2" }\nauth: { tokens: [client-token-1, client-token-2], admin-tokens: [] }\n`,
      'x.yaml',
    )
    // store options another version may add (Sentinel, TLS): a password field, URLs and host lists
    const withMore = {
      ...config,
      store: {
        ...config.store,
        sentinelPassword: 'pw-2',
        sentinels: ['u:pw-3@10.0.0.6:26379', '10.0.0.7:26379'],
        tls: { passphrase: 'pw-4' },
      },
    } as unknown as ServiceConfig
    const doc = configDocument(withMore) as Record<string, any>
    const text = JSON.stringify(doc)
    for (const secret of ['pw-1', 'pw-2', 'pw-3', 'pw-4', 'client-token']) assert.ok(!text.includes(secret), `${secret} in ${text}`)
    assert.equal(doc.store.url, 'redis://<redacted>@10.0.0.5:6379/2')
    assert.equal(doc.store['sentinel-password'], REDACTED)
    assert.deepEqual(doc.store.sentinels, ['<redacted>@10.0.0.6:26379', '10.0.0.7:26379'])
    assert.deepEqual(doc.store.tls, { passphrase: REDACTED })
    assert.deepEqual(doc.auth, { tokens: [REDACTED, REDACTED], 'admin-tokens': [] })
    // ids are not secrets: a deny list entry with an @ stays as it is
    const lists = configDocument(
      parseConfig('rate-limiter: { deny-list: [a@example.com] }\nstore: { type: memory }\n', 'x.yaml'),
    ) as Record<string, any>
    assert.deepEqual(lists['rate-limiter']['deny-list'], ['a@example.com'])
  })
})
