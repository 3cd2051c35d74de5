// A count of the descriptors of an encoded rls v3 RateLimitRequest without decoding it:
// `envoy.max-descriptors` refuses a request of 140,000 descriptors (a 4 MB message) for the cost
// of walking its top-level fields, not of decoding them all first (about a second of CPU).

/** What {@link scanDescriptors} found. */
export interface DescriptorScan {
  /** Descriptors (field 2) before the end, or before the first malformed field. */
  readonly count: number
  /** Whether the top-level fields ran to the end of the bytes without a malformed one. */
  readonly complete: boolean
}

// A varint at `at`, as protobufjs reads one (up to 10 bytes); the position after it, or -1 when
// the bytes end inside it. Its value goes to `varint.value` (exact up to 2^53).
const varint = { value: 0 }
function readVarint(bytes: Uint8Array, at: number): number {
  let value = 0
  let scale = 1
  for (let i = 0; i < 10; i++) {
    if (at >= bytes.length) return -1
    const b = bytes[at++] as number
    value += (b & 0x7f) * scale
    scale *= 128
    if (b < 0x80) {
      varint.value = value
      return at
    }
  }
  return -1
}

/**
 * Walks the top-level fields of a RateLimitRequest as protobufjs's decoder reads them (`domain`,
 * field 1, and `descriptors`, field 2, length-delimited whatever their wire type, a domain cut
 * short by the end of the bytes taken as it is; `hits_addend`, field 3, a varint; other fields
 * skipped by their wire type, groups included) and counts field 2, decoding nothing: a few
 * operations per field, whatever the size of a descriptor.
 */
export function scanDescriptors(bytes: Uint8Array): DescriptorScan {
  let at = 0
  let count = 0
  // open groups (wire type 3) being skipped
  let depth = 0
  while (at < bytes.length) {
    at = readVarint(bytes, at)
    if (at < 0) return { count, complete: false }
    const tag = varint.value
    const field = Math.floor(tag / 8)
    let wireType = tag % 8
    if (depth === 0 && (field === 1 || field === 2)) wireType = 2
    else if (depth === 0 && field === 3) wireType = 0
    switch (wireType) {
      case 0:
        at = readVarint(bytes, at)
        break
      case 1:
        at += 8
        break
      case 2:
        at = readVarint(bytes, at)
        if (at < 0) return { count, complete: false }
        at += varint.value
        // protobufjs cuts a string (the domain) short at the end; anything else past the end is an error
        if (depth === 0 && field === 1) at = Math.min(at, bytes.length)
        if (at > bytes.length) return { count, complete: false }
        if (depth === 0 && field === 2) count++
        break
      case 3:
        depth++
        break
      case 4:
        if (depth === 0) return { count, complete: false }
        depth--
        break
      case 5:
        at += 4
        break
      default:
        return { count, complete: false }
    }
    if (at < 0 || at > bytes.length) return { count, complete: false }
  }
  return { count, complete: depth === 0 }
}
