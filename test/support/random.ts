/**
 * A seeded pseudo-random sequence in [0, 1) (a linear congruential generator): the same seed
 * gives the same draws on every run, so a randomised test fails the same way each time.
 */
export function seededRandom(seed: number): () => number {
  let state = seed
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2_147_483_648
    return state / 2_147_483_648
  }
}
