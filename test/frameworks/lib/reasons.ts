/**
 * The reasons a framework's own test may fail with our store. Each is sliding-window semantics;
 * docs/ADAPTERS.md ("What differs from a fixed window") explains them one by one.
 */

/** Over the limit, Retry-After (and the reset sent with it) is the exact wait, not the end of a fixed window. */
export const EXACT_WAIT = 'exact wait: over the limit, Retry-After and the reset are when a request fits again, not a fixed window’s end'

/** After the time a fixed window would have reset, the previous window still weighs. */
export const PREVIOUS_WEIGHS = 'previous window weighs: once a fixed window would have reset, the hits before still count, weighted down'

/** The reset is the end of the window aligned to the epoch, not windowMs after the client's first hit. */
export const ALIGNED_WINDOW = 'aligned windows: the reset is the end of the epoch-aligned window, not one window after the first request'

/** continueExceeding and exponentialBackoff restart a fixed window: refused when registered. */
export const FIXED_WINDOW_OPTION =
  'fixed-window option: continueExceeding and exponentialBackoff restart a fixed window and are refused at registration'
