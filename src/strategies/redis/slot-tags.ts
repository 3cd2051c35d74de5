/**
 * A hash tag for every Redis Cluster slot: the shortest base-36 number whose CRC16 lands in it.
 * An escrow namespace keeps one epoch key per slot (escrow.ts), named `{<tag>}:…` so that it
 * shares the slot of the key-windows it guards; a script call may only name keys of one slot.
 */
import { SLOTS, tagSlot } from './key-slot.js'

let tags: string[] | undefined

/**
 * The tag of `slot`. The whole table is made on first use, by counting up until every slot has
 * one: about 170,000 CRC16s of 3-4 characters (a few ms), once per process.
 */
export function slotTag(slot: number): string {
  if (tags === undefined) {
    const table = new Array<string>(SLOTS)
    let missing = SLOTS
    for (let i = 0; missing > 0; i++) {
      const tag = i.toString(36)
      const s = tagSlot(tag)
      if (table[s] === undefined) {
        table[s] = tag
        missing--
      }
    }
    tags = table
  }
  return tags[slot] as string
}
