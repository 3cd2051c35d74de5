import { luaScript } from './redis-script.js'

// Every script touches exactly one key, declared in KEYS, so each runs in one Redis Cluster slot
// whatever the user id; the `{userId}` braces also make it the hash tag, as in the seed.

/**
 * Fixed window, the seed's script with a cost: `INCRBY` the bucket's string counter, `EXPIRE`
 * it for one window when this call created it, admit iff the counter is at most the limit.
 * KEYS[1] `<prefix>:{userId}:<window>`; ARGV cost, limit, ttl, ttl unit ("s" | "ms"),
 * countDenied ("1" | "0"). Returns { allowed, count }.
 */
export const FIXED_WINDOW_CHECK = luaScript(`local key = KEYS[1]
local cost = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local current = redis.call('INCRBY', key, cost)
if current == cost then
  if ARGV[4] == 's' then
    redis.call('EXPIRE', key, ARGV[3])
  else
    redis.call('PEXPIRE', key, ARGV[3])
  end
end
if current <= limit then
  return {1, current}
end
if ARGV[5] == '0' then
  current = redis.call('DECRBY', key, cost)
  if current <= 0 then
    redis.call('DEL', key)
  end
end
return {0, current}
`)

/** Fixed window, read only. KEYS[1] the bucket key. Returns { count }. */
export const FIXED_WINDOW_PEEK = luaScript(`local v = redis.call('GET', KEYS[1])
return {tonumber(v) or 0}
`)

/**
 * Sliding log, the seed's script with a cost and the data for Retry-After: prune entries at or
 * before now - window, count, admit iff count + cost <= limit (the seed's count < limit for cost
 * 1) and add cost unique members scored now, PEXPIRE 2 x window, all in one script so two
 * concurrent requests cannot both take the last slot.
 * KEYS[1] `<prefix>:{userId}`; ARGV nowMs, windowMs, limit, cost, member prefix.
 * Returns { allowed, count, retryAtMs or -1, resetAtMs or -1 }.
 */
export const SLIDING_LOG_CHECK = luaScript(`local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
local count = redis.call('ZCARD', key)
local allowed = 0
if count + cost <= limit then
  -- ZADD takes many members: one call per 500 keeps Lua's stack small for a large cost
  local args = {}
  for i = 1, cost do
    args[#args + 1] = now
    args[#args + 1] = ARGV[5] .. i
    if #args == 1000 or i == cost then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  count = count + cost
  allowed = 1
end
redis.call('PEXPIRE', key, window * 2)
local retryAt = -1
if allowed == 0 and cost <= limit then
  local k = count + cost - limit - 1
  local e = redis.call('ZRANGE', key, k, k, 'WITHSCORES')
  if e[2] then retryAt = tonumber(e[2]) + window end
end
local resetAt = -1
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
if newest[2] then resetAt = tonumber(newest[2]) + window end
return {allowed, count, retryAt, resetAt}
`)

/**
 * Sliding log, read only: what a request of cost 1 would get. KEYS[1] the log key; ARGV nowMs,
 * windowMs, limit. Returns { count, retryAtMs or -1, resetAtMs or -1 }.
 */
export const SLIDING_LOG_PEEK = luaScript(`local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local from = '(' .. string.format('%d', now - window)
local count = redis.call('ZCOUNT', key, from, '+inf')
local retryAt = -1
if count + 1 > limit then
  local e = redis.call('ZRANGEBYSCORE', key, from, '+inf', 'WITHSCORES', 'LIMIT', count - limit, 1)
  if e[2] then retryAt = tonumber(e[2]) + window end
end
local resetAt = -1
if count > 0 then
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[2] then resetAt = tonumber(newest[2]) + window end
end
return {count, retryAt, resetAt}
`)

/** Deletes KEYS[1]. */
export const DELETE_KEY = luaScript(`return redis.call('DEL', KEYS[1])
`)
