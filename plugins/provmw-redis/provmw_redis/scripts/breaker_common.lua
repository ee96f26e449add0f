-- Shared by the breaker scripts (prepended to each). KEYS[1]: the breaker (hash: s state
-- 0 closed 1 open 2 half-open, g generation, o when it opened or began probing, po probes
-- out, pp probes passed, f failures and sl slow calls in the window); KEYS[2]: the window
-- (list of "<failed><slow>"). Time is the Redis server's, so hosts need not agree on theirs.
local time = redis.call('TIME')
local now = tonumber(time[1]) + tonumber(time[2]) / 1e6

local function move(to, generation)
  redis.call('HSET', KEYS[1], 's', to, 'g', generation + 1, 'o', tostring(now),
             'po', 0, 'pp', 0, 'f', 0, 'sl', 0)
  redis.call('DEL', KEYS[2])
end

local function keep(idle_ms)
  redis.call('PEXPIRE', KEYS[1], idle_ms)
  redis.call('PEXPIRE', KEYS[2], idle_ms)
end
