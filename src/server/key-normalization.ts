// How the service compares keys: user ids, forward-auth keys, Envoy descriptors, and the deny
// lists, allow lists, overrides and domain files that name them (docs/SERVICE.md, "Keys and
// Unicode"). "José" typed on one system and on another may be different code points (U+00E9, or
// "e" and U+0301): under NFC, the Unicode standard's canonical composition, both are one key.

/** `key-normalization`: `nfc` compares keys in Unicode's NFC; `none` as the exact code points sent (opaque bytes). */
export type KeyNormalization = 'nfc' | 'none'

/** The values of `key-normalization`. */
export const KEY_NORMALIZATIONS = ['nfc', 'none'] as const

// Every code point below U+0300 is in NFC and composes with nothing before it (Unicode's
// NFC_Quick_Check is Yes for all of them, and the first combining mark is U+0300): a string of
// only those is its own NFC, so ASCII and Latin-1 keys skip the normalizer.
// eslint-disable-next-line no-control-regex -- the range starts at U+0000 on purpose: every code point below U+0300
const MAYBE_NOT_NFC = /[^\u0000-\u02ff]/

/** `key` in NFC: the same string when it already is, without calling the normalizer for ASCII and Latin-1. */
export function toNfc(key: string): string {
  return MAYBE_NOT_NFC.test(key) ? key.normalize('NFC') : key
}

function same(key: string): string {
  return key
}

/** The function that puts a key in the form `mode` compares. */
export function keyNormalizer(mode: KeyNormalization): (key: string) => string {
  return mode === 'nfc' ? toNfc : same
}
