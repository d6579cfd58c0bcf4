-- renew.lua: extend a lease a worker still holds.
-- KEYS: the scope's state hash. ARGV: now_us ('' = Redis TIME),
-- lease_ttl_ms, the lease's field. Reply: 1 if renewed, 0 if it had
-- expired or ended (an expired lease stays expired: its slot may be someone
-- else's now), or if the key is not a hash (no scope's state: admit.lua
-- deletes it).
local ttl = tonumber(ARGV[2])
if #KEYS ~= 1 or #ARGV ~= 3 or not ttl or ttl ~= ttl or ttl < 1 or ttl > 1e12
    or string.sub(ARGV[3], 1, 2) ~= 'L:' then
  return redis.error_reply('throttle: renew: malformed arguments')
end
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
  if not now or now ~= now or now < 0 or now >= 1e300 then return redis.error_reply('throttle: renew: bad time') end
end
local v = redis.pcall('HGET', KEYS[1], ARGV[3])
if type(v) == 'table' and v.err then return 0 end
local exp = tonumber(v)
if not exp or exp ~= exp or exp <= now then return 0 end
redis.call('HSET', KEYS[1], ARGV[3], string.format('%d', now + ttl * 1000))
-- Every key expires: lengthened for the lease, and set if a stranger
-- removed it.
if redis.call('PEXPIRE', KEYS[1], ttl + 1000, 'GT') == 0 then
  redis.call('PEXPIRE', KEYS[1], ttl + 1000, 'NX')
end
return 1
