-- A pool's load as stored, in one snapshot; the caller decides what is stale. KEYS: for each
-- member its state (hash: lat, at, cool), its calls in flight (sorted set: call -> lease expiry)
-- and this minute's use (hash: r, t); then the affinity key, when the call has one.
-- ARGV: now, the number of members. Returns per member {calls in flight whose lease is not over,
-- lat, at, cool, r, t}, then the affinity key's value. Read only: expired leases are removed by
-- pool_started.
local now, members = ARGV[1], tonumber(ARGV[2])
local out = {}
for i = 0, members - 1 do
  local state = redis.call('HMGET', KEYS[3 * i + 1], 'lat', 'at', 'cool')
  local used = redis.call('HMGET', KEYS[3 * i + 3], 'r', 't')
  out[#out + 1] = redis.call('ZCOUNT', KEYS[3 * i + 2], '(' .. now, '+inf')
  out[#out + 1] = state[1]
  out[#out + 1] = state[2]
  out[#out + 1] = state[3]
  out[#out + 1] = used[1]
  out[#out + 1] = used[2]
end
if #KEYS > 3 * members then out[#out + 1] = redis.call('GET', KEYS[#KEYS]) end
return out
