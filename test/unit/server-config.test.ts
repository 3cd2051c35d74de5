import assert from 'node:assert/strict'
import path from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { ConfigFileError, defaultConfig, loadConfigFile, parseConfig } from '../../src/server/config.js'
import { loadStoreModule, StoreStartError } from '../../src/server/stores.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

function issuesOf(text: string, env = {}): string[] {
  try {
    parseConfig(text, 'rl.yaml', env)
  } catch (err) {
    assert.ok(err instanceof ConfigFileError, `expected a ConfigFileError, got ${String(err)}`)
    return err.message.split('\n')
  }
  assert.fail('the config was accepted')
}

describe('service config', () => {
  it('has a built-in default: memory store, sliding-window-algo, 100 per 60 s on 127.0.0.1:8080', () => {
    const c = defaultConfig()
    assert.equal(c.server.host, '127.0.0.1')
    assert.equal(c.server.port, 8080)
    assert.equal(c.store.type, 'memory')
    assert.deepEqual(c.policies.get('default'), {
      name: 'default',
      algo: 'sliding-window-algo',
      maxRequests: 100,
      windowSize: 60,
      syncRate: -1,
      escrow: false,
      onStoreError: 'error',
      shadowMode: false,
      denyList: [],
      allowList: [],
      overrides: new Map(),
    })
    assert.equal(c.keyPrefix, 'rlaas:rate_limit')
    assert.equal(c.onStoreError, 'error')
    assert.equal(c.auth, undefined)
  })

  it('ships examples/ratelimiting.yaml equal to the built-in default', async () => {
    const file = path.join(root, 'examples/ratelimiting.yaml')
    const fromFile = await loadConfigFile(file)
    assert.deepEqual({ ...fromFile, source: '' }, { ...defaultConfig(), source: '' })
  })

  it('reads the seed property names and named policies that inherit the rest', () => {
    const c = parseConfig(
      [
        'rate-limiter:',
        '  use-algo: fixed-window-algo',
        '  max-requests: 10',
        '  window-size: 30',
        'policies:',
        '  login: { max-requests: 5 }',
        '  bulk: { use-algo: sliding-window-counter-algo, window-size: 3600, sync-rate: 0.5 }',
        'store: { type: redis, url: "redis://127.0.0.1:6379" }',
      ].join('\n'),
      'rl.yaml',
    )
    assert.deepEqual([...c.policies.keys()], ['default', 'login', 'bulk'])
    assert.deepEqual(c.policies.get('login'), {
      name: 'login',
      algo: 'fixed-window-algo',
      maxRequests: 5,
      windowSize: 30,
      syncRate: 0.1,
      escrow: false,
      onStoreError: 'error',
      shadowMode: false,
      denyList: [],
      allowList: [],
      overrides: new Map(),
    })
    assert.deepEqual(c.policies.get('bulk'), {
      name: 'bulk',
      algo: 'sliding-window-counter-algo',
      maxRequests: 10,
      windowSize: 3600,
      syncRate: 0.5,
      escrow: false,
      onStoreError: 'error',
      shadowMode: false,
      denyList: [],
      allowList: [],
      overrides: new Map(),
    })
  })

  it('names the file, line, key path and reason of an unknown key', () => {
    const [line] = issuesOf('rate-limiter:\n  use-algo: fixed-window-algo\n  max-request: 5\nstore: { type: memory }\n')
    assert.match(line as string, /^rl\.yaml:3:3: rate-limiter\.max-request: unknown key; expected one of use-algo, max-requests/)
  })

  it('names a wrong type with the value it got', () => {
    const [line] = issuesOf('rate-limiter:\n  window-size: "60s"\nstore: { type: memory }\n')
    assert.equal(line, 'rl.yaml:2:3: rate-limiter.window-size: must be an integer, got "60s"')
  })

  it('names an unknown algorithm with the accepted ones', () => {
    const [line] = issuesOf('rate-limiter:\n  use-algo: token-bucket\nstore: { type: memory }\n')
    assert.equal(
      line,
      'rl.yaml:2:3: rate-limiter.use-algo: must be one of fixed-window-algo, sliding-window-algo, sliding-window-counter-algo, got "token-bucket"',
    )
  })

  it('lists every problem, not only the first', () => {
    const lines = issuesOf('server: { port: 70000 }\nrate-limiter: { max-requests: 0 }\nstore: { type: redis }\n')
    assert.equal(lines.length, 3, lines.join('\n'))
    assert.ok(lines.some((l) => l.includes('server.port: must be <= 65535, got 70000')))
    assert.ok(lines.some((l) => l.includes('rate-limiter.max-requests: must be >= 1, got 0')))
    assert.ok(lines.some((l) => l.includes('store.url: is required for store type redis')))
  })

  it('refuses the seed algorithms on a store that cannot run them', () => {
    const [line] = issuesOf('rate-limiter: { use-algo: fixed-window-algo }\nstore: { type: postgres, url: "postgres://localhost/db" }\n')
    assert.match(
      line as string,
      /rate-limiter\.use-algo: fixed-window-algo keeps its counters in redis or memory, but store\.type is postgres/,
    )
  })

  it('refuses invalid YAML with its position', () => {
    const [line] = issuesOf('rate-limiter:\n  use-algo: [unclosed\n')
    assert.match(line as string, /^rl\.yaml:\d+:\d+: invalid YAML/)
  })

  it('refuses a document that is not a mapping', () => {
    assert.match(issuesOf('- a\n- b\n')[0] as string, /the document must be a mapping of sections, got a list/)
  })

  it('refuses a policy named default and bad policy names', () => {
    assert.match(
      issuesOf('policies:\n  default: { max-requests: 1 }\nstore: { type: memory }\n')[0] as string,
      /policies\.default: the default policy is the rate-limiter section/,
    )
    assert.match(
      issuesOf('policies:\n  "bad name": { max-requests: 1 }\nstore: { type: memory }\n')[0] as string,
      /rl\.yaml:2:3: policies\.bad name: is not a valid policy name/,
    )
  })

  it('reports a bad policy name once, by name, never as "must match undefined"', () => {
    const lines = issuesOf('policies:\n  "a:b": { max-requests: 1 }\nstore: { type: memory }\n')
    assert.deepEqual(lines, [
      'rl.yaml:2:3: policies.a:b: is not a valid policy name: use letters, digits, "_", "." and "-", at most 64, starting with a letter or digit',
    ])
  })

  it('refuses store addresses that serve could not open', () => {
    assert.deepEqual(issuesOf('store: { type: redis, url: "redis://127.0.0.1:7490," }\n'), [
      'rl.yaml:1:23: store.url: must be a redis:// or rediss:// URL, got "redis://127.0.0.1:7490,", which is not a valid URL',
    ])
    assert.match(
      issuesOf('store: { type: redis }\n', { RATELIMITING_STORE_URL: 'redis://127.0.0.1:7490,' })[0] as string,
      /store\.url: must be a redis/,
    )
    assert.match(
      issuesOf('store: { type: redis, nodes: ["127.0.0.1:7101", "127.0.0.1:7102,"] }\n')[0] as string,
      /store\.nodes\.1: must be host:port or a redis:\/\/ URL, got "127\.0\.0\.1:7102,"/,
    )
    assert.match(
      issuesOf(
        'rate-limiter: { use-algo: sliding-window-counter-algo }\nstore: { type: memcached, servers: ["localhost"] }\n',
      )[0] as string,
      /store\.servers\.0: must be host:port, got "localhost"/,
    )
    const ok = parseConfig('store: { type: redis, nodes: ["127.0.0.1:7101", "redis://127.0.0.1:7102", "localhost"] }\n', 'rl.yaml')
    assert.equal(ok.store.nodes?.length, 3)
  })

  it('takes remember-denials on Redis, on unless set to false', () => {
    const redis = 'store: { type: redis, url: "redis://127.0.0.1:6379"'
    assert.equal(parseConfig(`${redis} }\n`, 'rl.yaml').store.rememberDenials, undefined)
    assert.equal(parseConfig(`${redis}, remember-denials: false }\n`, 'rl.yaml').store.rememberDenials, false)
    assert.equal(parseConfig(`${redis}, remember-denials: true }\n`, 'rl.yaml').store.rememberDenials, undefined)
    assert.match(
      issuesOf('store: { type: memory, remember-denials: false }\n')[0] as string,
      /store\.remember-denials: is not used by store type memory/,
    )
    assert.match(issuesOf(`${redis}, remember-denials: "no" }\n`).join('\n'), /remember-denials/)
  })

  it('takes batch-across-slots for one Redis server only', () => {
    const one = parseConfig('store: { type: redis, url: "redis://127.0.0.1:6379", batch-across-slots: true }\n', 'rl.yaml')
    assert.equal(one.store.batchAcrossSlots, true)
    // on by default with one server, off with a cluster, and an explicit false kept
    assert.equal(parseConfig('store: { type: redis, url: "redis://127.0.0.1:6379" }\n', 'rl.yaml').store.batchAcrossSlots, true)
    assert.equal(parseConfig('store: { type: redis, nodes: ["127.0.0.1:7101"] }\n', 'rl.yaml').store.batchAcrossSlots, false)
    const off = parseConfig('store: { type: redis, url: "redis://127.0.0.1:6379", batch-across-slots: false }\n', 'rl.yaml')
    assert.equal(off.store.batchAcrossSlots, false)
    assert.equal(parseConfig('store: { type: memory }\n', 'rl.yaml').store.batchAcrossSlots, undefined)
    assert.match(
      issuesOf('store: { type: redis, nodes: ["127.0.0.1:7101"], batch-across-slots: true }\n')[0] as string,
      /store\.batch-across-slots: is for one Redis server \(url\); a cluster needs one call per slot/,
    )
    assert.match(
      issuesOf('store: { type: memory, batch-across-slots: true }\n')[0] as string,
      /store\.batch-across-slots: is not used by store type memory/,
    )
    assert.match(
      issuesOf('store: { type: redis, url: "redis://127.0.0.1:6379", batch-across-slots: "yes" }\n').join('\n'),
      /batch-across-slots/,
    )
  })

  it('refuses an empty file and a file without store: they are not a config', () => {
    for (const text of ['', '# nothing yet\n', 'rate-limiter: { max-requests: 5 }\n']) {
      const lines = issuesOf(text)
      assert.equal(lines.length, 1, lines.join('\n'))
      assert.match(lines[0] as string, /store: is required: say where counters live, such as store: \{ type: memory \}/)
    }
  })

  it('refuses a sync rate between 0 and 1 ms', () => {
    const [line] = issuesOf('rate-limiter: { use-algo: sliding-window-counter-algo, sync-rate: 0.0001 }\nstore: { type: memory }\n')
    assert.match(line as string, /rate-limiter\.sync-rate: must be 0 \(every hit\), < 0 \(local only\) or at least 0\.001 s/)
  })

  it('refuses short tokens', () => {
    assert.match(
      issuesOf('auth: { tokens: [abc] }\nstore: { type: memory }\n')[0] as string,
      /auth\.tokens\.0: must NOT have fewer than 8 characters/,
    )
  })

  it('refuses tokens no request can present: surrounding whitespace, control or non-ASCII characters', () => {
    const lines = issuesOf(
      'auth: { tokens: ["spaced-token  ", "tökén-1234", "tab\\tinside"], admin-tokens: [" admin-token"] }\nstore: { type: memory }\n',
    )
    assert.deepEqual(
      lines.map((l) => /: (auth\.[\w-]+\.\d): must be visible ASCII characters \(spaces only between them\)/.exec(l)?.[1]),
      ['auth.tokens.0', 'auth.tokens.1', 'auth.tokens.2', 'auth.admin-tokens.0'],
    )
    assert.ok(!lines.join('\n').includes('spaced-token'), 'the tokens stay out of the message')
    assert.deepEqual(issuesOf('store: { type: memory }\n', { RATELIMITING_AUTH_TOKENS: 'client-token-1,tökén-1234' }).length, 1)
    assert.deepEqual(parseConfig('auth: { tokens: ["inner spaces ok"] }\nstore: { type: memory }\n', 'rl.yaml', {}).auth?.tokens, [
      'inner spaces ok',
    ])
  })

  it('takes the store URL and tokens from the environment', () => {
    const text = 'store: { type: redis, url: "redis://example.invalid:6379" }\n'
    const c = parseConfig(text, 'rl.yaml', {
      RATELIMITING_STORE_URL: 'redis://127.0.0.1:6380',
      RATELIMITING_AUTH_TOKENS: 'client-token-1, client-token-2',
      RATELIMITING_ADMIN_TOKENS: 'admin-token-1',
    })
    assert.equal(c.store.url, 'redis://127.0.0.1:6380')
    assert.deepEqual(c.auth, {
      tokens: ['client-token-1', 'client-token-2'],
      adminTokens: ['admin-token-1'],
    })
    const mc = parseConfig('rate-limiter: { use-algo: sliding-window-counter-algo }\nstore: { type: memcached }\n', 'rl.yaml', {
      RATELIMITING_STORE_URL: '127.0.0.1:11211,127.0.0.1:11212',
    })
    assert.deepEqual(mc.store.servers, ['127.0.0.1:11211', '127.0.0.1:11212'])
    const cluster = parseConfig('store: { type: redis }\n', 'rl.yaml', {
      RATELIMITING_STORE_URL: '127.0.0.1:7000,127.0.0.1:7001',
    })
    assert.deepEqual(cluster.store.nodes, ['127.0.0.1:7000', '127.0.0.1:7001'])
  })

  it('ignores the store URL variable for the memory store', () => {
    assert.equal(
      parseConfig('store: { type: memory }\n', 'rl.yaml', {
        RATELIMITING_STORE_URL: 'redis://x:1',
      }).store.url,
      undefined,
    )
  })

  it('reads per-user overrides per policy: not inherited, with overrides-refresh', () => {
    const c = parseConfig(
      [
        'rate-limiter:',
        '  max-requests: 100',
        '  overrides-refresh: 0.25',
        '  overrides:',
        '    user-42: { max-requests: 1000 }',
        '    "team/7": { max-requests: 5 }',
        '    12: { max-requests: 1 }',
        'policies:',
        '  login: { max-requests: 5 }',
        '  api: { overrides: { user-42: { max-requests: 50 } } }',
        'store: { type: memory }',
      ].join('\n'),
      'rl.yaml',
    )
    assert.deepEqual(
      c.policies.get('default')?.overrides,
      new Map([
        ['12', 1],
        ['user-42', 1000],
        ['team/7', 5],
      ]),
    )
    assert.deepEqual(c.policies.get('login')?.overrides, new Map(), 'a policy does not inherit the default policy overrides')
    assert.deepEqual(c.policies.get('api')?.overrides, new Map([['user-42', 50]]))
    assert.equal(c.policies.get('api')?.maxRequests, 100)
    assert.equal(c.overridesRefresh, 0.25)
    assert.equal(defaultConfig().overridesRefresh, 1)
  })

  it('refuses overrides a request could not match or a limit out of bounds, naming the key path', () => {
    const issues = issuesOf(
      [
        'server: { max-user-id-length: 8 }',
        'rate-limiter:',
        '  overrides-refresh: 0',
        '  overrides:',
        '    ok: { max-requests: 0 }',
        '    "a\\u0001b": { max-requests: 5 }',
        '    much-too-long: { max-requests: 5 }',
        '    nolimit: {}',
        '    typo: { max-request: 5 }',
        '    bare: 5',
        'policies:',
        '  api: { overrides: { u1: { max-requests: 1000000001 } } }',
        'store: { type: memory }',
      ].join('\n'),
    )
    const expected = [
      /^rl\.yaml:3:3: rate-limiter\.overrides-refresh: must be >= 0\.01, got 0$/,
      /^rl\.yaml:5:11: rate-limiter\.overrides\.ok\.max-requests: must be >= 1, got 0$/,
      // eslint-disable-next-line no-control-regex -- the id holds one
      /^rl\.yaml:6:5: rate-limiter\.overrides\.a\u0001b: the user id must not contain control characters$/,
      /^rl\.yaml:7:5: rate-limiter\.overrides\.much-too-long: the user id must be at most 8 characters, got 13$/,
      /^rl\.yaml:8:5: rate-limiter\.overrides\.nolimit\.max-requests: is required$/,
      /^rl\.yaml:9:13: rate-limiter\.overrides\.typo\.max-request: unknown key; expected one of max-requests$/,
      /^rl\.yaml:10:5: rate-limiter\.overrides\.bare: must be a mapping, got 5$/,
      /^rl\.yaml:12:\d+: policies\.api\.overrides\.u1\.max-requests: must be <= 1000000000, got 1000000001$/,
    ]
    for (const re of expected)
      assert.ok(
        issues.some((i) => re.test(i)),
        `${re} in\n${issues.join('\n')}`,
      )
  })

  it('says a missing file is missing', async () => {
    await assert.rejects(loadConfigFile(path.join(root, 'no-such-config.yaml')), /no-such-config\.yaml: file not found/)
  })

  it('names a store module that is not in the build', async () => {
    await assert.rejects(
      loadStoreModule('../strategies/no-such-store/index.js', 'cassandra'),
      (err: unknown) => err instanceof StoreStartError && /store type cassandra is not available in this build/.test(err.message),
    )
  })
})
