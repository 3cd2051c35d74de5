/**
 * The service's checks of `escrow` and `on-store-error: share` (docs/SERVICE.md, "Escrow"): each
 * mistake is reported with the file, line, key path and reason, `check-config` and `serve` exit 3,
 * and a reload to such a file is refused with the running config kept. The store a policy may use
 * escrow on is read from the stores' capabilities (src/strategies/capabilities.ts), never a list.
 */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { type CliIo, EXIT, runCli } from '../../src/server/cli-main.js'
import { ConfigFileError, loadConfigFile, parseConfig } from '../../src/server/config.js'
import { STORE_TYPES } from '../../src/server/config-schema.js'
import { loadServiceDomains } from '../../src/server/gateway/envoy-service.js'
import { BUILT_IN_STORES } from '../../src/strategies/capabilities.js'
import { check, startTestService } from './server-helpers.js'

const COUNTER = 'use-algo: sliding-window-counter-algo'

/** The problems of a config, one `file:line:col: path: reason` line each; [] when it is valid. */
function issuesOf(yaml: string): string[] {
  try {
    parseConfig(yaml, 'rl.yaml')
    return []
  } catch (err) {
    if (!(err instanceof ConfigFileError)) throw err
    return err.message.split('\n')
  }
}

// a store section of each type, for the store types that do not serve escrow (whichever they are now)
const STORE_SECTIONS: Record<(typeof STORE_TYPES)[number], string> = {
  memory: 'store: { type: memory }',
  redis: 'store: { type: redis, url: "redis://127.0.0.1:6379" }',
  // the seed algorithms keep their counters in redis or memory: the default policy counts here too
  postgres: 'rate-limiter: { use-algo: sliding-window-counter-algo }\nstore: { type: postgres, url: "postgres://127.0.0.1:5432/test" }',
  memcached: 'rate-limiter: { use-algo: sliding-window-counter-algo }\nstore: { type: memcached, servers: ["127.0.0.1:11211"] }',
}
const withoutEscrow = STORE_TYPES.find((t) => !BUILT_IN_STORES[t].supportsEscrow)
const withEscrow = STORE_TYPES.filter((t) => BUILT_IN_STORES[t].supportsEscrow)

function io(): { fake: CliIo; err: () => string } {
  const err: string[] = []
  return {
    fake: { stdout: () => undefined, stderr: (t) => err.push(t), env: {}, onSignal: () => () => undefined },
    err: () => err.join(''),
  }
}

describe('escrow in the service config', () => {
  it('accepts escrow on a counter policy with a periodic sync, and on-store-error share on it', () => {
    const c = parseConfig(
      `policies:\n  api: { ${COUNTER}, sync-rate: 0.5, escrow: true, on-store-error: share }\n  login: { use-algo: fixed-window-algo }\nstore: { type: memory }\n`,
      'rl.yaml',
    )
    assert.equal(c.policies.get('api')?.escrow, true)
    assert.equal(c.policies.get('api')?.onStoreError, 'share')
    assert.equal(c.policies.get('default')?.escrow, false)
    assert.equal(c.policies.get('login')?.onStoreError, 'error')
  })

  it('inherits escrow from rate-limiter on counter policies only, as it inherits sync-rate', () => {
    const c = parseConfig(
      `rate-limiter: { ${COUNTER}, sync-rate: 1, escrow: true }\npolicies:\n  api: { max-requests: 5 }\n  login: { use-algo: fixed-window-algo }\nstore: { type: memory }\n`,
      'rl.yaml',
    )
    assert.deepEqual(
      [...c.policies.values()].map((p) => [p.name, p.escrow]),
      [
        ['default', true],
        ['api', true],
        ['login', false],
      ],
    )
  })

  it('refuses escrow on another algorithm, naming the key', () => {
    assert.deepEqual(issuesOf(`policies:\n  login: { use-algo: fixed-window-algo, escrow: true }\nstore: { type: memory }\n`), [
      'rl.yaml:2:41: policies.login.escrow: is for sliding-window-counter-algo only; fixed-window-algo decides in the store on every request',
    ])
    assert.deepEqual(issuesOf(`rate-limiter: { escrow: true }\nstore: { type: memory }\n`), [
      'rl.yaml:1:17: rate-limiter.escrow: is for sliding-window-counter-algo only; sliding-window-algo decides in the store on every request',
    ])
  })

  it('refuses escrow without a periodic sync: the memory default (local only), sync-rate 0, a negative one', () => {
    assert.deepEqual(issuesOf(`policies:\n  api: { ${COUNTER}, escrow: true }\nstore: { type: memory }\n`), [
      "rl.yaml:2:49: policies.api.escrow: escrow needs a periodic sync (sync-rate > 0), got sync-rate -1 (local only, the memory store's default)",
    ])
    assert.deepEqual(issuesOf(`policies:\n  api: { ${COUNTER}, sync-rate: 0, escrow: true }\nstore: { type: memory }\n`), [
      'rl.yaml:2:63: policies.api.escrow: escrow needs a periodic sync (sync-rate > 0), got sync-rate 0 (every hit goes to the store)',
    ])
    // inherited escrow, the policy's own sync rate: reported at the sync rate
    assert.deepEqual(
      issuesOf(`rate-limiter: { ${COUNTER}, sync-rate: 1, escrow: true }\npolicies:\n  api: { sync-rate: -1 }\nstore: { type: memory }\n`),
      ['rl.yaml:3:10: policies.api.sync-rate: escrow needs a periodic sync (sync-rate > 0), got sync-rate -1 (local only)'],
    )
  })

  it(
    'refuses escrow on a store type whose capabilities say it does not serve escrow',
    { skip: withoutEscrow === undefined && 'every built-in store has supportsEscrow: true in src/strategies/capabilities.ts' },
    () => {
      const type = withoutEscrow as (typeof STORE_TYPES)[number]
      const [line, ...rest] = issuesOf(`policies:\n  api: { ${COUNTER}, sync-rate: 1, escrow: true }\n${STORE_SECTIONS[type]}\n`)
      assert.deepEqual(rest, [])
      assert.equal(
        line,
        `rl.yaml:2:63: policies.api.escrow: is not available: store type ${type} does not serve escrow namespaces (its grants must be atomic); the store types that do: ${withEscrow.join(', ')}`,
      )
    },
  )

  it('accepts escrow on every store type whose capabilities say it serves escrow', () => {
    for (const type of withEscrow)
      assert.deepEqual(issuesOf(`policies:\n  api: { ${COUNTER}, sync-rate: 1, escrow: true }\n${STORE_SECTIONS[type]}\n`), [], type)
  })

  it('refuses on-store-error share without escrow, where it is written or where it is inherited', () => {
    assert.deepEqual(issuesOf(`policies:\n  api: { ${COUNTER}, sync-rate: 1, on-store-error: share }\nstore: { type: memory }\n`), [
      'rl.yaml:2:63: policies.api.on-store-error: share is for escrow policies only (escrow: true): each process then admits limit / n while no grant can be had; use error, allow or deny here',
    ])
    assert.deepEqual(
      issuesOf(
        `rate-limiter: { ${COUNTER}, sync-rate: 1, escrow: true, on-store-error: share }\npolicies:\n  login: { use-algo: fixed-window-algo }\nstore: { type: memory }\n`,
      ),
      [
        'rl.yaml:3:3: policies.login: inherits on-store-error: share from rate-limiter, which is for escrow policies only: give this policy escrow: true or its own on-store-error (error, allow or deny)',
      ],
    )
    // the policy's own on-store-error settles it
    assert.deepEqual(
      issuesOf(
        `rate-limiter: { ${COUNTER}, sync-rate: 1, escrow: true, on-store-error: share }\npolicies:\n  login: { use-algo: fixed-window-algo, on-store-error: deny }\nstore: { type: memory }\n`,
      ),
      [],
    )
  })
})

describe('escrow in the Envoy rules', () => {
  let dir: string
  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'rl-escrow-config-'))
  })
  after(() => rmSync(dir, { recursive: true, force: true }))

  async function ruleIssues(rule: string, envoy = ''): Promise<string[]> {
    const file = path.join(dir, `edge-${Math.random().toString(36).slice(2)}.yaml`)
    writeFileSync(
      file,
      `domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: { unit: minute, requests_per_unit: 3${rule} }\n`,
    )
    try {
      await loadServiceDomains(parseConfig(`store: { type: memory }\nenvoy: { domains: ${file}${envoy} }\n`, path.join(dir, 'rl.yaml')))
      return []
    } catch (err) {
      if (!(err instanceof ConfigFileError)) throw err
      return err.message.split('\n').map((l) => l.replace(file, 'edge.yaml'))
    }
  }

  it('accepts rate_limit.escrow on a counter rule with a periodic sync, and envoy.escrow as the default', async () => {
    assert.deepEqual(await ruleIssues(', algorithm: sliding-window-counter-algo, sync_rate: 0.5, escrow: true'), [])
    assert.deepEqual(
      await ruleIssues(
        ', algorithm: sliding-window-counter-algo',
        ', use-algo: sliding-window-counter-algo, sync-rate: 0.5, escrow: true, on-store-error: share',
      ),
      [],
    )
  })

  it('refuses escrow on a rule of another algorithm, without a periodic sync, and share on a rule without escrow', async () => {
    assert.deepEqual(await ruleIssues(', escrow: true'), [
      'edge.yaml:4:55: descriptors.0.rate_limit.escrow: only sliding-window-counter-algo has escrow; this rule uses fixed-window-algo',
    ])
    assert.deepEqual(await ruleIssues(', algorithm: sliding-window-counter-algo, escrow: true'), [
      'edge.yaml: descriptors.0.rate_limit.escrow: escrow needs a periodic sync (sync_rate > 0), got -1 (envoy.sync-rate)',
    ])
    // share with rules that are not escrow: each such rule is named
    assert.deepEqual(
      await ruleIssues(
        ', algorithm: sliding-window-counter-algo, sync_rate: 1, escrow: false',
        ', use-algo: sliding-window-counter-algo, sync-rate: 1, escrow: true, on-store-error: share',
      ),
      [
        'edge.yaml: descriptors.0.rate_limit.escrow: on-store-error share (envoy.on-store-error, else rate-limiter.on-store-error) is for escrow rules only: give this rule algorithm sliding-window-counter-algo and escrow: true, or set envoy.on-store-error to error, allow or deny',
      ],
    )
  })

  it("refuses envoy.on-store-error share when descriptors' own limits would not be escrow", () => {
    assert.deepEqual(
      issuesOf(
        'store: { type: memory }\nenvoy: { domains: edge.yaml, use-algo: sliding-window-counter-algo, sync-rate: 1, on-store-error: share }\n',
      ),
      [
        "rl.yaml:2:83: envoy.on-store-error: share is for escrow only: it needs envoy.escrow: true and envoy.use-algo: sliding-window-counter-algo (descriptors' own limits use them), or use error, allow or deny",
      ],
    )
    // inherited from rate-limiter: reported at the envoy section, which must then say what it wants
    assert.deepEqual(
      issuesOf(
        `rate-limiter: { ${COUNTER}, sync-rate: 1, escrow: true, on-store-error: share }\nstore: { type: memory }\nenvoy: { domains: edge.yaml }\n`,
      ),
      [
        "rl.yaml:3:1: envoy: inherits share from rate-limiter.on-store-error; share is for escrow only: it needs envoy.escrow: true and envoy.use-algo: sliding-window-counter-algo (descriptors' own limits use them), or set envoy.on-store-error to error, allow or deny",
      ],
    )
    // without domain files nothing is decided by the envoy section: no problem
    assert.deepEqual(
      issuesOf(`rate-limiter: { ${COUNTER}, sync-rate: 1, escrow: true, on-store-error: share }\nstore: { type: memory }\n`),
      [],
    )
  })
})

describe('escrow mistakes at start and on reload', () => {
  let dir: string
  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'rl-escrow-cli-'))
  })
  after(() => rmSync(dir, { recursive: true, force: true }))
  const bad = `policies:\n  login: { use-algo: fixed-window-algo, escrow: true }\nstore: { type: memory }\n`

  it('check-config and serve exit 3, naming the key path and why', async () => {
    const file = path.join(dir, 'bad.yaml')
    writeFileSync(file, bad)
    const t = io()
    assert.equal(await runCli(['check-config', file], t.fake), EXIT.CONFIG)
    assert.equal(
      t.err(),
      `${file}:2:41: policies.login.escrow: is for sliding-window-counter-algo only; fixed-window-algo decides in the store on every request\n`,
    )
    await assert.rejects(loadConfigFile(file), ConfigFileError)
    assert.equal(await runCli(['serve', '--config', file, '--port', '0', '--log-level', 'silent'], io().fake), EXIT.CONFIG)
  })

  it('refuses a reload to such a file and keeps answering with the running config', async () => {
    const t = await startTestService(
      `policies:\n  api: { ${COUNTER}, max-requests: 2, sync-rate: 0.05, escrow: true }\nstore: { type: memory, timeout-ms: 100 }\n`,
    )
    try {
      t.write(`policies:\n  api: { ${COUNTER}, max-requests: 2, sync-rate: 0, escrow: true }\nstore: { type: memory, timeout-ms: 100 }\n`)
      assert.equal(await t.service.reload('test'), false)
      const error = t.service.lastReload()?.error ?? ''
      assert.match(error, /policies\.api\.escrow: escrow needs a periodic sync \(sync-rate > 0\), got sync-rate 0/)
      assert.equal(t.service.runtime().policies.get('api')?.escrow, true, 'the running config stays')
      assert.equal((await check(t.url, { userId: 'x', policy: 'nope' })).status, 404)
    } finally {
      await t.close()
    }
  })
})
