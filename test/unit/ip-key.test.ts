import assert from 'node:assert/strict'
import { BlockList, isIPv6 } from 'node:net'
import { describe, it } from 'node:test'
import { ipKey } from '../../src/adapters/express.js'
import { seededRandom } from '../support/random.js'

/** A random IPv6 address, written in one of several forms (full, zero-padded, compressed, upper case). */
function randomAddress(random: () => number): { text: string; groups: number[] } {
  // runs of zero groups, so that :: appears in varied places
  const groups = Array.from({ length: 8 }, () => (random() < 0.3 ? 0 : Math.floor(random() * 0x10000)))
  const form = Math.floor(random() * 3)
  let text: string
  if (form === 0) text = groups.map((g) => g.toString(16).padStart(4, '0')).join(':')
  else if (form === 1) text = groups.map((g) => g.toString(16).toUpperCase()).join(':')
  else {
    // compress the first zero group and the ones after it
    const at = groups.indexOf(0)
    let end = at
    while (end >= 0 && end < 8 && groups[end] === 0) end++
    text =
      at < 0
        ? groups.map((g) => g.toString(16)).join(':')
        : `${groups
            .slice(0, at)
            .map((g) => g.toString(16))
            .join(':')}::${groups
            .slice(end)
            .map((g) => g.toString(16))
            .join(':')}`
  }
  return { text, groups }
}

describe('ipKey: the default key of an IP address', () => {
  it('groups an IPv6 address by its /56 by default, in canonical form whatever the written form', () => {
    for (const address of ['2001:db8:1:2::5', '2001:DB8:1:2:0:0:0:5', '2001:0db8:0001:0002:ffff:ffff:ffff:ffff', '2001:db8:1:ff::1'])
      assert.equal(ipKey(address), '2001:db8:1::/56', address)
    // a /56 ends half way through the fourth group
    assert.equal(ipKey('2001:db8:1:2ff::1'), '2001:db8:1:200::/56')
    assert.equal(ipKey('2001:db8:1:300::1'), '2001:db8:1:300::/56', 'the next /56 is another client')
  })

  it('drops a zone id', () => {
    assert.equal(ipKey('fe80::1%eth0'), 'fe80::/56')
    assert.equal(ipKey('fe80::1:2:3:4%25en0', 128), 'fe80::1:2:3:4/128')
    assert.equal(ipKey('fe80::1%eth0', false), 'fe80::1%eth0', 'unless grouping is off')
  })

  it('takes an IPv4-mapped IPv6 address as its IPv4 address, in any written form', () => {
    for (const address of ['::ffff:1.2.3.4', '::FFFF:1.2.3.4', '::ffff:102:304', '0:0:0:0:0:ffff:0102:0304', '::1.2.3.4'])
      for (const subnet of [56, 128, false] as const) assert.equal(ipKey(address, subnet), '1.2.3.4', `${address} /${subnet}`)
    assert.equal(ipKey('1.2.3.4'), '1.2.3.4', 'IPv4 as it is')
    assert.equal(ipKey('::1'), '::/56', '::1 is not an IPv4-compatible address')
    assert.equal(ipKey('2001:db8::ffff:1.2.3.4', 64), '2001:db8::/64', 'an IPv4 tail elsewhere is IPv6')
  })

  it('writes the network as RFC 5952 does', () => {
    assert.equal(ipKey('1:0:0:2:0:0:0:3', 128), '1:0:0:2::3/128', 'the longest zero run')
    assert.equal(ipKey('1:0:0:2:0:0:3:4', 128), '1::2:0:0:3:4/128', 'the first of two equal runs')
    assert.equal(ipKey('1:0:2:3:4:5:6:7', 128), '1:0:2:3:4:5:6:7/128', 'a single zero group stays')
    assert.equal(ipKey('::', 32), '::/32')
    assert.equal(ipKey('1:2:3:4:5:6:7:8', 64), '1:2:3:4::/64')
  })

  it('leaves anything that is not an IP address as it is', () => {
    for (const key of ['', 'user-42', '::ffff:01.2.3.4', '1::2::3', 'fe80::1%']) assert.equal(ipKey(key), key)
  })

  it('puts an address in the subnet node:net puts it in, and no address of the next subnet', () => {
    const random = seededRandom(56)
    for (let i = 0; i < 2000; i++) {
      const { text, groups } = randomAddress(random)
      assert.ok(isIPv6(text), text)
      if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) continue
      const prefix = 32 + Math.floor(random() * 97)
      const key = ipKey(text, prefix)
      const [network, bits] = key.split('/') as [string, string]
      assert.equal(Number(bits), prefix)
      assert.equal(ipKey(network, prefix), key, `${key} is a network in canonical form`)
      const subnet = new BlockList()
      subnet.addSubnet(network, prefix, 'ipv6')
      assert.ok(subnet.check(text, 'ipv6'), `${text} in ${key}`)
      if (prefix === 128) continue
      // flip the last bit of the prefix: another subnet, another key
      const flipped = [...groups]
      const bit = prefix - 1
      flipped[bit >> 4] = (flipped[bit >> 4] as number) ^ (1 << (15 - (bit & 15)))
      const other = flipped.map((g) => g.toString(16)).join(':')
      assert.ok(!subnet.check(other, 'ipv6'), `${other} not in ${key}`)
      assert.notEqual(ipKey(other, prefix), key)
    }
  })
})
