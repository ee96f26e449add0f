-- Shared by the budget scripts (prepended to each). Bucket hash fields: id (its JSON), c t r (spent) and
-- rc rt rr (held by live reservations). A lease member is "<id> <cost> <tokens> <requests>",
-- scored by when its lease expires. Amounts stay strings on their way to HINCRBY, so no
-- large integer passes through a float.
local HELD = {'rc', 'rt', 'rr'}

-- The time leases go by: the server's own clock (TIME), so that a client whose clock is skewed can
-- neither expire another's lease nor stretch its own; a time given by the caller only in tests.
local function clock(given)
  if given ~= '' then return tonumber(given) end
  local now = redis.call('TIME')
  return tonumber(now[1]) + tonumber(now[2]) / 1000000
end
local SPENT = {'c', 't', 'r'}

local function free(bucket, member)
  local amounts = {string.match(member, ' (%d+) (%d+) (%d+)$')}
  for d = 1, 3 do
    if amounts[d] ~= '0' then redis.call('HINCRBY', bucket, HELD[d], '-' .. amounts[d]) end
  end
end

-- Expired leases stop holding capacity; their reservation may still settle its spend.
local function purge(bucket, leases, now)
  local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
  for _, member in ipairs(expired) do free(bucket, member) end
  if #expired > 0 then redis.call('ZREMRANGEBYSCORE', leases, '-inf', now) end
end
