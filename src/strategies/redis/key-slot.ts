/**
 * Redis Cluster hash slots, computed on our side so a sync batch can be split into one script
 * call per slot before it is sent. The cluster spec: `CRC16(tag) mod 16384`, where the tag is
 * the part between the first `{` and the next `}` when that part is not empty, else the whole key.
 */

const TABLE = (() => {
  // CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as in the cluster spec's crc16.c
  const table = new Uint16Array(256)
  for (let i = 0; i < 256; i++) {
    let crc = i << 8
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff
    table[i] = crc
  }
  return table
})()

/** Number of hash slots of a Redis Cluster. */
export const SLOTS = 16384

function crc16(bytes: Uint8Array): number {
  let crc = 0
  for (let i = 0; i < bytes.length; i++) crc = ((crc << 8) & 0xffff) ^ (TABLE[((crc >> 8) ^ (bytes[i] as number)) & 0xff] as number)
  return crc
}

/** The slot of a hash tag's content (the text between the braces), as UTF-8 bytes. */
export function tagSlot(tag: string): number {
  // keys are mostly ASCII (IPs, ids): hash the char codes without encoding, until one is not
  let crc = 0
  for (let i = 0; i < tag.length; i++) {
    const code = tag.charCodeAt(i)
    if (code > 0x7f) return crc16(Buffer.from(tag, 'utf8')) % SLOTS
    crc = ((crc << 8) & 0xffff) ^ (TABLE[((crc >> 8) ^ code) & 0xff] as number)
  }
  return crc % SLOTS
}

/** The slot of a whole key name, honouring the hash-tag rule. */
export function keySlot(name: string): number {
  const open = name.indexOf('{')
  if (open >= 0) {
    const close = name.indexOf('}', open + 1)
    if (close > open + 1) return tagSlot(name.slice(open + 1, close))
  }
  return tagSlot(name)
}
