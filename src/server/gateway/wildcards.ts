// The `*` patterns of one level of a descriptor tree, and which of them a request's `key_value`
// matches first (docs/GATEWAY.md, "Domain files"). Each `*` stands for zero or more characters;
// the part before the first `*` is anchored at the start, the part after the last `*` at the
// end, and the parts between them occur in order, without overlap (the reference's
// `wildcardMatch`). The first pattern in config order that matches wins.
//
// Trying each pattern in turn costs O(patterns × value length): a level of 2,000 patterns and a
// value of 1 MB took 11.5 s on the event loop. Here a level of more than SIMPLE_MAX_PATTERNS
// patterns is matched in one pass over the value instead:
//
// - at the first large match, an Aho–Corasick automaton is built over the distinct non-empty
//   middle parts of the level's patterns (empty ones, from `**`, match anywhere and are dropped);
// - a match first keeps the patterns whose first and last parts fit (`startsWith`, `endsWith`,
//   length: O(config), independent of the value); one without middle parts matches at once;
// - then one pass over the value: each remaining pattern waits, in a FIFO queue of its next
//   middle part, from the position where that part may start (after its first part, then after
//   the part before). An occurrence of a part ending at `i` starts at `i - length + 1`; it
//   advances every waiting pattern whose position is at or before that start (the queue is in
//   order of position, so those are at its front) to the next part, from `i + 1`. A pattern is
//   matched when its last middle part ends at or before `length - last.length`, and lost once
//   the pass reaches that bound. Leftmost-first is exact for patterns of `*` only: taking each
//   part's earliest occurrence leaves the most room for the rest (this is what `indexOf` does).
//
// The pass stops as soon as every pattern before the best match so far is lost. Its cost is one
// automaton step per character (amortized), plus one visit per occurrence of a part, plus one
// per part a pattern passes: O(value length × d + config), where d, the most distinct parts
// that can end at one position, depends on the config only (at most the number of distinct part
// lengths; 1 or 2 for paths and ids). For a few patterns, or a short value, trying each pattern
// with `indexOf` is faster and is kept (`SIMPLE_MAX_PATTERNS`, `SIMPLE_MAX_WORK`); property
// tests check both ways, and the choice, against a textbook glob matcher
// (test/property/wildcards.property.test.ts).

/** A level with at most this many patterns tries them in turn: at most this many `indexOf` passes over the value. */
export const SIMPLE_MAX_PATTERNS = 8

/** With more patterns, still try them in turn when (patterns left after the anchors) × (value length) is at most this. */
export const SIMPLE_MAX_WORK = 16_384

/** How {@link WildcardSet.firstMatch} matches: `auto` chooses; the others are for tests and the benchmark. */
export type MatchMode = 'auto' | 'simple' | 'scan'

/** Counts the steps of the one-pass match (automaton steps, occurrences visited, parts passed) for tests. */
export interface MatchWork {
  steps: number
}

/**
 * Whether `value` matches a pattern split on `*` (`parts`, at least two): the reference's
 * `wildcardMatch`, one `indexOf` per middle part.
 */
export function globMatch(parts: readonly string[], value: string): boolean {
  const first = parts[0] ?? ''
  if (parts.length === 1) return first === value
  const last = parts[parts.length - 1] ?? ''
  if (!value.startsWith(first) || !value.endsWith(last)) return false
  let fixed = 0
  for (const p of parts) fixed += p.length
  if (value.length < fixed) return false
  let rest = value.slice(first.length, value.length - last.length)
  for (let i = 1; i < parts.length - 1; i++) {
    const part = parts[i] ?? ''
    const at = rest.indexOf(part)
    if (at < 0) return false
    rest = rest.slice(at + part.length)
  }
  return true
}

const PENDING = 1
const DONE = 2

/** A level's patterns compiled for the one-pass match; built once, then only read (its buffers are scratch space). */
interface Compiled {
  readonly first: readonly string[]
  readonly last: readonly string[]
  /** Per pattern: the length of all its parts. */
  readonly fixed: Int32Array
  /** Per pattern: where its middle parts (ids) start in `mids`, and how many it has. */
  readonly midStart: Int32Array
  readonly midCount: Int32Array
  readonly mids: Int32Array
  /** Per distinct middle part (id): its length. */
  readonly partLen: Int32Array
  /** Pattern ids by first part's length (ascending), and by last part's length (descending). */
  readonly byFirst: Int32Array
  readonly byLast: Int32Array
  // The automaton: node 0 is the root; node v's edges are edgeChar/edgeTo[edgeStart[v] .. edgeStart[v + 1]), by code unit.
  readonly edgeStart: Int32Array
  readonly edgeChar: Uint16Array
  readonly edgeTo: Int32Array
  readonly fail: Int32Array
  /** The part (id) that ends at a node, or -1. */
  readonly out: Int32Array
  /** The nearest node on a node's failure chain where a part ends, or -1. */
  readonly dict: Int32Array
  // scratch, per pattern and per part
  readonly cand: Int32Array
  readonly state: Uint8Array
  readonly pos: Int32Array
  readonly next: Int32Array
  readonly passed: Int32Array
  readonly head: Int32Array
  readonly tail: Int32Array
}

/**
 * The `*` patterns of one level, in config order.
 *
 * @example
 * const set = new WildcardSet()
 * set.add('path_/api/*') // 0
 * set.add('path_*')      // 1
 * set.firstMatch('path_/api/users') // 0
 */
export class WildcardSet {
  readonly #patterns: string[] = []
  readonly #parts: string[][] = []
  #compiled: Compiled | undefined

  /** How many patterns the level has. */
  get size(): number {
    return this.#patterns.length
  }

  /** The pattern at `index` (config order). */
  pattern(index: number): string {
    return this.#patterns[index] as string
  }

  /** Appends a pattern (a string with at least one `*`). */
  add(pattern: string): void {
    this.#patterns.push(pattern)
    this.#parts.push(pattern.split('*'))
    this.#compiled = undefined
  }

  /** Builds the one-pass matcher now, when the level needs one: at load, so that no request pays for it. */
  prepare(): void {
    if (this.#parts.length > SIMPLE_MAX_PATTERNS) this.#compiled ??= compile(this.#parts)
  }

  /** The config-order index of the first pattern that `value` matches, or -1. */
  firstMatch(value: string, mode: MatchMode = 'auto', work?: MatchWork): number {
    const all = this.#parts
    if (mode === 'simple' || (mode === 'auto' && all.length <= SIMPLE_MAX_PATTERNS)) {
      for (let i = 0; i < all.length; i++) if (globMatch(all[i] as string[], value)) return i
      return -1
    }
    const c = (this.#compiled ??= compile(all))
    return match(c, all, value, mode === 'scan', work)
  }
}

function compile(all: readonly string[][]): Compiled {
  const count = all.length
  const first: string[] = []
  const last: string[] = []
  const fixed = new Int32Array(count)
  const midStart = new Int32Array(count)
  const midCount = new Int32Array(count)
  const mids: number[] = []
  const ids = new Map<string, number>()
  const partText: string[] = []
  for (let p = 0; p < count; p++) {
    const parts = all[p] as string[]
    first.push(parts[0] as string)
    last.push(parts[parts.length - 1] as string)
    let length = 0
    for (const part of parts) length += part.length
    fixed[p] = length
    midStart[p] = mids.length
    for (let k = 1; k < parts.length - 1; k++) {
      const part = parts[k] as string
      if (part === '') continue
      let id = ids.get(part)
      if (id === undefined) {
        id = partText.length
        ids.set(part, id)
        partText.push(part)
      }
      mids.push(id)
    }
    midCount[p] = mids.length - (midStart[p] as number)
  }
  const order = [...Array(count).keys()]
  const byFirst = Int32Array.from([...order].sort((a, b) => (first[a] as string).length - (first[b] as string).length))
  const byLast = Int32Array.from([...order].sort((a, b) => (last[b] as string).length - (last[a] as string).length))

  // the trie of the distinct middle parts: edge (v, ch) → child, keyed v * 65536 + ch
  const trie = new Map<number, number>()
  const outList: number[] = [-1]
  partText.forEach((part, id) => {
    let v = 0
    for (let i = 0; i < part.length; i++) {
      const key = v * 65_536 + part.charCodeAt(i)
      let u = trie.get(key)
      if (u === undefined) {
        u = outList.length
        trie.set(key, u)
        outList.push(-1)
      }
      v = u
    }
    outList[v] = id
  })
  // the edges by node, then by code unit (every node but the root has one edge in)
  const nodes = outList.length
  const keys = Float64Array.from(trie.keys()).sort()
  const edgeStart = new Int32Array(nodes + 1)
  const edgeChar = new Uint16Array(keys.length)
  const edgeTo = new Int32Array(keys.length)
  keys.forEach((key, e) => {
    const from = Math.floor(key / 65_536) + 1
    edgeStart[from] = (edgeStart[from] as number) + 1
    edgeChar[e] = key % 65_536
    edgeTo[e] = trie.get(key) as number
  })
  for (let v = 0; v < nodes; v++) edgeStart[v + 1] = (edgeStart[v + 1] as number) + (edgeStart[v] as number)
  const out = Int32Array.from(outList)
  // failure links and dictionary links, breadth first
  const fail = new Int32Array(nodes)
  const dict = new Int32Array(nodes).fill(-1)
  const queue = new Int32Array(nodes)
  let qHead = 0
  let qTail = 0
  for (let e = edgeStart[0] as number; e < (edgeStart[1] as number); e++) queue[qTail++] = edgeTo[e] as number
  while (qHead < qTail) {
    const v = queue[qHead++] as number
    for (let e = edgeStart[v] as number; e < (edgeStart[v + 1] as number); e++) {
      const ch = edgeChar[e] as number
      const u = edgeTo[e] as number
      let f = fail[v] as number
      let to = step(edgeStart, edgeChar, edgeTo, f, ch)
      while (to < 0 && f !== 0) {
        f = fail[f] as number
        to = step(edgeStart, edgeChar, edgeTo, f, ch)
      }
      const target = to < 0 ? 0 : to
      fail[u] = target
      dict[u] = (out[target] as number) >= 0 ? target : (dict[target] as number)
      queue[qTail++] = u
    }
  }
  const parts = partText.length
  return {
    first,
    last,
    fixed,
    midStart,
    midCount,
    mids: Int32Array.from(mids),
    partLen: Int32Array.from(partText, (t) => t.length),
    byFirst,
    byLast,
    edgeStart,
    edgeChar,
    edgeTo,
    fail,
    out,
    dict,
    cand: new Int32Array(count),
    state: new Uint8Array(count),
    pos: new Int32Array(count),
    next: new Int32Array(count),
    passed: new Int32Array(count),
    head: new Int32Array(parts),
    tail: new Int32Array(parts),
  }
}

/** The child of node `v` by code unit `ch`, or -1. */
function step(edgeStart: Int32Array, edgeChar: Uint16Array, edgeTo: Int32Array, v: number, ch: number): number {
  let lo = edgeStart[v] as number
  let hi = edgeStart[v + 1] as number
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    const at = edgeChar[mid] as number
    if (at < ch) lo = mid + 1
    else if (at > ch) hi = mid
    else return edgeTo[mid] as number
  }
  return -1
}

function match(c: Compiled, all: readonly string[][], value: string, forceScan: boolean, work: MatchWork | undefined): number {
  const n = value.length
  const { first, last, fixed, midCount, cand } = c
  const count = first.length
  // the anchors: O(config), whatever the value's length
  let best = -1
  let left = 0
  for (let p = 0; p < count; p++) {
    if (n < (fixed[p] as number) || !value.startsWith(first[p] as string) || !value.endsWith(last[p] as string)) continue
    if (midCount[p] === 0) {
      best = p
      break
    }
    cand[left++] = p
  }
  if (left === 0) return best
  if (!forceScan && left * n <= SIMPLE_MAX_WORK) {
    for (let k = 0; k < left; k++) if (globMatch(all[cand[k] as number] as string[], value)) return cand[k] as number
    return best
  }
  return scan(c, value, left, best, work)
}

/** The one pass: the first of `cand[0 .. left)` (config order) that matches, or `best` (a later pattern that matched already). */
function scan(c: Compiled, value: string, left: number, best: number, work: MatchWork | undefined): number {
  const n = value.length
  const { first, last, midStart, midCount, mids, partLen, byFirst, byLast, edgeStart, edgeChar, edgeTo, fail, out, dict } = c
  const { cand, state, pos, next, head, tail } = c
  const count = first.length
  state.fill(0)
  head.fill(-1)
  for (let k = 0; k < left; k++) state[cand[k] as number] = PENDING
  const passed = c.passed // middle parts passed, per pattern
  let lo = 0 // cand[lo]: the first pattern still pending, in config order
  let byFirstAt = 0
  let byLastAt = 0
  let v = 0
  let steps = 0
  for (let i = 0; i < n; i++) {
    // patterns whose first part ends here start waiting for their first middle part
    while (byFirstAt < count && (first[byFirst[byFirstAt] as number] as string).length <= i) {
      const p = byFirst[byFirstAt++] as number
      if (state[p] !== PENDING) continue
      passed[p] = 0
      pos[p] = (first[p] as string).length
      const q = mids[midStart[p] as number] as number
      next[p] = -1
      if ((head[q] as number) < 0) head[q] = p
      else next[tail[q] as number] = p
      tail[q] = p
    }
    // patterns whose last part starts at or before here can no longer fit their middle parts
    let settled = false
    while (byLastAt < count && n - (last[byLast[byLastAt] as number] as string).length <= i) {
      const p = byLast[byLastAt++] as number
      if (state[p] !== PENDING) continue
      state[p] = DONE
      settled = true
    }
    // one automaton step
    const ch = value.charCodeAt(i)
    for (;;) {
      steps++
      const to = step(edgeStart, edgeChar, edgeTo, v, ch)
      if (to >= 0) {
        v = to
        break
      }
      if (v === 0) break
      v = fail[v] as number
    }
    // every part that ends here
    for (let o = (out[v] as number) >= 0 ? v : (dict[v] as number); o >= 0; o = dict[o] as number) {
      steps++
      const q = out[o] as number
      const start = i - (partLen[q] as number) + 1
      let p = head[q] as number
      while (p >= 0 && (pos[p] as number) <= start) {
        steps++
        head[q] = next[p] as number
        if (state[p] === PENDING) {
          const k = (passed[p] as number) + 1
          passed[p] = k
          pos[p] = i + 1
          if (k === midCount[p]) {
            state[p] = DONE
            settled = true
            // i + 1 <= n - last.length: a pattern past that bound was dropped above
            if (best < 0 || p < best) best = p
          } else {
            const r = mids[(midStart[p] as number) + k] as number
            next[p] = -1
            if ((head[r] as number) < 0) head[r] = p
            else next[tail[r] as number] = p
            tail[r] = p
          }
        }
        p = head[q] as number
      }
    }
    if (settled) {
      while (lo < left && state[cand[lo] as number] !== PENDING) lo++
      // every pattern before the best match is settled: no earlier one can match any more
      if (lo === left || (best >= 0 && (cand[lo] as number) > best)) break
    }
  }
  if (work !== undefined) work.steps += steps
  return best
}
