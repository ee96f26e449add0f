-- A call on a member ended. KEYS[1]: the member's state (hash: lat average, at when measured,
-- cool until when it is skipped); KEYS[2]: its calls in flight; KEYS[3]: the sending process's
-- last write landed in this pool (string: its sequence number).
-- ARGV: now, the call ('' when none was registered), latency ('' when none), cool-down end (''
-- when none), the newest sample's weight, seconds after which an average is stale, how long the
-- state must be kept from now (ms), this write's sequence number, its TTL (ms).
local now = tonumber(ARGV[1])
if ARGV[2] ~= '' then redis.call('ZREM', KEYS[2], ARGV[2]) end
redis.call('SET', KEYS[3], ARGV[8], 'PX', ARGV[9])
if ARGV[3] == '' and ARGV[4] == '' then return 0 end
local state = redis.call('HMGET', KEYS[1], 'lat', 'at', 'cool')
if ARGV[3] ~= '' then
  local latency, alpha = tonumber(ARGV[3]), tonumber(ARGV[5])
  if state[1] and now - tonumber(state[2]) < tonumber(ARGV[6]) then
    latency = alpha * latency + (1 - alpha) * tonumber(state[1])
  end
  redis.call('HSET', KEYS[1], 'lat', string.format('%.17g', latency), 'at', ARGV[1])
end
if ARGV[4] ~= '' and (not state[3] or tonumber(state[3]) < tonumber(ARGV[4])) then
  redis.call('HSET', KEYS[1], 'cool', ARGV[4])
end
-- Kept as long as its newest part is needed: never shortened by a shorter need.
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[7]) then redis.call('PEXPIRE', KEYS[1], ARGV[7]) end
return 0
