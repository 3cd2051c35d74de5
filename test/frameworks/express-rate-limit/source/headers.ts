// express-rate-limit's header setters are internal (its package exports only rateLimit,
// MemoryStore, ipKeyGenerator and the time constants), so a test that calls them cannot run
// against the package: each one throws, and the runner lists that test as not runnable.
function internal(name: string): () => never {
  return () => {
    throw new Error(`${name} is internal to express-rate-limit and not exported by its package`)
  }
}

export const setLegacyHeaders = internal('setLegacyHeaders')
export const setDraft6Headers = internal('setDraft6Headers')
export const setDraft7Headers = internal('setDraft7Headers')
export const setDraft8Headers = internal('setDraft8Headers')
export const setRetryAfterHeader = internal('setRetryAfterHeader')
