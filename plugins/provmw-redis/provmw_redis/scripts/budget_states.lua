-- Every bucket still kept: its JSON, spend and live reservations (expired leases purged).
-- KEYS[1]: the bucket index. ARGV: prefix, now ('': the server's clock).
local prefix, now = ARGV[1], clock(ARGV[2])
local result = {}
for _, key in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local bucket = prefix .. 'b:' .. key
  if redis.call('EXISTS', bucket) == 0 then
    redis.call('ZREM', KEYS[1], key)
  else
    purge(bucket, prefix .. 'l:' .. key, now)
    for _, value in ipairs(redis.call('HMGET', bucket, 'id', 'c', 't', 'r', 'rc', 'rt', 'rr')) do
      table.insert(result, value or '0')
    end
  end
end
return result
