-- A call left for a member. KEYS[1]: its calls in flight (sorted set: call -> lease expiry);
-- KEYS[2]: its use over the rolling minute (sorted set: "<call>|<tokens>" -> when it started);
-- KEYS[3]: the sending process's last write landed in this pool (string: its sequence number);
-- KEYS[4], when the call has one: its affinity key (string: "<expires>|<member>").
-- ARGV: now, the call, its lease expiry, tokens, the use set's TTL (ms), the in-flight set's TTL
-- (ms), this write's sequence number, its TTL (ms); with an affinity key, its value and TTL (ms);
-- last, the window (s).
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])  -- leases run out: their processes died mid-call
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[1]) - tonumber(ARGV[#ARGV]))
redis.call('ZADD', KEYS[2], ARGV[1], ARGV[2] .. '|' .. ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[5])
redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[8])
if KEYS[4] then redis.call('SET', KEYS[4], ARGV[9], 'PX', ARGV[10]) end
return 0
