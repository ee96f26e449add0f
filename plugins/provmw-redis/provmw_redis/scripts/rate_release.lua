-- Free a permit's slot and correct its token estimate. KEYS as rate_acquire.
-- ARGV: tokens/min (-1: none), permit, reserved, used.
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1e6
redis.call('ZREM', KEYS[2], ARGV[2])
local tpm = tonumber(ARGV[1])
if tpm < 0 then return 0 end
local b = redis.call('HMGET', KEYS[1], 'tl', 'tt')
if b[1] == false then return 0 end
local tokens = math.min(tpm, tonumber(b[1]) + (now - tonumber(b[2])) * tpm / 60)
tokens = math.min(tpm, tokens + tonumber(ARGV[3]) - tonumber(ARGV[4]))
redis.call('HSET', KEYS[1], 'tl', tostring(tokens), 'tt', tostring(now))
return 0
