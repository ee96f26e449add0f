-- Count an admitted call's outcome. ARGV: generation, failed, slow, window_size, min_calls,
-- failure_rate, slow_call_rate, half_open_probes, idle TTL (ms).
-- Returns {before, after} on a transition, {} otherwise (or when the generation is stale).
local b = redis.call('HMGET', KEYS[1], 's', 'g', 'f', 'sl', 'pp')
local generation = tonumber(b[2] or '0')
if tostring(generation) ~= ARGV[1] then return {} end
local state, failed, slow = tonumber(b[1] or '0'), ARGV[2] == '1', ARGV[3] == '1'
if state == 2 then
  if failed or slow then move(1, generation) return {2, 1} end
  redis.call('HINCRBY', KEYS[1], 'po', -1)
  if redis.call('HINCRBY', KEYS[1], 'pp', 1) >= tonumber(ARGV[8]) then move(0, generation) return {2, 0} end
  return {}
end
if state ~= 0 then return {} end
local failures, slow_calls = tonumber(b[3] or '0'), tonumber(b[4] or '0')
local calls = redis.call('RPUSH', KEYS[2], (failed and '1' or '0') .. (slow and '1' or '0'))
if calls > tonumber(ARGV[4]) then
  local old = redis.call('LPOP', KEYS[2])
  failures = failures - tonumber(string.sub(old, 1, 1))
  slow_calls = slow_calls - tonumber(string.sub(old, 2, 2))
  calls = calls - 1
end
failures = failures + (failed and 1 or 0)
slow_calls = slow_calls + (slow and 1 or 0)
redis.call('HSET', KEYS[1], 's', 0, 'g', generation, 'f', failures, 'sl', slow_calls)
keep(ARGV[9])
if calls >= tonumber(ARGV[5]) and
    (failures / calls >= tonumber(ARGV[6]) or slow_calls / calls >= tonumber(ARGV[7])) then
  move(1, generation)
  return {0, 1}
end
return {}
