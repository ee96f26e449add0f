-- May this call go? ARGV: open_s, half_open_probes, idle TTL (ms), probe lease (s).
-- Returns {admitted, generation, probe, retry_after_s, before, after} (-1: no transition).
local open_s, probes = tonumber(ARGV[1]), tonumber(ARGV[2])
local b = redis.call('HMGET', KEYS[1], 's', 'g', 'o', 'po', 'pp')
local state, generation = tonumber(b[1] or '0'), tonumber(b[2] or '0')
if state == 0 then return {1, generation, 0, '0', -1, -1} end
local before, out, passed = -1, tonumber(b[4]), tonumber(b[5])
local since = now - tonumber(b[3])
if state == 1 then
  if since < open_s then return {0, generation, 0, tostring(open_s - since), -1, -1} end
  move(2, generation)
  before, generation, out, passed = 1, generation + 1, 0, 0
elseif out + passed >= probes and since >= tonumber(ARGV[4]) then
  -- Probes out for a whole probe lease never reported: their process died. Probe afresh.
  move(2, generation)
  generation, out, passed = generation + 1, 0, 0
end
keep(ARGV[3])
local after = before == -1 and -1 or 2
if out + passed >= probes then return {0, generation, 0, tostring(open_s), before, after} end
redis.call('HINCRBY', KEYS[1], 'po', 1)
return {1, generation, 1, '0', before, after}
