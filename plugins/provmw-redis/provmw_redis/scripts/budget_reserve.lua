-- Reserve one call's charges against every bucket it touches, all or nothing.
-- KEYS[1]: the bucket index (sorted set: bucket key, scored by when it may be forgotten);
-- KEYS[2]: the reservation (hash: bucket key -> its lease member). ARGV: prefix, now ('': the
-- server's clock), lease in s, reservation id, reservation TTL in ms, bucket count, then per bucket:
-- key, JSON, keep-until (ms, 0: always), limits (cost, tokens, requests; -1: none), amounts.
local prefix, now, id = ARGV[1], clock(ARGV[2]), ARGV[4]
local expires_at = now + tonumber(ARGV[3])
local count = tonumber(ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. tostring(now * 1000))  -- buckets long gone

for i = 0, count - 1 do
  local a = 7 + i * 9
  local bucket = prefix .. 'b:' .. ARGV[a]
  purge(bucket, prefix .. 'l:' .. ARGV[a], now)
  local held = redis.call('HMGET', bucket, 'c', 't', 'r', 'rc', 'rt', 'rr')
  for d = 1, 3 do
    local limit = tonumber(ARGV[a + 2 + d])
    local spent, reserved = tonumber(held[d] or '0'), tonumber(held[d + 3] or '0')
    if limit >= 0 and spent + reserved + tonumber(ARGV[a + 5 + d]) > limit then
      return {i + 1, d, ARGV[a + 2 + d], held[d] or '0', held[d + 3] or '0'}
    end
  end
end

for i = 0, count - 1 do
  local a = 7 + i * 9
  local bucket, leases = prefix .. 'b:' .. ARGV[a], prefix .. 'l:' .. ARGV[a]
  local member = id .. ' ' .. ARGV[a + 6] .. ' ' .. ARGV[a + 7] .. ' ' .. ARGV[a + 8]
  for d = 1, 3 do redis.call('HINCRBY', bucket, HELD[d], ARGV[a + 5 + d]) end
  redis.call('ZADD', leases, expires_at, member)
  redis.call('HSET', KEYS[2], ARGV[a], member)
  redis.call('HSET', bucket, 'id', ARGV[a + 1])
  redis.call('ZADD', KEYS[1], ARGV[a + 2] == '0' and '+inf' or ARGV[a + 2], ARGV[a])
  if ARGV[a + 2] ~= '0' then
    redis.call('PEXPIREAT', bucket, ARGV[a + 2])
    redis.call('PEXPIREAT', leases, ARGV[a + 2])
  end
end
redis.call('PEXPIRE', KEYS[2], ARGV[5])
return false
