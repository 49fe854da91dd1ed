-- One tenant's sliding-window rate limit, atomically (the algorithm of policies/limits.py).
-- KEYS[1] zset: entry id -> admission time    KEYS[2] hash: entry id -> tokens
-- KEYS[3] string: sum of the tokens in the window
-- admit:  ARGV = "admit", rpm (-1: off), tpm (-1: off), tokens, entry id, window seconds
--   -> {admitted 0/1, remaining requests (-1: off), remaining tokens (-1: off),
--       reset requests ms, reset tokens ms, too large 0/1}
-- settle: ARGV = "settle", entry id, tokens, window seconds -> 1 if the entry was still in the window
-- The clock is Redis's own, so every gateway process reads the same one.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local action = ARGV[1]

if action == 'settle' then
  local old = redis.call('HGET', KEYS[2], ARGV[2])
  if not old then return 0 end
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  redis.call('INCRBY', KEYS[3], tonumber(ARGV[3]) - tonumber(old))
  return 1
end

local rpm, tpm, tokens = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local id, window = ARGV[5], tonumber(ARGV[6])
local horizon = now - window

local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', horizon)
if #expired > 0 then
  local freed = 0
  for _, amount in ipairs(redis.call('HMGET', KEYS[2], unpack(expired))) do
    freed = freed + (tonumber(amount) or 0)
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', horizon)
  redis.call('HDEL', KEYS[2], unpack(expired))
  redis.call('DECRBY', KEYS[3], freed)
end

local count = redis.call('ZCARD', KEYS[1])
local total = tonumber(redis.call('GET', KEYS[3]) or '0')
local reset_requests, reset_tokens = 0, 0
local too_large = tpm >= 0 and tokens > tpm

if rpm >= 0 and count + 1 > rpm then
  local making_room = redis.call('ZRANGE', KEYS[1], count - rpm, count - rpm, 'WITHSCORES')
  reset_requests = tonumber(making_room[2]) + window - now
end
if tpm >= 0 and not too_large and total + tokens > tpm then
  local needed, freed = total + tokens - tpm, 0
  reset_tokens = window
  local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #entries, 2 do
    freed = freed + (tonumber(redis.call('HGET', KEYS[2], entries[i])) or 0)
    if freed >= needed then
      reset_tokens = tonumber(entries[i + 1]) + window - now
      break
    end
  end
end

local admitted = (not too_large) and reset_requests == 0 and reset_tokens == 0
if admitted then
  redis.call('ZADD', KEYS[1], now, id)
  redis.call('HSET', KEYS[2], id, tokens)
  total = redis.call('INCRBY', KEYS[3], tokens)
  count = count + 1
  local ttl = math.ceil(window * 1000) + 1000
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl) end
end

local remaining_requests, remaining_tokens = -1, -1
if rpm >= 0 then remaining_requests = math.max(0, rpm - count) end
if tpm >= 0 then remaining_tokens = math.max(0, tpm - total) end
return {admitted and 1 or 0, remaining_requests, remaining_tokens,
        math.ceil(reset_requests * 1000), math.ceil(reset_tokens * 1000), too_large and 1 or 0}
