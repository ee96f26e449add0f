-- Settle a reservation: add the real amounts to each of its buckets' spend, and free what
-- its lease still holds. Unknown or already settled: nothing changes, so it counts once.
-- KEYS[1]: the reservation. ARGV: prefix, then the real cost, tokens and requests.
local prefix = ARGV[1]
local fields = redis.call('HGETALL', KEYS[1])
for i = 1, #fields, 2 do
  local bucket = prefix .. 'b:' .. fields[i]
  for d = 1, 3 do
    if ARGV[d + 1] ~= '0' then redis.call('HINCRBY', bucket, SPENT[d], ARGV[d + 1]) end
  end
  if redis.call('ZREM', prefix .. 'l:' .. fields[i], fields[i + 1]) == 1 then free(bucket, fields[i + 1]) end
end
redis.call('DEL', KEYS[1])
return #fields / 2
