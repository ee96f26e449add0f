-- Give back a probe's permit uncounted. ARGV: generation.
local b = redis.call('HMGET', KEYS[1], 's', 'g')
if b[1] == '2' and b[2] == ARGV[1] then redis.call('HINCRBY', KEYS[1], 'po', -1) end
return 0
