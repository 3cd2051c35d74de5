/**
 * The escrow script of the Redis strategy (docs/STORES-redis.md, "Escrow"): one call per hash
 * slot (or per chunk on a single server batching across slots) of an escrow namespace's batch.
 * Same key-window layout as the other scripts (lua.ts): `t`, `c:<nodeId>`, `s:<nodeId>`; a
 * node's `c:` is its reservation there; and `h`, the nodes holding one (a grant's `nodes`,
 * without an HLEN per grant).
 *
 * The group key (a HASH, in the call's slot: escrow.ts names it) holds `e` the epoch (engine ms
 * of the call that made it: a new one means the group's data was lost, or never held), `g` the
 * generation (one more per call: a process that sees it not above the last it saw knows writes
 * it was answered for were lost, as after a failover), and `n:<nodeId>` when each process last
 * called (engine ms). It lives `ttlMs` from the last refresh (`x`, engine ms), pushed back once
 * per quarter of `learnMs` at most, so it costs an HGETALL and an HSET per call. A grant costs an
 * HMGET of each window and an HSET (and a PEXPIREAT when it makes the key-window).
 */
import { luaScript as script } from './scripts.js'

/**
 * The group (epoch, generation, callers: a new epoch when the key is absent or holds `renew`),
 * then the writes and reads as PUSH does them, then each grant: with `rate` the current total
 * plus the previous window's total at the sliding weight of `nowMs`, `room = limit - rate`,
 * `need = minimum - own`: when `need <= room`, with `reach = max(minimum, min(wanted, own +
 * floor(room)))` (as many of the hits that ask as fit), own becomes `min(target, max(own, reach +
 * floor((room - max(0, reach - own)) / (4 * nodes))))` (MemoryStrategy.escrow's formula, in the
 * same IEEE double arithmetic). A grant is applied only outside the learning period (`learnMs` after
 * the epoch began) and when the batch's seq is newer than the node's; else the row is answered
 * as stored. A grant that cannot reach `minimum` is refused; with `countRefused` it still raises
 * the reservation to `wanted` (the denied hits count at once, fleet-wide).
 *
 * KEYS: the group key, `n` written key-windows, `r` read ones, then per grant its current and
 * previous window.
 * ARGV: nonce, nodeId, seq, nowMs, learnMs, ttlMs, nodes hint (the fleet as the caller last saw
 * it, 0 for none), renew (an epoch to replace, or ''), real (1 when nowMs is the real clock), n,
 * r, then count and expire-at per write,
 * then target, limit, minimum, window size, expire-at, countRefused (0|1) and wanted per grant.
 * Reply: one string, `nonce epoch generation learning(0|1) nodes`, then `t own` per write and
 * read, then `t own previousT previousOwn holders refused(0|1)` per grant.
 */
export const ESCROW = script(`
-- effects replication (the default from Redis 5): TIME may come before writes
if redis.replicate_commands then redis.replicate_commands() end
local node, seq = ARGV[2], ARGV[3]
local now, learn, hint = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[7])
local n, r = tonumber(ARGV[10]), tonumber(ARGV[11])
local seqn = tonumber(seq)
local cfield, sfield, nfield = 'c:' .. node, 's:' .. node, 'n:' .. node
-- whole numbers as they are (Lua's tostring is exact below 1e14), anything else round-trips
local function fmt(x)
  if x % 1 == 0 and x < 1e14 and x > -1e14 then return tostring(x) end
  return string.format('%.17g', x)
end
-- the server's clock, ms (only to time a new epoch's learning period: see below)
local function servernow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local gk = KEYS[1]
local all = redis.call('HGETALL', gk)
local epoch, gen, refreshed, es, live, stale = nil, 0, nil, nil, 1, {}
for i = 1, #all, 2 do
  local f, v = all[i], all[i + 1]
  if f == 'e' then epoch = v
  elseif f == 'g' then gen = tonumber(v)
  elseif f == 'es' then es = tonumber(v)
  elseif f == 'x' then refreshed = tonumber(v)
  elseif f == nfield then
  elseif tonumber(v) > now - learn then live = live + 1
  else stale[#stale + 1] = f end
end
local fresh = epoch == nil or epoch == ARGV[8]
if fresh then
  -- a new epoch, never at or before the one it replaces (clocks differ between processes)
  local old = tonumber(epoch or '')
  epoch = fmt((old and old >= now) and old + 1 or now)
  gen = 0
end
gen = gen + 1
-- x: when the key's expiry was last pushed back (at most once per quarter of learnMs, whoever calls)
local refresh = fresh or not refreshed or refreshed <= now - learn / 4 or refreshed > now
local fields = { 'g', tostring(gen), nfield, fmt(now) }
if refresh then
  fields[#fields + 1] = 'x'
  fields[#fields + 1] = fmt(now)
end
if fresh then
  -- es: when the epoch began on the server's clock, kept for its learning period when the
  -- callers' clocks are the real one (ARGV[9]): a call a client queued while the server was away
  -- runs late, with an old nowMs, and calls queued behind it run at once with later ones: on
  -- their clocks the learning period would be over before the epoch existed
  es = ARGV[9] == '1' and servernow() or nil
  fields[#fields + 1] = 'e'
  fields[#fields + 1] = epoch
  fields[#fields + 1] = 'es'
  fields[#fields + 1] = es and fmt(es) or ''
end
redis.call('HSET', gk, unpack(fields))
if refresh then redis.call('PEXPIRE', gk, ARGV[6]) end
if #stale > 0 then redis.call('HDEL', gk, unpack(stale)) end
local nodes = math.max(live, hint)
local learning = now < tonumber(epoch) + learn
if es and not learning and ARGV[9] == '1' then
  if servernow() < es + learn then learning = true else redis.call('HDEL', gk, 'es') end
end
local out = { ARGV[1], epoch, tostring(gen), learning and '1' or '0', tostring(nodes) }
-- the writes (newer seq only; a refused one is answered in its place), then the reads
for i = 1, n + r do
  local key = KEYS[1 + i]
  local held = redis.call('HMGET', key, 't', cfield, sfield, 'h')
  local total, own = held[1] or '0', held[2] or '0'
  if i <= n then
    local count = ARGV[10 + 2 * i]
    local answer = fmt((tonumber(total) - tonumber(own)) + tonumber(count))
    if not held[2] then
      -- h: the nodes holding a register in the window, one more with each new one
      redis.call('HSET', key, cfield, count, sfield, seq, 't', answer, 'h', tostring(tonumber(held[4] or '0') + 1))
    elseif tonumber(held[3]) < seqn then
      redis.call('HSET', key, cfield, count, sfield, seq, 't', answer)
    end
    total = answer
    own = count
    if not held[1] then redis.call('PEXPIREAT', key, ARGV[11 + 2 * i]) end
  end
  out[#out + 1] = total
  out[#out + 1] = own
end
local k, a = 1 + n + r, 11 + 2 * n
for j = k + 1, #KEYS, 2 do
  local key = KEYS[j]
  local held = redis.call('HMGET', key, 't', cfield, sfield, 'h')
  local before = redis.call('HMGET', KEYS[j + 1], 't', cfield)
  local holders = held[4] or '0'
  local total, own = tonumber(held[1] or '0'), tonumber(held[2] or '0')
  local ptotal = tonumber(before[1] or '0')
  local answer, mine, refused = held[1] or '0', held[2] or '0', '0'
  if not learning and (not held[3] or tonumber(held[3]) < seqn) then
    local target, limit, minimum, size = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
    local weight = (size - (now - math.floor(now / size) * size)) / size
    local room = limit - (total + ptotal * weight)
    local need = minimum - own
    local raised = own
    local wanted = tonumber(ARGV[a + 7])
    if need <= room then
      -- the hits that ask, as many as fit, then a share of what is left: a quarter of it split
      -- over the processes
      local reach = math.max(minimum, math.min(wanted, own + math.floor(math.max(room, 0))))
      local share = math.floor((room - math.max(0, reach - own)) / (4 * nodes))
      raised = math.min(target, math.max(own, reach + share))
    else
      refused = '1'
      -- countRefused: the denied hits count, as the process counts them (countDenied)
      if ARGV[a + 6] == '1' and wanted > own then raised = wanted end
    end
    if raised > own then
      answer = fmt((total - own) + raised)
      mine = fmt(raised)
    end
    -- the seq is taken even when nothing is raised: a retried grant changes nothing
    if held[2] then
      redis.call('HSET', key, cfield, mine, sfield, seq, 't', answer)
    else
      holders = tostring(tonumber(holders) + 1)
      redis.call('HSET', key, cfield, mine, sfield, seq, 't', answer, 'h', holders)
    end
    if not held[1] then redis.call('PEXPIREAT', key, ARGV[a + 5]) end
  end
  out[#out + 1] = answer
  out[#out + 1] = mine
  out[#out + 1] = before[1] or '0'
  out[#out + 1] = before[2] or '0'
  out[#out + 1] = holders
  out[#out + 1] = refused
  a = a + 7
end
return table.concat(out, ' ')
`)
