/**
 * toNfc skips the normalizer for strings of code points below U+0300: that must never change an
 * answer. Checked on every pair of such code points, and on random strings against
 * String.prototype.normalize itself.
 */
import assert from 'node:assert/strict'
import { describe, it } from 'node:test'
import fc from 'fast-check'
import { keyNormalizer, toNfc } from '../../src/server/key-normalization.js'

describe('toNfc', () => {
  it('agrees with normalize("NFC") on every pair of code points below U+0300 (the ones it leaves as they are)', () => {
    let differing = 0
    for (let a = 0; a < 0x300; a++)
      for (let b = 0; b < 0x300; b++) {
        const s = String.fromCharCode(a, b)
        if (s.normalize('NFC') !== s) differing++
      }
    assert.equal(differing, 0)
  })

  it('agrees with normalize("NFC") on random strings, combining marks and Hangul included', () => {
    const char = fc.oneof(
      fc.integer({ min: 0x20, max: 0x2ff }),
      fc.integer({ min: 0x300, max: 0x36f }),
      fc.integer({ min: 0x1100, max: 0x11ff }),
      fc.integer({ min: 0xac00, max: 0xac10 }),
      fc.constantFrom(0x212b, 0x2126, 0x1e9b, 0xfb01),
    )
    fc.assert(
      fc.property(fc.array(char, { maxLength: 12 }), (codes) => {
        const s = String.fromCodePoint(...codes)
        assert.equal(toNfc(s), s.normalize('NFC'))
      }),
      { numRuns: 2000 },
    )
  })

  it('is the identity under key-normalization: none', () => {
    assert.equal(keyNormalizer('none')('Jose\u0301'), 'Jose\u0301')
    assert.equal(keyNormalizer('nfc')('Jose\u0301'), 'Jos\u00e9')
  })
})
