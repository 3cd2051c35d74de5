/**
 * The count of descriptors taken before decoding (src/server/gateway/rls-scan.ts) against the
 * decoder itself (protobufjs through @grpc/proto-loader, as the gRPC listener decodes): for any
 * bytes the decoder reads, valid requests and random edits of them alike, the walk reaches the end
 * and counts exactly the descriptors the decoder returns. So a request refused by the count is one
 * the decoder would have given more than `envoy.max-descriptors` descriptors, or refused itself.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the messages come from Envoy's .proto files at run time */
import assert from 'node:assert/strict'
import path from 'node:path'
import { describe, it } from 'node:test'
import { fileURLToPath } from 'node:url'
import { loadSync } from '@grpc/proto-loader'
import fc from 'fast-check'
import { scanDescriptors } from '../../src/server/gateway/rls-scan.js'

const definition = loadSync('envoy/service/ratelimit/v3/rls.proto', {
  includeDirs: [path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../proto')],
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: false,
  oneofs: true,
})
const method = (definition['envoy.service.ratelimit.v3.RateLimitService'] as any).ShouldRateLimit
const encode = method.requestSerialize as (r: object) => Buffer
const decode = method.requestDeserialize as (b: Buffer) => { descriptors?: unknown[] }

const entry = fc.record({ key: fc.string({ maxLength: 8 }), value: fc.string({ maxLength: 8 }) })
const descriptor = fc.record(
  {
    entries: fc.array(entry, { maxLength: 3 }),
    limit: fc.record({ requests_per_unit: fc.nat(1000), unit: fc.constantFrom('SECOND', 'MINUTE', 'HOUR') }),
    hits_addend: fc.record({ value: fc.nat(10) }),
  },
  { requiredKeys: ['entries'] },
)
const request = fc.record(
  { domain: fc.string({ maxLength: 10 }), descriptors: fc.array(descriptor, { maxLength: 20 }), hits_addend: fc.nat(100) },
  { requiredKeys: [] },
)

// bytes a decoder meets: unknown fields of every wire type (a group included), wrong wire types
// on known fields, and cuts, flips and splices of valid encodings
const unknownFields = fc.constantFrom(
  [0x20, 0x05], // field 4, varint
  [0x29, 1, 2, 3, 4, 5, 6, 7, 8], // field 5, fixed64
  [0x32, 2, 0x61, 0x62], // field 6, bytes
  [0x3b, 0x08, 0x01, 0x3c], // field 7, a group holding a varint
  [0x45, 1, 2, 3, 4], // field 8, fixed32
  [0x10, 0x03], // field 2 as a varint: the decoder reads a length anyway
  [0x08, 0x00], // field 1 as a varint
  [0x1a, 0x01], // field 3 as bytes: the decoder reads a varint anyway
)
const bytes = fc.oneof(
  request.map((r) => encode(r)),
  fc.tuple(request, fc.array(unknownFields, { maxLength: 4 })).map(([r, extra]) => Buffer.concat([encode(r), Buffer.from(extra.flat())])),
  fc.tuple(request, fc.nat(), fc.nat(255)).map(([r, at, b]) => {
    const buf = Buffer.from(encode(r))
    if (buf.length > 0) buf[at % buf.length] = b
    return buf
  }),
  fc.tuple(request, fc.nat()).map(([r, cut]) => {
    const buf = encode(r)
    return buf.subarray(0, buf.length === 0 ? 0 : cut % buf.length)
  }),
  fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a)),
)

describe('scanDescriptors', () => {
  it('counts what the decoder decodes, for any bytes the decoder reads', () => {
    fc.assert(
      fc.property(bytes, (buf) => {
        let decoded: { descriptors?: unknown[] }
        try {
          decoded = decode(buf)
        } catch {
          return // refused by the decoder: the listener refuses it too, counted or not
        }
        const scan = scanDescriptors(buf)
        assert.deepEqual(scan, { count: decoded.descriptors?.length ?? 0, complete: true }, buf.toString('hex'))
      }),
      { numRuns: 3000 },
    )
  })

  it('a request of 140,000 descriptors: counted in one pass, the 64th as the last', () => {
    const many = encode({
      domain: 'edge',
      descriptors: Array.from({ length: 140_000 }, (_, i) => ({ entries: [{ key: 'k', value: String(i) }] })),
    })
    assert.deepEqual(scanDescriptors(many), { count: 140_000, complete: true })
    assert.deepEqual(scanDescriptors(encode({ domain: 'edge', descriptors: Array.from({ length: 64 }, () => ({ entries: [] })) })), {
      count: 64,
      complete: true,
    })
  })

  it('a field cut short is where the walk stops, the descriptors before it counted', () => {
    const two = encode({ domain: 'e', descriptors: [{ entries: [{ key: 'a', value: 'b' }] }, { entries: [{ key: 'c', value: 'd' }] }] })
    assert.deepEqual(scanDescriptors(Buffer.concat([two, Buffer.from([0x12, 0x7f, 0x00])])), { count: 2, complete: false })
    assert.deepEqual(scanDescriptors(Buffer.from([0x12])), { count: 0, complete: false })
    assert.deepEqual(scanDescriptors(Buffer.from([0x0f])), { count: 0, complete: false }, 'wire type 7')
    assert.deepEqual(scanDescriptors(Buffer.from([0x0a, 0x7f, 0x65])), { count: 0, complete: true }, 'a domain cut short is read as it is')
  })
})
