/**
 * ratelimiting/simple: the Go limiter's API (`perMinute(n)`, `allow(key)`, `allowWithStats(key)`)
 * over this library's sliding-window engine, in local memory or any store.
 */
export type { SimpleLimiterOptions } from './simple-limiter.js'
export { perMinute, perNMinute, perNSecond, perSecond, SimpleLimiter } from './simple-limiter.js'
export type { GoWindowStats, WindowStatsFields } from './window-stats.js'
export { formatWindowTime, WindowStats } from './window-stats.js'
