-- A pool's load as stored, in one snapshot; the caller decides what is stale. KEYS: for each
-- member its state (hash: lat, at, cool), its calls in flight (sorted set: call -> lease expiry)
-- and its use over the rolling minute (sorted set: "<call>|<tokens>" -> when it started); then the
-- reading process's last write landed in this pool; then the affinity key, when the call has one.
-- ARGV: now, the number of members, the window (s). Returns per member {calls in flight whose
-- lease is not over, lat, at, cool, requests, tokens}, then the reading process's last write
-- landed (its sequence number), then the affinity key's value. Read only:
-- expired leases and old use are removed by pool_started.
local now, members = ARGV[1], tonumber(ARGV[2])
local since = '(' .. (tonumber(now) - tonumber(ARGV[3]))
local out = {}
for i = 0, members - 1 do
  local state = redis.call('HMGET', KEYS[3 * i + 1], 'lat', 'at', 'cool')
  local used = redis.call('ZRANGEBYSCORE', KEYS[3 * i + 3], since, '+inf')
  local tokens = 0
  for _, entry in ipairs(used) do tokens = tokens + tonumber(string.match(entry, '|(%d+)$')) end
  out[#out + 1] = redis.call('ZCOUNT', KEYS[3 * i + 2], '(' .. now, '+inf')
  out[#out + 1] = state[1]
  out[#out + 1] = state[2]
  out[#out + 1] = state[3]
  out[#out + 1] = #used
  out[#out + 1] = tokens
end
out[#out + 1] = redis.call('GET', KEYS[3 * members + 1])
if #KEYS > 3 * members + 1 then out[#out + 1] = redis.call('GET', KEYS[#KEYS]) end
return out
