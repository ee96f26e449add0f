-- Give a fill claim back only if it is still ours (it may have expired and been taken).
-- KEYS[1]: the claim. ARGV[1]: our token.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
