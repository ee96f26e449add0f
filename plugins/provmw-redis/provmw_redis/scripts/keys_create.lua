-- A new key's hash, and its place in the lists (all keys; its organisation's), unless the id is taken.
-- KEYS: the key's hash, the list of all keys, the organisation's list. ARGV: key id, created at, then
-- the hash's fields and values. Returns 1, or 0 when the id is taken (the caller draws another).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
return 1
