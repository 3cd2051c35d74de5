import assert from 'node:assert/strict'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { type CliIo, EXIT, runCli } from '../../src/server/cli-main.js'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

function io(env: Record<string, string> = {}) {
  const out: string[] = []
  const err: string[] = []
  const fake: CliIo = {
    stdout: (t) => out.push(t),
    stderr: (t) => err.push(t),
    env,
    onSignal: () => () => undefined,
  }
  return { fake, out: () => out.join(''), err: () => err.join('') }
}

describe('ratelimiting command line', () => {
  let dir: string
  before(() => {
    dir = mkdtempSync(path.join(tmpdir(), 'rl-cli-unit-'))
  })
  after(() => rmSync(dir, { recursive: true, force: true }))

  it('prints help and exits 0', async () => {
    const t = io()
    assert.equal(await runCli(['--help'], t.fake), EXIT.OK)
    assert.match(t.out(), /Usage: ratelimiting <command> \[options\]/)
    assert.match(t.out(), /check-config FILE/)
    assert.match(t.out(), /Exit codes: 0 ok, 1 failure while running, 2 bad command line, 3 invalid config/)
  })

  it('prints the package version', async () => {
    const t = io()
    const { version } = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version: string }
    assert.equal(await runCli(['--version'], t.fake), EXIT.OK)
    assert.equal(t.out(), `${version}\n`)
  })

  it('exits 2 on a bad command line, saying what was wrong', async () => {
    const cases: Array<[string[], RegExp]> = [
      [[], /a command is required/],
      [['launch'], /unknown command "launch"/],
      [['serve', '--log-level', 'loud'], /--log-level must be one of fatal, error, warn, info, debug, trace, silent, got "loud"/],
      [['serve', '--port', 'eighty'], /--port must be an integer from 0 to 65535/],
      [['serve', 'extra.yaml'], /unexpected arguments: extra\.yaml; give the file with --config/],
      [['check-config'], /check-config needs a FILE/],
      [['serve', '--frobnicate'], /Unknown option '--frobnicate'/],
    ]
    for (const [argv, message] of cases) {
      const t = io()
      assert.equal(await runCli(argv, t.fake), EXIT.USAGE, argv.join(' '))
      assert.match(t.err(), message)
      assert.match(t.err(), /Usage:/)
    }
  })

  it('check-config accepts the example config', async () => {
    const t = io()
    const file = path.join(root, 'examples/ratelimiting.yaml')
    assert.equal(await runCli(['check-config', file], t.fake), EXIT.OK)
    assert.match(t.out(), /ok; store memory; policies: default \(sliding-window-algo, 100 per 60 s\)/)
  })

  it('check-config exits 3 with the file, line, key path and reason', async () => {
    const file = path.join(dir, 'bad.yaml')
    writeFileSync(file, 'server:\n  port: 8080\nrate-limiter:\n  window-size: -5\nstore: { type: memory }\n')
    const t = io()
    assert.equal(await runCli(['check-config', file], t.fake), EXIT.CONFIG)
    assert.equal(t.err(), `${file}:4:3: rate-limiter.window-size: must be >= 1, got -5\n`)
  })

  it('check-config exits 3 on a missing file', async () => {
    const t = io()
    const file = path.join(dir, 'absent.yaml')
    assert.equal(await runCli(['check-config', file], t.fake), EXIT.CONFIG)
    assert.equal(t.err(), `${file}: file not found\n`)
  })

  it('check-config exits 3 on a store URL that serve could not open', async () => {
    const file = path.join(dir, 'comma.yaml')
    writeFileSync(file, 'store: { type: redis, url: "redis://127.0.0.1:7490," }\n')
    const t = io()
    assert.equal(await runCli(['check-config', file], t.fake), EXIT.CONFIG)
    assert.match(
      t.err(),
      /store\.url: must be a redis:\/\/ or rediss:\/\/ URL, got "redis:\/\/127\.0\.0\.1:7490,", which is not a valid URL/,
    )
  })

  it('check-config exits 3 on an empty file', async () => {
    const file = path.join(dir, 'empty.yaml')
    writeFileSync(file, '')
    const t = io()
    assert.equal(await runCli(['check-config', file], t.fake), EXIT.CONFIG)
    assert.match(t.err(), /store: is required/)
  })

  it('check-config applies the environment overrides', async () => {
    const file = path.join(dir, 'redis.yaml')
    writeFileSync(file, 'store: { type: redis }\n')
    assert.equal(await runCli(['check-config', file], io().fake), EXIT.CONFIG)
    assert.equal(await runCli(['check-config', file], io({ RATELIMITING_STORE_URL: 'redis://127.0.0.1:6379' }).fake), EXIT.OK)
  })
})
