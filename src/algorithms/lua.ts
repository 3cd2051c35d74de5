import { type LuaScript, luaScript } from '../strategies/redis/scripts.js'

// Every script touches exactly one key, declared in KEYS, so each runs in one Redis Cluster slot
// whatever the user id, without a hash tag.
//
// Every script also takes a deadline (ARGV, ms on Redis's clock, 0 for none) and returns Redis's
// time last. A script that Redis runs after its deadline (a server frozen while the request
// timed out, which resumes later) changes nothing and returns {-1, time}: a request answered 503
// is never counted afterwards. The service learns the offset between its clock and Redis's from
// the times returned (redis-script.ts).
//
// Keys of another type: without a scope, the sliding log's `<prefix>:<userId>` and the fixed
// window's `<prefix>:<userId>:<window>` overlap (user `u1:28333333` in the log, user `u1` in
// bucket 28333333). Both exist only after `use-algo` was switched, while the old keys expire.
// The fixed window, whose key is derived from its own user, replaces a ZSET in its way (a
// leftover of the algorithm no longer in use); the sliding log denies a user whose key is a
// fixed window's counter, without writing, until that counter expires. Neither fails with
// WRONGTYPE, and neither lets one user reset another's live count. The checks learn of another
// type from the WRONGTYPE error of their first command on the key (redis.pcall), then ask TYPE:
// no TYPE call on a decision whose key is of the right type (or absent), one command fewer.

const CLOCK = `if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local redisNow = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local deadline = tonumber(ARGV[DEADLINE])
if deadline > 0 and redisNow > deadline then
  return {-1, redisNow}
end
`

function withClock(deadlineArg: number, body: string): string {
  return CLOCK.replace('DEADLINE', String(deadlineArg)) + body
}

/**
 * A check script and its batch form: many checks, each of one key and `args` arguments, in one
 * call (redis-script.ts sends the checks of one event-loop iteration together).
 */
export interface BatchableScript extends LuaScript {
  /** KEYS one per check; ARGV the deadline, then each check's `args` arguments in turn. */
  readonly batch: LuaScript
  readonly args: number
}

// The batch runs the check's own body once per check, as a function of that check's KEYS and
// ARGV, after one clock read and deadline test for all. A check that fails (a value of another
// type the body does not handle) answers its own error, { -2, message }, and the others still
// run, as separate calls would. Each check answers { n, its n numbers }; Redis's time comes last.
const BATCH = `local function one(KEYS, ARGV)
BODY
end
local out = {}
local n = 0
for i = 1, #KEYS do
  local args = {}
  local base = 1 + (i - 1) * ARGS
  for j = 1, ARGS do args[j] = ARGV[base + j] end
  local ok, r = pcall(one, {KEYS[i]}, args)
  if not ok or r.err then
    local e = r
    if ok or type(e) == 'table' then e = e.err end
    out[n + 1] = -2
    out[n + 2] = tostring(e)
    n = n + 2
  else
    out[n + 1] = #r - 1
    for j = 1, #r - 1 do out[n + 1 + j] = r[j] end
    n = n + #r
  end
end
out[n + 1] = redisNow
return out
`

function withBatch(args: number, body: string): BatchableScript {
  const batch = CLOCK.replace('DEADLINE', '1') + BATCH.replaceAll('ARGS', String(args)).replace('BODY', () => body.trimEnd())
  return { ...luaScript(withClock(args + 1, body)), batch: luaScript(batch), args }
}

/**
 * Fixed window, the seed's script with a cost: `INCRBY` the bucket's string counter, `EXPIRE`
 * it for one window when this call created it, admit iff the counter is at most the limit. A
 * cost above the limit is denied without being written. KEYS[1] the bucket's key; ARGV cost,
 * limit, ttl, ttl unit ("s" | "ms"), countDenied ("1" | "0"), deadline.
 * Returns { allowed, count, redisNow } (or { -1, redisNow } past the deadline).
 */
export const FIXED_WINDOW_CHECK = withBatch(
  5,
  `local key = KEYS[1]
local cost = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if cost > limit then
  local kind = redis.call('TYPE', key).ok
  if kind ~= 'string' and kind ~= 'none' then
    redis.call('DEL', key)
  end
  return {0, tonumber(redis.call('GET', key)) or 0, redisNow}
end
local current = redis.pcall('INCRBY', key, cost)
if type(current) == 'table' then
  if redis.call('TYPE', key).ok == 'string' then
    return current
  end
  redis.call('DEL', key)
  current = redis.call('INCRBY', key, cost)
end
if current == cost then
  if ARGV[4] == 's' then
    redis.call('EXPIRE', key, ARGV[3])
  else
    redis.call('PEXPIRE', key, ARGV[3])
  end
end
if current <= limit then
  return {1, current, redisNow}
end
if ARGV[5] == '0' then
  current = redis.call('DECRBY', key, cost)
  if current <= 0 then
    redis.call('DEL', key)
  end
end
return {0, current, redisNow}
`,
)

/** Fixed window, read only. KEYS[1] the bucket key; ARGV deadline. Returns { count, redisNow }. */
export const FIXED_WINDOW_PEEK = luaScript(
  withClock(
    1,
    `if redis.call('TYPE', KEYS[1]).ok ~= 'string' then
  return {0, redisNow}
end
return {tonumber(redis.call('GET', KEYS[1])) or 0, redisNow}
`,
  ),
)

// The sliding log's layout. One member per admitted request, scored by its ms time: `<unique>`
// for a cost of 1 (the seed's data: ZCARD is the count) and `<unique>:<cost>` above. When some
// member costs more than 1, the member "#cost" holds the sum of (cost - 1) over the log, as its
// score negated minus 1 (so it is at most -1: the seed's prune, ZREMRANGEBYSCORE 0 now-window,
// never removes it, and it sorts first). The count is ZCARD (without "#cost") plus that sum;
// pruning subtracts the extra cost of the members it removes, each read once when it leaves.
// The work per request does not depend on the cost.
//
// The state is read from the head of the set (ZRANGE 0 1: "#cost" if present, since it sorts
// first, and the oldest member), which costs the same whatever the log holds, where ZSCORE of
// "#cost" scanned a small set's whole listpack. The prune runs only when the oldest member has
// left the window; `oldest` stays the oldest member when it did not (see retryAt).
function logState(wrongType: string): string {
  return `local key = KEYS[1]
local head = redis.pcall('ZRANGE', key, 0, 1, 'WITHSCORES')
if head.err then
  if redis.call('TYPE', key).ok == 'zset' then
    return head
  end
  local pttl = redis.call('PTTL', key)
  if pttl < 0 then pttl = window end
  return ${wrongType}
end
local cutoff = now - window
local extra = 0
local first = 0
local oldest = tonumber(head[2])
if head[1] == '#cost' then
  extra = -oldest - 1
  first = 1
  oldest = tonumber(head[4])
end
local stored = extra
local pruned = false
if oldest and oldest <= cutoff then
  if first == 1 then
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', key, 0, cutoff)) do
      local c = string.match(m, ':(%d+)$')
      if c then extra = extra - (tonumber(c) - 1) end
    end
  end
  redis.call('ZREMRANGEBYSCORE', key, 0, cutoff)
  pruned = true
end
local members = redis.call('ZCARD', key) - first
`
}

// "#cost" written only when its sum changed, removed when it fell to 0.
const STORE_EXTRA = `if extra > 0 then
  if extra ~= stored then
    redis.call('ZADD', key, -(extra + 1), '#cost')
  end
  first = 1
elseif first == 1 then
  redis.call('ZREM', key, '#cost')
  first = 0
end
`

// When the log holds count and a request of cost needs room: the time the request would fit,
// from the members leaving oldest first. Exact by rank when every member costs 1 (the oldest
// member, read with the state, when the request needs one slot and nothing was pruned);
// otherwise the costs of the oldest 64 are added up, and beyond them the rank bound (each member
// costs at least 1) gives a time at which the request surely fits.
const LOG_RETRY = `local function retryAt(count, cost)
  if cost > limit then return -1 end
  local need = count + cost - limit
  local rank = need - 1
  if extra > 0 then
    local walked = redis.call('ZRANGE', key, first, first + 63, 'WITHSCORES')
    local freed = 0
    for i = 1, #walked, 2 do
      local c = tonumber(string.match(walked[i], ':(%d+)$') or '1')
      freed = freed + c
      if freed >= need then return tonumber(walked[i + 1]) + window end
    end
    if rank > members - 1 then rank = members - 1 end
  elseif rank == 0 and not pruned and oldest then
    return oldest + window
  end
  local e = redis.call('ZRANGE', key, first + rank, first + rank, 'WITHSCORES')
  if e[2] then return tonumber(e[2]) + window end
  return -1
end
local function resetAt()
  if members == 0 then return -1 end
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  return tonumber(newest[2]) + window
end
`

/**
 * Sliding log, the seed's script with a cost and the data for Retry-After: prune entries at or
 * before now - window, count, admit iff count + cost <= limit (the seed's count < limit for cost
 * 1) and add one member for the request, PEXPIRE 2 x window, all in one script so two concurrent
 * requests cannot both take the last slot. A denial adds nothing and leaves the expiry alone: it
 * was set when the newest member was added, so it already outlives every member by a window. KEYS[1] the log's key; ARGV nowMs, windowMs, limit,
 * cost, member, deadline. Returns { allowed, count, retryAtMs or -1, resetAtMs or -1, redisNow }.
 */
export const SLIDING_LOG_CHECK = withBatch(
  5,
  `local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local cost = tonumber(ARGV[4])
${logState('{0, limit, now + pttl, now + pttl, redisNow}')}${LOG_RETRY}local count = members + extra
local allowed = 0
if count + cost <= limit then
  if cost == 1 then
    redis.call('ZADD', key, now, ARGV[5])
  else
    redis.call('ZADD', key, now, ARGV[5] .. ':' .. cost)
    extra = extra + cost - 1
  end
  members = members + 1
  count = count + cost
  allowed = 1
end
${STORE_EXTRA}if allowed == 1 then
  redis.call('PEXPIRE', key, window * 2)
end
local retry = -1
if allowed == 0 then retry = retryAt(count, cost) end
return {allowed, count, retry, resetAt(), redisNow}
`,
)

/**
 * Sliding log, without counting: what a request of cost 1 would get (expired entries are
 * pruned, as a check would). KEYS[1] the log's key; ARGV nowMs, windowMs, limit, deadline.
 * Returns { count, retryAtMs or -1, resetAtMs or -1, redisNow }.
 */
export const SLIDING_LOG_PEEK = luaScript(
  withClock(
    4,
    `local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
${logState('{limit, now + pttl, now + pttl, redisNow}')}${LOG_RETRY}${STORE_EXTRA}local count = members + extra
local retry = -1
if count + 1 > limit then retry = retryAt(count, 1) end
return {count, retry, resetAt(), redisNow}
`,
  ),
)

/** Deletes KEYS[1] when it holds ARGV[1] ("string" or "zset"); ARGV[2] deadline. Returns { deleted, redisNow }. */
export const DELETE_KEY = luaScript(
  withClock(
    2,
    `if redis.call('TYPE', KEYS[1]).ok ~= ARGV[1] then
  return {0, redisNow}
end
return {redis.call('DEL', KEYS[1]), redisNow}
`,
  ),
)
