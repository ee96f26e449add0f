-- Extend a running call's leases (never shorten them; an expired, purged lease stays gone).
-- KEYS[1]: the reservation. ARGV: prefix, now ('': the server's clock), lease in s, reservation TTL in ms.
local expires_at = clock(ARGV[2]) + tonumber(ARGV[3])
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  redis.call('ZADD', ARGV[1] .. 'l:' .. fields[i], 'XX', 'GT', expires_at, fields[i + 1])
end
if #fields > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return #fields / 2
