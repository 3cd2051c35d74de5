/**
 * Wildcard rules and long descriptor values on a running service (docs/GATEWAY.md, "Domain
 * files"): a level of 2,000 `*` rules answers ShouldRateLimit calls with 60 KB values over gRPC
 * promptly, without holding up /healthz (each such call took 0.7 s of the event loop when every
 * pattern was tried in turn); a key or value longer than `envoy.max-value-length` is refused,
 * INVALID_ARGUMENT over gRPC and 400 over POST /json, naming the field.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the client is made from Envoy's .proto files at run time: its messages have no static types */
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, describe, it } from 'node:test'
import { type Message, type RlsClient, rlsClient } from '../support/envoy-client.js'
import { startTestService, type TestService } from './server-helpers.js'

const RULES = 2000
const CATCH_ALL = 1_000_000

/** `*a<i>*y<i>*q`, then `*q`: a value `a…aq` passes the anchors of every rule and matches only the last. */
function domainFile(): string {
  const lines = ['domain: wild', 'descriptors:']
  for (let i = 0; i < RULES; i++)
    lines.push(`  - { key: k, value: "*a${i}*y${i}*q", rate_limit: { unit: minute, requests_per_unit: ${i + 1} } }`)
  lines.push(`  - { key: k, value: "*q", rate_limit: { unit: minute, requests_per_unit: ${CATCH_ALL} } }`)
  return `${lines.join('\n')}\n`
}

const call = (value: string, key = 'k') => ({ domain: 'wild', descriptors: [{ entries: [{ key, value }] }] })

describe('ShouldRateLimit with 2,000 wildcard rules and long values', () => {
  let svc: TestService
  let client: RlsClient
  let dir: string
  before(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'rl-envoy-wild-'))
    writeFileSync(path.join(dir, 'wild.yaml'), domainFile())
    svc = await startTestService(
      `store: { type: memory }\nserver: { max-body-bytes: 1048576 }\ngrpc: { port: 0 }\nenvoy: { domains: ${path.join(dir, 'wild.yaml')} }\n`,
      { grpcPort: 0 },
    )
    client = rlsClient(svc.service.grpc?.port as number)
  })
  after(async () => {
    client?.close()
    await svc?.close()
    rmSync(dir, { recursive: true, force: true })
  })

  it('16 calls with 60 KB values are answered promptly, by the right rule, and /healthz is not held up meanwhile', async () => {
    // a warm-up call: the connection, and the level's automaton (built at its first long match)
    assert.equal((await client.call(call('aq'))).statuses[0].current_limit.requests_per_unit, CATCH_ALL)
    let polling = true
    let slowestHealthz = 0
    let healthzAnswers = 0
    const poller = (async () => {
      while (polling) {
        const t = performance.now()
        const res = await fetch(`${svc.url}/healthz`)
        await res.arrayBuffer()
        assert.equal(res.status, 200)
        slowestHealthz = Math.max(slowestHealthz, performance.now() - t)
        healthzAnswers++
        await new Promise((r) => setTimeout(r, 10))
      }
    })()
    const started = performance.now()
    const answers = await Promise.all(
      Array.from({ length: 16 }, (_, i) => client.call(call(`${'a'.repeat(60 * 1024 - 3)}${i % 10}${i % 10 === 7 ? 'y7' : 'a'}q`))),
    )
    const elapsed = performance.now() - started
    polling = false
    await poller
    // `a7…y7q` matches the rule `*a7*y7*q` (8 per minute), every other value only `*q`
    assert.deepEqual(
      answers.map((a: Message) => [a.overall_code, a.statuses[0].current_limit.requests_per_unit]),
      Array.from({ length: 16 }, (_, i) => ['OK', i % 10 === 7 ? 8 : CATCH_ALL]),
    )
    // trying the 2,000 patterns in turn took ~0.7 s per call, 11 s for the 16
    assert.ok(elapsed < 3000, `16 calls took ${elapsed.toFixed(0)} ms`)
    assert.ok(healthzAnswers > 0)
    assert.ok(slowestHealthz < 1000, `the slowest /healthz took ${slowestHealthz.toFixed(0)} ms`)
  })

  it('a value of 65,536 characters (envoy.max-value-length) is answered; one more is INVALID_ARGUMENT over gRPC, naming the field', async () => {
    const longest = `${'a'.repeat(65_535)}q`
    assert.equal((await client.call(call(longest))).statuses[0].current_limit.requests_per_unit, CATCH_ALL)
    await assert.rejects(
      client.call(call(`a${longest}`)),
      (err: any) =>
        err.code === 3 &&
        /INVALID_ARGUMENT: descriptors\[0\]\.entries\[0\]\.value must be at most 65536 characters \(envoy\.max-value-length\), got 65537$/.test(
          err.message,
        ),
    )
    await assert.rejects(
      client.call({
        domain: 'wild',
        descriptors: [
          { entries: [{ key: 'k', value: 'aq' }] },
          {
            entries: [
              { key: 'other', value: 'v' },
              { key: 'b'.repeat(70_000), value: 'v' },
            ],
          },
        ],
      }),
      (err: any) =>
        err.code === 3 &&
        /descriptors\[1\]\.entries\[1\]\.key must be at most 65536 characters \(envoy\.max-value-length\), got 70000$/.test(err.message),
    )
  })

  it('POST /json refuses a value longer than envoy.max-value-length with 400, naming the field', async () => {
    const post = (body: unknown) =>
      fetch(`${svc.url}/json`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
    const ok = await post(call(`${'a'.repeat(65_535)}q`))
    assert.equal(ok.status, 200)
    assert.equal(((await ok.json()) as Message).statuses[0].currentLimit.requestsPerUnit, CATCH_ALL)
    const bad = await post(call(`${'a'.repeat(65_536)}q`))
    assert.equal(bad.status, 400)
    assert.deepEqual(await bad.json(), {
      error: 'invalid_request',
      message: 'descriptors[0].entries[0].value must be at most 65536 characters (envoy.max-value-length), got 65537',
    })
  })
})
