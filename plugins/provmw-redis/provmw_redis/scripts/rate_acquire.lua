-- Take a request, tokens and a concurrency slot, all or none. KEYS[1]: the buckets (hash:
-- rl/rt requests level and its time, tl/tt tokens level and its time); KEYS[2]: the slots
-- (sorted set: permit -> lease expiry). ARGV: requests/min, tokens/min, max concurrency
-- (-1: none), tokens, permit, slot lease (s), concurrency poll (s).
-- Returns {1} or {0, limit, wait_s}. Time is the Redis server's.
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1e6
local rpm, tpm, slots = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if slots >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  if redis.call('ZCARD', KEYS[2]) >= slots then return {0, 'max_concurrency', ARGV[7]} end
end
local b = redis.call('HMGET', KEYS[1], 'rl', 'rt', 'tl', 'tt')
local function level(per_minute, value, at)
  if value == false then return per_minute end
  return math.min(per_minute, tonumber(value) + (now - tonumber(at)) * per_minute / 60)
end
local requests = rpm >= 0 and level(rpm, b[1], b[2]) or 0
local tokens = tpm >= 0 and level(tpm, b[3], b[4]) or 0
local wanted = tonumber(ARGV[4])
if rpm >= 0 and requests < 1 then
  return {0, 'requests_per_minute', tostring((1 - requests) * 60 / rpm)}
end
-- A call larger than a whole minute's tokens may go once the bucket is full.
if tpm >= 0 and tokens < math.min(wanted, tpm) then
  return {0, 'tokens_per_minute', tostring((math.min(wanted, tpm) - tokens) * 60 / tpm)}
end
if rpm >= 0 then redis.call('HSET', KEYS[1], 'rl', tostring(requests - 1), 'rt', tostring(now)) end
if tpm >= 0 then redis.call('HSET', KEYS[1], 'tl', tostring(tokens - wanted), 'tt', tostring(now)) end
redis.call('PEXPIRE', KEYS[1], 120000)  -- idle for two minutes: every bucket is full again
if slots >= 0 then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[6]), ARGV[5])
  redis.call('PEXPIRE', KEYS[2], math.ceil(tonumber(ARGV[6]) * 1000))
end
return {1}
