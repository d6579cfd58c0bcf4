-- renew.lua: extend the leases a worker still holds.
-- KEYS: lease sets. ARGV: now_us ('' = Redis TIME), lease_ttl_ms, then one
-- member per key. Reply: how many leases were still there to renew.
local ttl = tonumber(ARGV[2])
if #ARGV ~= 2 + #KEYS or not ttl or ttl ~= ttl or ttl < 1 or ttl > 1e12 then
  return redis.error_reply('throttle: renew: malformed arguments')
end
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
  if not now or now ~= now or now < 0 then return redis.error_reply('throttle: renew: bad time') end
end
local renewed = 0
for i = 1, #KEYS do
  -- An expired lease stays expired: its slot may be someone else's now.
  local score = tonumber(redis.call('ZSCORE', KEYS[i], ARGV[2 + i]))
  if score and score > now then
    redis.call('ZADD', KEYS[i], 'XX', now + ttl * 1000, ARGV[2 + i])
    renewed = renewed + 1
  end
  if redis.call('PTTL', KEYS[i]) < ttl + 1000 then redis.call('PEXPIRE', KEYS[i], ttl + 1000) end
end
return renewed
