/**
 * The gateway keys of the service config: shadow mode (per policy, global, from the
 * environment), the grpc listener, the envoy section and forward-auth.
 */
import assert from 'node:assert/strict'
import path from 'node:path'
import { describe, it } from 'node:test'
import { parseConfig } from '../../src/server/config.js'

const memory = 'store: { type: memory }\n'

describe('service config: gateway keys', () => {
  it('shadow-mode is off by default, inherited from rate-limiter by named policies, and global when set at the top', () => {
    const off = parseConfig(memory, 'rl.yaml')
    assert.equal(off.gateway.shadowMode, false)
    assert.equal(off.policies.get('default')?.shadowMode, false)
    const c = parseConfig(
      `${memory}rate-limiter: { shadow-mode: true }\npolicies:\n  login: {}\n  api: { shadow-mode: false }\n`,
      'rl.yaml',
    )
    assert.deepEqual(
      [...c.policies.values()].map((p) => [p.name, p.shadowMode]),
      [
        ['default', true],
        ['login', true],
        ['api', false],
      ],
    )
    assert.equal(parseConfig(`${memory}shadow-mode: true\n`, 'rl.yaml').gateway.shadowMode, true)
  })

  it('RATELIMITING_SHADOW_MODE turns the global shadow mode on or off; a value that is not a boolean is an error naming it', () => {
    assert.equal(parseConfig(memory, 'rl.yaml', { RATELIMITING_SHADOW_MODE: 'true' }).gateway.shadowMode, true)
    assert.equal(parseConfig(`${memory}shadow-mode: true\n`, 'rl.yaml', { RATELIMITING_SHADOW_MODE: '0' }).gateway.shadowMode, false)
    assert.equal(parseConfig(memory, 'rl.yaml', { RATELIMITING_SHADOW_MODE: 'On' }).gateway.shadowMode, true)
    assert.throws(
      () => parseConfig(memory, 'rl.yaml', { RATELIMITING_SHADOW_MODE: 'maybe' }),
      /shadow-mode: must be a boolean, got "RATELIMITING_SHADOW_MODE=maybe"/,
    )
  })

  it('grpc: off without the section, 127.0.0.1:8081 by default with it', () => {
    assert.equal(parseConfig(memory, 'rl.yaml').gateway.grpc, undefined)
    assert.deepEqual(parseConfig(`${memory}grpc: {}\n`, 'rl.yaml').gateway.grpc, {
      host: '127.0.0.1',
      port: 8081,
      maxConcurrentStreams: 1000,
      maxConnections: 10_000,
      idleTimeoutMs: 30_000,
      maxStreamResets: 100,
    })
    assert.deepEqual(
      parseConfig(`${memory}grpc: { max-connections: 50, idle-timeout-ms: 300, max-stream-resets: 20 }\n`, 'rl.yaml').gateway.grpc,
      { host: '127.0.0.1', port: 8081, maxConcurrentStreams: 1000, maxConnections: 50, idleTimeoutMs: 300, maxStreamResets: 20 },
    )
    assert.throws(
      () => parseConfig(`${memory}grpc: { prot: 1 }\n`, 'rl.yaml'),
      /grpc\.prot: unknown key; expected one of host, port, max-concurrent-streams, max-connections, idle-timeout-ms, max-stream-resets/,
    )
    assert.throws(() => parseConfig(`${memory}grpc: { idle-timeout-ms: 10 }\n`, 'rl.yaml'), /grpc\.idle-timeout-ms/)
  })

  it('envoy: domain paths are relative to the config file; rules default to the fixed window, the counter on postgres and memcached', () => {
    const c = parseConfig(`${memory}envoy: { domains: rules/ }\n`, path.join('/srv', 'rl', 'rl.yaml'))
    assert.equal(c.gateway.envoy.domains, path.resolve('/srv/rl/rules'))
    assert.equal(c.gateway.envoy.algo, 'fixed-window-algo')
    assert.equal(c.gateway.envoy.responseHeaders, 'off')
    assert.equal(c.gateway.envoy.nearLimitRatio, 0.8)
    const pg = parseConfig(
      'store: { type: postgres, url: "postgres://127.0.0.1/test" }\nrate-limiter: { use-algo: sliding-window-counter-algo }\n',
      'rl.yaml',
    )
    assert.equal(pg.gateway.envoy.algo, 'sliding-window-counter-algo')
    assert.throws(
      () => parseConfig('store: { type: memcached, servers: ["127.0.0.1:11211"] }\nenvoy: { use-algo: fixed-window-algo }\n', 'rl.yaml'),
      /envoy\.use-algo: fixed-window-algo keeps its counters in redis or memory, but store\.type is memcached/,
    )
    assert.throws(
      () => parseConfig(`${memory}grpc: {}\nenvoy: { use-algo: fixed-window-algo }\n`, 'rl.yaml'),
      /envoy\.domains: is required/,
    )
    assert.throws(
      () => parseConfig(`${memory}envoy: { response-headers: x-rate }\n`, 'rl.yaml'),
      /envoy\.response-headers: must be one of off, x-ratelimit/,
    )
  })

  it('forward-auth: x-real-ip, its last entry, 403 by default', () => {
    assert.deepEqual(parseConfig(memory, 'rl.yaml').gateway.forwardAuth, { keyHeader: 'x-real-ip', keyEntry: 'last', deniedStatus: 403 })
    const c = parseConfig(`${memory}forward-auth: { key-header: X-Api-Key, denied-status: 429, key-entry: whole }\n`, 'rl.yaml')
    assert.deepEqual(c.gateway.forwardAuth, { keyHeader: 'x-api-key', keyEntry: 'whole', deniedStatus: 429 })
  })
})
