-- Rotate a key once: its successor made, the key disabled and marked with its successor, the key's
-- budgets copied, all at once, so that two rotations of one key (from any host) cannot both win.
-- KEYS: the old key's hash, the new key's hash, the list of all keys, the organisation's list, the
-- old key's budgets, the new key's budgets. ARGV: new key id, created at, then the new hash's fields
-- and values. Returns {1}; {0}: no such key; {-1, successor}: rotated already; {2}: the new id is taken.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {0}
end
local successor = redis.call('HGET', KEYS[1], 'successor')
if successor then
  return {-1, successor}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {2}
end
redis.call('HSET', KEYS[2], unpack(ARGV, 3))
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[4], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[1], 'successor', ARGV[1], 'disabled', '1')
local budgets = redis.call('HGETALL', KEYS[5])
if #budgets > 0 then
  redis.call('HSET', KEYS[6], unpack(budgets))
end
return {1}
