import { ConfigError } from '../core/errors.js'
import { seededRandom, type Trace, TraceBuilder } from './trace.js'

/**
 * Synthetic traces, each built to show one behaviour of a limiter (docs/ACCURACY.md):
 *
 * - `poisson`: Poisson arrivals over many keys whose rates are log-normal, the shape of real
 *   traffic (most keys far below the limit, a few near or above it);
 * - `steady`: one key evenly at `factor` × the limit (1.5 by default): the over-admission of a
 *   fleet, cleanly;
 * - `boundary`: `limit` hits in the second before a window boundary and `limit` in the second
 *   after, for several keys: a fixed window admits twice the limit there;
 * - `pacing`: a burst of `limit` at the end of a window, then tries paced to the rate at which
 *   the previous window's weight decays (limit / window): the sliding-window counter's worst case.
 *
 * Times start at `startMs`, on a window boundary, so the boundaries fall where the names say.
 */
export type ProfileName = 'poisson' | 'steady' | 'boundary' | 'pacing'

export const PROFILE_NAMES: readonly ProfileName[] = ['poisson', 'steady', 'boundary', 'pacing']

/** Options of {@link syntheticTrace}. */
export interface ProfileOptions {
  readonly profile: ProfileName
  /** The limit the traffic is shaped against. */
  readonly limit: number
  /** The window, seconds. */
  readonly windowSec: number
  /** Trace length, seconds. @default 10 windows */
  readonly durationSec?: number
  /** Keys (poisson, boundary, pacing). @default 2000 for poisson, 20 for boundary and pacing */
  readonly keys?: number
  /** PRNG seed. @default 1 */
  readonly seed?: number
  /** Steady key's rate as a multiple of the limit. @default 1.5 */
  readonly factor?: number
  /** Poisson: the median key's rate as a share of the limit. @default 0.1 */
  readonly medianShare?: number
  /** Poisson: sigma of the log-normal rates. @default 1.5 */
  readonly sigma?: number
  /** First request's time, epoch ms, rounded up to a window boundary. @default 1_700_000_000_000 */
  readonly startMs?: number
}

function positive(option: string, value: number | undefined, fallback: number, integer = false): number {
  const v = value ?? fallback
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0 || (integer && !Number.isInteger(v)))
    throw new ConfigError('INVALID_OPTION', `${option} must be a positive ${integer ? 'integer' : 'number'}, got ${String(v)}`)
  return v
}

/** Builds the synthetic trace `options.profile`; its options are checked and named when bad. */
export function syntheticTrace(options: ProfileOptions): Trace {
  const { profile } = options
  if (!PROFILE_NAMES.includes(profile))
    throw new ConfigError('INVALID_OPTION', `profile must be one of ${PROFILE_NAMES.join(', ')}, got ${JSON.stringify(profile)}`)
  const limit = positive('limit', options.limit, 0, true)
  const windowMs = Math.round(positive('window', options.windowSec, 0) * 1000)
  const durationMs = positive('duration', options.durationSec, (windowMs * 10) / 1000) * 1000
  const seed = options.seed ?? 1
  const startMs = Math.ceil((options.startMs ?? 1_700_000_000_000) / windowMs) * windowMs
  const b = new TraceBuilder()
  const random = seededRandom(seed)
  switch (profile) {
    case 'poisson': {
      const keys = positive('keys', options.keys, 2000, true)
      const median = (positive('medianShare', options.medianShare, 0.1) * limit) / windowMs
      const sigma = positive('sigma', options.sigma, 1.5)
      for (let k = 0; k < keys; k++) {
        // log-normal rate (per ms) by Box-Muller
        const z = Math.sqrt(-2 * Math.log(1 - random())) * Math.cos(2 * Math.PI * random())
        const rate = median * Math.exp(sigma * z)
        let t = startMs + exponential(random, rate)
        while (t < startMs + durationMs) {
          b.add(Math.floor(t), `client-${k}`)
          t += exponential(random, rate)
        }
      }
      break
    }
    case 'steady': {
      const factor = positive('factor', options.factor, 1.5)
      const gapMs = windowMs / (limit * factor)
      for (let t = startMs; t < startMs + durationMs; t += gapMs) b.add(Math.floor(t), 'steady')
      break
    }
    case 'boundary': {
      const keys = positive('keys', options.keys, 20, true)
      const spanMs = Math.min(1000, windowMs / 4)
      // one burst pair every 3 windows: the counts of the last pair have left both windows
      for (let boundary = startMs + windowMs; boundary + spanMs < startMs + durationMs; boundary += 3 * windowMs) {
        for (let k = 0; k < keys; k++) {
          const offset = Math.floor(random() * spanMs * 0.1)
          for (let i = 0; i < limit; i++) {
            b.add(Math.floor(boundary - spanMs + offset + (i * (spanMs - offset)) / limit), `burst-${k}`)
            b.add(Math.floor(boundary + (i * (spanMs - offset)) / limit), `burst-${k}`)
          }
        }
      }
      break
    }
    case 'pacing': {
      const keys = positive('keys', options.keys, 20, true)
      const spanMs = Math.min(1000, windowMs / 4)
      const gapMs = windowMs / limit
      // a burst at the end of a window, then paced tries for two windows; every 4 windows
      for (let boundary = startMs + windowMs; boundary + 2 * windowMs <= startMs + durationMs; boundary += 4 * windowMs) {
        for (let k = 0; k < keys; k++) {
          const phase = random() * gapMs
          for (let i = 0; i < limit; i++) b.add(Math.floor(boundary - spanMs + (i * spanMs) / limit), `pacer-${k}`)
          for (let t = boundary + phase; t < boundary + 2 * windowMs; t += gapMs) b.add(Math.floor(t), `pacer-${k}`)
        }
      }
      break
    }
  }
  return b.build(false)
}

function exponential(random: () => number, ratePerMs: number): number {
  return -Math.log(1 - random()) / ratePerMs
}
