/**
 * Wildcard matching of Envoy descriptors in time linear in the value (docs/GATEWAY.md, "Domain
 * files"): a 1 MB value against a level of 2,000 patterns, and `envoy.max-value-length`, the
 * bound on a descriptor's keys and values. The reference comparisons are in
 * test/property/wildcards.property.test.ts.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import { parseConfig } from '../../src/server/config.js'
import { parseDomainFiles } from '../../src/server/gateway/domains.js'
import { WildcardSet } from '../../src/server/gateway/wildcards.js'

const MB = 1 << 20

/** `k_*a<i>*y<i>*q`: a value `a…aq` passes every pattern's anchors, and its middle parts are nowhere in it, so each pattern needs a pass over the whole value. */
const spread = (count: number): string[] => Array.from({ length: count }, (_, i) => `k_*a${i}*y${i}*q`)

describe('wildcard matching: linear in the value', () => {
  it('a 1 MB value against 2,000 patterns takes a few automaton steps per character, not one pass per pattern', () => {
    const set = new WildcardSet()
    for (const p of spread(2000)) set.add(p)
    const value = `k_${'a'.repeat(MB - 1)}q`
    const work = { steps: 0 }
    assert.equal(set.firstMatch(value, 'auto', work), -1)
    // trying the patterns in turn reads the value 2,000 times (2·10⁹ characters)
    assert.ok(work.steps <= 3 * value.length, `${work.steps} steps for ${value.length} characters`)
    // a pattern that matches at the very end (`a7`, `y7`; no other pattern's parts are there): found in one pass as well
    const late = `k_${'a'.repeat(MB - 4)}7y7q`
    work.steps = 0
    assert.equal(set.firstMatch(late, 'auto', work), 7)
    assert.ok(work.steps <= 3 * late.length, `${work.steps} steps for ${late.length} characters`)
  })

  it('the domain config answers 1 MB values against 2,000 wildcard rules in well under 2 s (the old loop took over 10 s a value)', () => {
    const lines = ['domain: d', 'descriptors:']
    spread(2000).forEach((p, i) =>
      lines.push(`  - { key: k, value: "${p.slice(2)}", rate_limit: { unit: second, requests_per_unit: ${i + 1} } }`),
    )
    lines.push('  - { key: k, value: "*q", rate_limit: { unit: second, requests_per_unit: 5000 } }')
    const set = parseDomainFiles([{ file: 'd.yaml', text: `${lines.join('\n')}\n` }], {
      algorithm: 'fixed-window-algo',
      syncRate: undefined,
    })
    const value = `${'a'.repeat(MB - 1)}q`
    const started = performance.now()
    assert.equal(set.match('d', [{ key: 'k', value }])?.rule.requestsPerUnit, 5000)
    assert.equal(set.match('d', [{ key: 'k', value: `${'a'.repeat(MB)}5y5q` }])?.rule.requestsPerUnit, 6)
    const ms = performance.now() - started
    // ~60 ms on a quiet machine, ~400 ms with 14 jobs on its 2 cores; over 20 s with the old loop
    assert.ok(ms < 2000, `two matches took ${ms.toFixed(0)} ms`)
  })

  it('the cost per character is bounded by the config: parts that end one another (a, aa, aaa…) are each visited once per position', () => {
    const set = new WildcardSet()
    // 2,000 patterns waiting on a part the value never holds, behind which 62 parts of a's are in the automaton
    for (let i = 0; i < 2000; i++) set.add(`k_*b${i}*${'a'.repeat(1 + (i % 62))}*q`)
    const value = `k_${'a'.repeat(65_535)}q`
    const work = { steps: 0 }
    assert.equal(set.firstMatch(value, 'auto', work), -1)
    assert.ok(work.steps <= (2 + 62) * value.length, `${work.steps} steps for ${value.length} characters`)
  })
})

describe('envoy.max-value-length', () => {
  const memory = 'store: { type: memory }\n'

  it('is 65,536 by default (above Envoy’s default header limit of 60 KiB), any integer from 1 to 4 MiB when set', () => {
    assert.equal(parseConfig(memory, 'rl.yaml').gateway.envoy.maxValueLength, 65_536)
    assert.equal(parseConfig(`${memory}envoy: { max-value-length: 1024 }\n`, 'rl.yaml').gateway.envoy.maxValueLength, 1024)
    assert.ok(65_536 > 60 * 1024)
    assert.throws(() => parseConfig(`${memory}envoy: { max-value-length: 0 }\n`, 'rl.yaml'), /envoy\.max-value-length/)
    assert.throws(() => parseConfig(`${memory}envoy: { max-value-length: 4194305 }\n`, 'rl.yaml'), /envoy\.max-value-length/)
    assert.throws(() => parseConfig(`${memory}envoy: { max-value-length: 1.5 }\n`, 'rl.yaml'), /envoy\.max-value-length/)
  })
})
