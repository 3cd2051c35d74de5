/**
 * The Lua scripts of the Redis strategy, sent by SHA (EVALSHA) and by source when the server
 * has forgotten them (NOSCRIPT). Every key of one call shares a hash tag, so each script runs
 * unchanged on Redis Cluster. Numbers go back as strings: Redis truncates Lua number replies to
 * integers, and `%.17g` round-trips any double exactly.
 *
 * Layout of one key-window (a HASH): `c:<nodeId>` the node's cumulative count, `s:<nodeId>` the
 * seq of the batch that wrote it, and `t` the total: the sum of the node counts, moved by each
 * write by the difference it makes and set to 0 by a reset. A row costs one HMGET however many
 * nodes write the key (no HGETALL).
 */
import { luaScript as script } from './scripts.js'

/**
 * Writes a node's cumulative counts (when the batch's seq is newer than the one held), sets the
 * absolute expiry, and reads back every key's total and the node's own count. A write refused
 * for its seq is answered as if applied in its place (its count, the others' as stored).
 *
 * KEYS: the key-windows; the first `n` are written, the rest only read.
 * ARGV: nonce, nodeId, seq, n, then per written key: count, expire-at (epoch ms).
 * Reply: one string, the nonce then per key its total and own count, separated by spaces (one
 * bulk string decodes several times faster in the client than an array of them).
 */
export const PUSH = script(`
local seq, n = ARGV[3], tonumber(ARGV[4])
local cfield, sfield = 'c:' .. ARGV[2], 's:' .. ARGV[2]
local seqn = tonumber(seq)
local out = { ARGV[1] }
for i = 1, #KEYS do
  local key = KEYS[i]
  local held = redis.call('HMGET', key, 't', cfield, sfield)
  local total, own = held[1] or '0', held[2] or '0'
  if i <= n then
    local count = ARGV[3 + 2 * i]
    -- the others' share first, then this node's count: exact when the node is alone
    local answer = string.format('%.17g', (tonumber(total) - tonumber(own)) + tonumber(count))
    if not held[3] or tonumber(held[3]) < seqn then
      redis.call('HSET', key, cfield, count, sfield, seq, 't', answer)
    end
    -- written or refused (an older seq), the write is answered in its place in the node's sequence
    total = answer
    own = count
    -- t exists exactly when the key does, and every key is created here with its expiry
    -- (absolute, the same for every write of the window): set it once, on creation
    if not held[1] then redis.call('PEXPIREAT', key, ARGV[4 + 2 * i]) end
  end
  out[2 * i] = total
  out[2 * i + 1] = own
end
return table.concat(out, ' ')
`)

/**
 * Resets key-windows: the total becomes 0 at this instant (node counts stay, so later pushes
 * count from there). Windows the store does not hold stay absent.
 *
 * KEYS: the key-windows. ARGV: nonce. Reply: nonce.
 */
export const RESET = script(`
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('HSET', KEYS[i], 't', '0') end
end
return ARGV[1]
`)

/**
 * {@link PUSH} for one synchronous hit, its common case: one key-window written (the key's current
 * window) and the rest of the key's windows only read, with none of PUSH's loop, table or format
 * work around the two commands that matter (HMGET, HSET). Same layout, same answer, so PUSH and
 * SYNC_PUSH calls on one key-window mix freely (a sync retrying a failed synchronous hit).
 *
 * KEYS: the written key-window, then those only read.
 * ARGV: nonce, nodeId, seq, count, expire-at (epoch ms) of the written one.
 * Reply: as PUSH's.
 */
export const SYNC_PUSH = script(`
local key, seq, count = KEYS[1], ARGV[3], ARGV[4]
local cfield, sfield = 'c:' .. ARGV[2], 's:' .. ARGV[2]
local held = redis.call('HMGET', key, 't', cfield, sfield)
-- the others' share first, then this node's count: exact when the node is alone
local sum = (tonumber(held[1] or 0) - tonumber(held[2] or 0)) + tonumber(count)
-- whole numbers as they are (Lua's tostring is exact below 1e14), anything else round-trips
local answer = (sum % 1 == 0 and sum < 1e14 and sum > -1e14) and tostring(sum) or string.format('%.17g', sum)
if not held[3] or tonumber(held[3]) < tonumber(seq) then
  redis.call('HSET', key, cfield, count, sfield, seq, 't', answer)
  -- t exists exactly when the key does: a new key-window gets its (absolute) expiry here
  if not held[1] then redis.call('PEXPIREAT', key, ARGV[5]) end
end
local out = ARGV[1] .. ' ' .. answer .. ' ' .. count
for i = 2, #KEYS do
  local read = redis.call('HMGET', KEYS[i], 't', cfield)
  out = out .. ' ' .. (read[1] or '0') .. ' ' .. (read[2] or '0')
end
return out
`)

/**
 * {@link PUSH} for a batch with blocks (`DiffBatch.blocks`, `readBlocks`); PUSH itself stays as it
 * was for batches without. First the block writes (so every row of the call is read after them):
 * an end later than the one held replaces it, with a relative expiry (PX) a grace after the end,
 * and `0` deletes the block. Then PUSH's work on the key-windows, then the end of each block
 * name, or `0` when it has none after `nowMs`.
 *
 * KEYS: the key-windows (the first `n` written, the rest only read), then `b` block names.
 * ARGV: nonce, nodeId, seq, n, b, nowMs, w, then count, expire-at per written key-window, then
 * per block write: the index of its block name (1 for the first), untilMs, PX (ms).
 * Reply: PUSH's string, then one end per block name: `nonce t1 own1 … b1 b2 …`.
 */
export const PUSH_BLOCKS = script(`
local seq, n, b = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local now, w = tonumber(ARGV[6]), tonumber(ARGV[7])
local m = #KEYS - b
local cfield, sfield = 'c:' .. ARGV[2], 's:' .. ARGV[2]
local seqn = tonumber(seq)
local o = 7 + 2 * n
for j = o + 1, o + 3 * w, 3 do
  local bk, untilMs = KEYS[m + tonumber(ARGV[j])], ARGV[j + 1]
  if untilMs == '0' then
    redis.call('DEL', bk)
  else
    -- the later end wins: a block is lengthened or lifted, never shortened
    local held = redis.call('GET', bk)
    if not held or tonumber(held) < tonumber(untilMs) then redis.call('SET', bk, untilMs, 'PX', ARGV[j + 2]) end
  end
end
local out = { ARGV[1] }
for i = 1, m do
  local key = KEYS[i]
  local held = redis.call('HMGET', key, 't', cfield, sfield)
  local total, own = held[1] or '0', held[2] or '0'
  if i <= n then
    local count = ARGV[6 + 2 * i]
    local answer = string.format('%.17g', (tonumber(total) - tonumber(own)) + tonumber(count))
    if not held[3] or tonumber(held[3]) < seqn then
      redis.call('HSET', key, cfield, count, sfield, seq, 't', answer)
    end
    total = answer
    own = count
    if not held[1] then redis.call('PEXPIREAT', key, ARGV[7 + 2 * i]) end
  end
  out[2 * i] = total
  out[2 * i + 1] = own
end
for j = 1, b do
  local ends = redis.call('GET', KEYS[m + j])
  out[2 * m + 1 + j] = (ends and tonumber(ends) > now) and ends or '0'
end
return table.concat(out, ' ')
`)

/**
 * {@link SYNC_PUSH} for a synchronous hit in a namespace with blocks: the key's block writes
 * first (as {@link PUSH_BLOCKS} does them), then SYNC_PUSH's work, then the key's block end.
 *
 * KEYS: the written key-window, those only read, then the key's block name.
 * ARGV: nonce, nodeId, seq, count, expire-at, nowMs, then untilMs and PX (ms) per block write.
 * Reply: SYNC_PUSH's string, then the block end: `nonce t1 own1 … b`.
 */
export const SYNC_PUSH_BLOCKS = script(`
local key, seq, count = KEYS[1], ARGV[3], ARGV[4]
local bk = KEYS[#KEYS]
for j = 7, #ARGV, 2 do
  local untilMs = ARGV[j]
  if untilMs == '0' then
    redis.call('DEL', bk)
  else
    local ends = redis.call('GET', bk)
    if not ends or tonumber(ends) < tonumber(untilMs) then redis.call('SET', bk, untilMs, 'PX', ARGV[j + 1]) end
  end
end
local cfield, sfield = 'c:' .. ARGV[2], 's:' .. ARGV[2]
local held = redis.call('HMGET', key, 't', cfield, sfield)
local sum = (tonumber(held[1] or 0) - tonumber(held[2] or 0)) + tonumber(count)
local answer = (sum % 1 == 0 and sum < 1e14 and sum > -1e14) and tostring(sum) or string.format('%.17g', sum)
if not held[3] or tonumber(held[3]) < tonumber(seq) then
  redis.call('HSET', key, cfield, count, sfield, seq, 't', answer)
  if not held[1] then redis.call('PEXPIREAT', key, ARGV[5]) end
end
local out = ARGV[1] .. ' ' .. answer .. ' ' .. count
for i = 2, #KEYS - 1 do
  local read = redis.call('HMGET', KEYS[i], 't', cfield)
  out = out .. ' ' .. (read[1] or '0') .. ' ' .. (read[2] or '0')
end
local ends = redis.call('GET', bk)
return out .. ' ' .. ((ends and tonumber(ends) > tonumber(ARGV[6])) and ends or '0')
`)
