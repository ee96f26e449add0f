-- Every bucket still kept: its JSON, spend and live reservations (expired leases purged).
-- KEYS[1]: the bucket index. ARGV: prefix, now.
local prefix, now = ARGV[1], tonumber(ARGV[2])
local result = {}
local index = redis.call('HGETALL', KEYS[1])
for i = 1, #index, 2 do
  local bucket = prefix .. 'b:' .. index[i]
  if redis.call('EXISTS', bucket) == 0 then
    redis.call('HDEL', KEYS[1], index[i])
  else
    purge(bucket, prefix .. 'l:' .. index[i], now)
    table.insert(result, index[i + 1])
    for _, value in ipairs(redis.call('HMGET', bucket, 'c', 't', 'r', 'rc', 'rt', 'rr')) do
      table.insert(result, value or '0')
    end
  end
end
return result
