-- Extend a running call's leases (never shorten them; an expired, purged lease stays gone).
-- KEYS[1]: the reservation. ARGV: prefix, new expires_at, reservation TTL in ms.
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  redis.call('ZADD', ARGV[1] .. 'l:' .. fields[i], 'XX', 'GT', ARGV[2], fields[i + 1])
end
if #fields > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return #fields / 2
