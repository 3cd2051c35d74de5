/**
 * Wildcard matching of Envoy descriptors (src/server/gateway/wildcards.ts) against a reference:
 * for any level of `*` patterns over a small alphabet (a `*` at either end, `**`, empty and
 * overlapping parts) and any value, the first pattern in config order that matches is the one
 * a textbook glob matcher (dynamic programming over pattern and value) says, whichever way it
 * is matched: the old loop (`simple`), the one pass (`scan`), or what `auto` chooses; and the
 * domain config's lookup (a level of rules in a YAML file) picks that pattern's rule.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { parseDomainFiles } from '../../src/server/gateway/domains.js'
import { type MatchMode, SIMPLE_MAX_PATTERNS, WildcardSet } from '../../src/server/gateway/wildcards.js'

/** Whether `value` matches `pattern`, `*` being any run of characters: the textbook DP, one row per pattern character. */
function globReference(pattern: string, value: string): boolean {
  // row[j]: pattern[0 .. i) matches value[0 .. j)
  let row = new Array<boolean>(value.length + 1).fill(false)
  row[0] = true
  for (const ch of pattern) {
    const nextRow = new Array<boolean>(value.length + 1).fill(false)
    if (ch === '*') {
      nextRow[0] = row[0] as boolean
      for (let j = 1; j <= value.length; j++) nextRow[j] = (row[j] as boolean) || (nextRow[j - 1] as boolean)
    } else {
      for (let j = 1; j <= value.length; j++) nextRow[j] = (row[j - 1] as boolean) && value[j - 1] === ch
    }
    row = nextRow
  }
  return row[value.length] as boolean
}

const firstReference = (level: readonly string[], value: string): number => level.findIndex((p) => globReference(p, value))

function setOf(level: readonly string[]): WildcardSet {
  const set = new WildcardSet()
  for (const p of level) set.add(p)
  return set
}

const MODES: readonly MatchMode[] = ['simple', 'scan', 'auto']

const part = fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 3 })
/** At least one `*`; parts may be empty, so `*` at either end and `**` occur often. */
const pattern = fc.array(part, { minLength: 2, maxLength: 5 }).map((parts) => parts.join('*'))
const level = fc.array(pattern, { minLength: 1, maxLength: 24 })
const anyValue = fc.string({ unit: fc.constantFrom('a', 'b', 'c'), maxLength: 24 })

/** A value made of pieces of the level's patterns and filler, so that patterns often match, often just barely. */
function valueFor(patterns: readonly string[], minPieces: number, maxPieces: number): fc.Arbitrary<string> {
  const pieces = [...new Set(patterns.flatMap((p) => p.split('*')).filter((p) => p !== ''))]
  const filler = fc.string({ unit: fc.constantFrom('a', 'b', 'c'), maxLength: 2 })
  const piece = pieces.length === 0 ? filler : fc.oneof(fc.constantFrom(...pieces), filler)
  return fc.array(piece, { minLength: minPieces, maxLength: maxPieces, size: 'max' }).map((ps) => ps.join(''))
}

/** Checks every mode against the reference; returns whether `auto` took the one pass. */
function checkAllModes(patterns: readonly string[], value: string): boolean {
  const set = setOf(patterns)
  const expected = firstReference(patterns, value)
  const work = { steps: 0 }
  for (const mode of MODES) {
    work.steps = 0
    assert.equal(set.firstMatch(value, mode, work), expected, `${mode}: ${JSON.stringify(patterns)} on ${JSON.stringify(value)}`)
  }
  // the one pass counts its steps; the old loop does not
  return work.steps > 0
}

describe('wildcard matching against a glob reference', () => {
  it('the first matching pattern, short values: the old loop, the one pass and auto agree with the reference', () => {
    fc.assert(
      fc.property(
        level.chain((ps) => fc.tuple(fc.constant(ps), fc.oneof(anyValue, valueFor(ps, 0, 8)))),
        ([ps, value]) => {
          checkAllModes(ps, value)
        },
      ),
      { numRuns: 3000 },
    )
  })

  it('long values on many patterns, where auto takes the one pass', () => {
    // middle parts of one to four characters (and now and then an empty one, `**`), anchors of at most two
    const middle = fc.oneof(
      { weight: 9, arbitrary: fc.string({ unit: fc.constantFrom('a', 'b'), minLength: 1, maxLength: 4 }) },
      { weight: 1, arbitrary: fc.constant('') },
    )
    const anchor = fc.string({ unit: fc.constantFrom('a', 'b'), maxLength: 2 })
    const long = fc.tuple(anchor, fc.array(middle, { minLength: 1, maxLength: 4 }), anchor).map(([f, ms, l]) => [f, ...ms, l].join('*'))
    const many = fc.array(long, { minLength: SIMPLE_MAX_PATTERNS + 1, maxLength: 40 })
    let runs = 0
    let scans = 0
    fc.assert(
      fc.property(
        many.chain((ps) => fc.tuple(fc.constant(ps), valueFor(ps, 1000, 2000))),
        ([ps, value]) => {
          runs += 2
          // and the same value with its ends cut, which moves every anchor
          for (const v of [value, value.slice(1, -1)]) if (checkAllModes(ps, v)) scans++
        },
      ),
      { numRuns: 150 },
    )
    // auto did take the one pass on most of them (not on those whose anchors leave few patterns)
    assert.ok(scans > runs / 6, `auto took the one pass ${scans} times in ${runs}`)
  })

  it('overlapping and repeated parts, anchors that overlap the middle, a later pattern that matches first in the value', () => {
    const cases: Array<[string[], string[]]> = [
      [['ab*ba'], ['aba', 'abba', 'abxba', 'ab', 'ba']],
      [['*aa*aa*'], ['aaa', 'aaaa', 'aaaaa', 'aabaa']],
      [['a*a*a'], ['a', 'aa', 'aaa', 'aaaa']],
      // `b` ends inside `aab`, whose failure link (`ab`, a prefix of `abb`) is no part: found through the dictionary links
      [
        ['*aab*c', '*abb*c', '*b*'],
        ['aab', 'xaabx'],
      ],
      [
        ['**', '*', 'a**b', '***a***'],
        ['', 'a', 'ab', 'ba'],
      ],
      [
        ['*aba*bab*', '*ab*'],
        ['ababab', 'abab', 'aba', 'babab'],
      ],
      // the second pattern's parts occur first in the value; the first pattern still wins when it matches
      [Array.from({ length: 12 }, (_, i) => (i === 0 ? '*ba*ab*' : `*${'a'.repeat(i)}*b*`)), ['aabbaab', 'ab', 'baab', 'bab', 'aaaaaaaab']],
    ]
    for (const [ps, values] of cases) for (const v of values) checkAllModes(ps, v)
  })

  it('a domain file level picks the rule of the first matching pattern, then the key alone', () => {
    fc.assert(
      fc.property(
        fc
          .uniqueArray(pattern, { minLength: 1, maxLength: 16 })
          .chain((ps) => fc.tuple(fc.constant(ps), fc.boolean(), fc.oneof(anyValue, valueFor(ps, 0, 10)))),
        ([ps, keyOnly, value]) => {
          const lines = ['domain: d', 'descriptors:']
          ps.forEach((p, i) =>
            lines.push(`  - { key: k, value: ${JSON.stringify(p)}, rate_limit: { unit: second, requests_per_unit: ${i + 1} } }`),
          )
          // a key-only descriptor whose key holds `*` is a pattern of the level too, matched against `key_value`
          if (keyOnly) lines.push('  - { key: "k*b", rate_limit: { unit: second, requests_per_unit: 1000 } }')
          lines.push('  - { key: k, rate_limit: { unit: second, requests_per_unit: 999 } }')
          const set = parseDomainFiles([{ file: 'd.yaml', text: `${lines.join('\n')}\n` }], {
            algorithm: 'fixed-window-algo',
            syncRate: undefined,
          })
          const composite = `k_${value}`
          const level = [...ps.map((p) => `k_${p}`), ...(keyOnly ? ['k*b'] : [])]
          const i = firstReference(level, composite)
          const expected = i < 0 ? 999 : i < ps.length ? i + 1 : 1000
          assert.equal(set.match('d', [{ key: 'k', value }])?.rule.requestsPerUnit, expected)
        },
      ),
      { numRuns: 400 },
    )
  })
})
