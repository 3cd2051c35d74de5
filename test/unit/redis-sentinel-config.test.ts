import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { ConfigFileError, parseConfig } from '../../src/server/config.js'
import { sentinelAddress } from '../../src/server/config-sentinels.js'
import { storeSignature } from '../../src/server/stores.js'
import { RedisStrategy } from '../../src/strategies/redis/index.js'

function issuesOf(text: string, env = {}): string[] {
  try {
    parseConfig(text, 'rl.yaml', env)
  } catch (err) {
    assert.ok(err instanceof ConfigFileError, `expected a ConfigFileError, got ${String(err)}`)
    return err.message.split('\n')
  }
  assert.fail('the config was accepted')
}

const SENTINELS = 'sentinels: ["127.0.0.1:26379", "[::1]:26380", "sentinel-3"], master-name: mymaster'

describe('service config: Redis Sentinel', () => {
  it('takes sentinels, master-name and the two passwords', () => {
    const c = parseConfig(`store: { type: redis, ${SENTINELS}, password: "data-pw", sentinel-password: "sentinel-pw" }\n`, 'rl.yaml')
    assert.deepEqual(c.store.sentinels, ['127.0.0.1:26379', '[::1]:26380', 'sentinel-3'])
    assert.equal(c.store.masterName, 'mymaster')
    assert.equal(c.store.password, 'data-pw')
    assert.equal(c.store.sentinelPassword, 'sentinel-pw')
    assert.equal(c.store.url, undefined)
    // batch-across-slots: a Sentinel-managed master is one server
    assert.equal(parseConfig(`store: { type: redis, ${SENTINELS}, batch-across-slots: true }\n`, 'rl.yaml').store.batchAcrossSlots, true)
  })

  it('parses a Sentinel address as host:port, 26379 when left out, IPv6 in brackets', () => {
    assert.deepEqual(sentinelAddress('127.0.0.1:26380'), { host: '127.0.0.1', port: 26380 })
    assert.deepEqual(sentinelAddress('sentinel-1'), { host: 'sentinel-1', port: 26379 })
    assert.deepEqual(sentinelAddress('[::1]:5000'), { host: '::1', port: 5000 })
    for (const bad of ['127.0.0.1:26379,', 'h:0', 'h:70000', 'redis://h:1', 'user@h:1', 'h:1/x', ':26379', ''])
      assert.equal(sentinelAddress(bad), undefined, bad)
  })

  it('refuses sentinels without master-name, with url or nodes, and malformed addresses, naming the field', () => {
    assert.deepEqual(issuesOf('store: { type: redis, sentinels: ["127.0.0.1:26379"] }\n'), [
      'rl.yaml:1:1: store.master-name: is required with store.sentinels: the name the Sentinels monitor the master under (sentinel monitor <name> …)',
    ])
    assert.match(
      issuesOf(`store: { type: redis, url: "redis://127.0.0.1:6379", ${SENTINELS} }\n`).join('\n'),
      /store\.sentinels: give either url \(one server\) or sentinels \(Redis Sentinel\), not both/,
    )
    assert.match(
      issuesOf(`store: { type: redis, nodes: ["127.0.0.1:7000"], ${SENTINELS} }\n`).join('\n'),
      /store\.sentinels: give either nodes \(a Redis Cluster\) or sentinels \(Redis Sentinel\), not both/,
    )
    assert.deepEqual(issuesOf('store: { type: redis, sentinels: ["127.0.0.1:26379", "127.0.0.1:26380,"], master-name: m }\n'), [
      'rl.yaml:1:54: store.sentinels.1: must be host:port (a Sentinel; port 26379 when left out), got "127.0.0.1:26380,"',
    ])
    assert.match(issuesOf('store: { type: redis, sentinels: [], master-name: m }\n').join('\n'), /store\.sentinels: /)
    assert.match(
      issuesOf('store: { type: redis, sentinels: ["h:1"], master-name: "my master" }\n').join('\n'),
      /store\.master-name: must match/,
    )
  })

  it('refuses master-name and the passwords without sentinels, and the Sentinel keys on other stores', () => {
    const lines = issuesOf('store: { type: redis, url: "redis://127.0.0.1:6379", master-name: m, password: pw, sentinel-password: spw }\n')
    assert.deepEqual(
      lines.map((l) => l.replace(/^rl\.yaml:\d+:\d+: /, '')),
      [
        'store.master-name: is for store.sentinels (Redis Sentinel)',
        'store.password: is for store.sentinels (Redis Sentinel); with store.url, write the password in the URL (redis://:password@host:port)',
        'store.sentinel-password: is for store.sentinels (Redis Sentinel); with store.url, write the password in the URL (redis://:password@host:port)',
      ],
    )
    assert.match(
      issuesOf('store: { type: memcached, servers: ["127.0.0.1:11211"], sentinels: ["h:1"] }\n').join('\n'),
      /store\.sentinels: is not used by store type memcached/,
    )
  })

  it('keeps a password out of its error message', () => {
    const lines = issuesOf(`store: { type: redis, ${SENTINELS}, password: 12345678, sentinel-password: "" }\n`)
    assert.deepEqual(
      lines.map((l) => l.replace(/^rl\.yaml:\d+:\d+: /, '')),
      [
        'store.password: must be a non-empty string (quote it in YAML if it looks like a number)',
        'store.sentinel-password: must be a non-empty string (quote it in YAML if it looks like a number)',
      ],
    )
  })

  it('takes the passwords from the environment, for redis only', () => {
    const env = { RATELIMITING_STORE_PASSWORD: 'from-env', RATELIMITING_STORE_SENTINEL_PASSWORD: 'sentinel-env' }
    const c = parseConfig(`store: { type: redis, ${SENTINELS}, password: in-file }\n`, 'rl.yaml', env)
    assert.equal(c.store.password, 'from-env')
    assert.equal(c.store.sentinelPassword, 'sentinel-env')
    assert.equal(parseConfig('store: { type: memory }\n', 'rl.yaml', env).store.password, undefined)
    // a URL store has its password in the URL: the variable is refused there, not ignored
    assert.match(
      issuesOf('store: { type: redis, url: "redis://127.0.0.1:6379" }\n', { RATELIMITING_STORE_PASSWORD: 'x' }).join('\n'),
      /store\.password: is for store\.sentinels/,
    )
    // RATELIMITING_STORE_URL sets url, which a Sentinel section cannot have
    assert.match(
      issuesOf(`store: { type: redis, ${SENTINELS} }\n`, { RATELIMITING_STORE_URL: 'redis://127.0.0.1:6379' }).join('\n'),
      /store\.sentinels: give either url/,
    )
  })

  it('opens new connections when a Sentinel key or password changes, and keeps passwords out of the signature', () => {
    const store = (extra: string) => parseConfig(`store: { type: redis, ${SENTINELS}${extra} }\n`, 'rl.yaml').store
    const base = storeSignature(store(', password: "secret-1"'), 'p')
    assert.equal(storeSignature(store(', password: "secret-1"'), 'p'), base)
    assert.notEqual(storeSignature(store(', password: "secret-2"'), 'p'), base)
    assert.notEqual(storeSignature(store(', password: "secret-1", sentinel-password: "s"'), 'p'), base)
    assert.ok(!base.includes('secret-1'))
  })
})

describe('RedisStrategy: Sentinel options', () => {
  const refused = (options: Record<string, unknown>, message: RegExp) =>
    assert.throws(
      () => new RedisStrategy(options as never),
      (err: Error & { code?: string }) => {
        assert.equal(err.code, 'INVALID_OPTION')
        assert.match(err.message, message)
        return true
      },
    )

  it('refuses sentinels without name, with url or client, and malformed addresses', () => {
    const sentinels = [{ host: '127.0.0.1', port: 26379 }]
    refused({ sentinels }, /redis: sentinels need name/)
    refused({ sentinels, name: 'm', url: 'redis://127.0.0.1:6379' }, /give one of client, url or sentinels/)
    refused({ sentinels: [], name: 'm' }, /sentinels must be a non-empty array/)
    refused({ sentinels: [{ host: '127.0.0.1' }], name: 'm' }, /sentinels\[0\] must be \{ host, port \}/)
    refused({ sentinels: [{ host: '', port: 1 }], name: 'm' }, /sentinels\[0\]/)
    refused({ sentinels: ['127.0.0.1:26379'], name: 'm' }, /sentinels\[0\]/)
  })

  it('refuses name and the passwords without sentinels, and keeps the passwords out of the messages', () => {
    refused({ url: 'redis://127.0.0.1:6379', name: 'm' }, /name is the master's name for sentinels/)
    refused({ url: 'redis://127.0.0.1:6379', password: 'pw' }, /password is for sentinels; with url write the password in the URL/)
    refused({ url: 'redis://127.0.0.1:6379', sentinelPassword: 'pw' }, /sentinelPassword is for sentinels/)
    refused({ sentinels: [{ host: 'h', port: 1 }], name: 'm', password: 1234 }, /^redis: password must be a non-empty string$/)
  })
})
