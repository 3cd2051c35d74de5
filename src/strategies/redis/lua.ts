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
