-- release.lua: end a lease and store what the request taught.
-- The same steps as throttle.MemoryStore.Release.
--
-- KEYS, per scope: its state hash, then its lease set.
-- ARGV: now_us ('' = Redis TIME), lease ('' = learned state only),
--   idle_ttl_ms, channel, n, then per scope: scope key, slot, quota window,
--   gate_us (0: none), quota_delta, quota_floor (-1: none), window_us,
--   learned (0/1), version, data, delay_us, concurrency.
-- Reply: per conflicting scope: index (1-based), version, data.
-- A lease that ended publishes the scope key on the channel.

local function bad(msg) return redis.error_reply('throttle: release: ' .. msg) end
local function num(v) return v ~= nil and v == v and v > -1e300 and v < 1e300 end

local n = tonumber(ARGV[5])
if not n or n < 1 or n ~= math.floor(n) or #KEYS ~= 2 * n or #ARGV ~= 5 + 12 * n then
  return bad('malformed arguments')
end
local lease, channel = ARGV[2], ARGV[4]
if #lease > 256 or string.find(lease, '|', 1, true) then return bad('bad lease') end
local idle = tonumber(ARGV[3])
if not num(idle) or idle < 1 then return bad('bad ttl') end
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
  if not num(now) or now < 0 then return bad('bad time') end
end

local out = {}
for i = 1, n do
  local b = 5 + 12 * (i - 1)
  local h, l = KEYS[2 * i - 1], KEYS[2 * i]
  local key = ARGV[b + 1]
  local slot, qwin, gate = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local qdelta, qfloor, win = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
  local learned, ver = ARGV[b + 8], tonumber(ARGV[b + 9])
  local data, delay, conc = ARGV[b + 10], tonumber(ARGV[b + 11]), tonumber(ARGV[b + 12])
  for _, v in ipairs({ slot, qwin, gate, qdelta, qfloor, win, ver, delay, conc }) do
    if not num(v) then return bad('scope ' .. i .. ': bad number') end
  end
  if gate < 0 or win < 0 or ver < 0 or delay < 0 or (learned == '1' and conc < 1) then
    return bad('scope ' .. i .. ': bad value')
  end

  if lease ~= '' and redis.call('ZREM', l, lease .. '|' .. string.format('%d', slot)) == 1 then
    redis.call('PUBLISH', channel, key)
  end
  local fields = {}
  if gate > (tonumber(redis.call('HGET', h, 'gate')) or 0) then
    fields[#fields + 1] = 'gate'
    fields[#fields + 1] = string.format('%d', gate)
  end
  if win > 0 and (qdelta ~= 0 or qfloor >= 0) then
    local q = redis.call('HMGET', h, 'qs', 'qn', 'qu')
    local qs, qn, qu = tonumber(q[1]), tonumber(q[2]) or 0, tonumber(q[3]) or 0
    if qs then
      -- A correction counts in the window it arrives in; an actual cost
      -- only in its own window.
      if now - qs >= win then
        local k = math.floor((now - qs) / win)
        qs, qn, qu = qs + k * win, qn + k, 0
      end
      if qdelta ~= 0 and qwin == qn then qu = math.max(0, qu + qdelta) end
      if qfloor >= 0 then qu = math.max(qu, qfloor) end
      for _, v in ipairs({ 'qs', string.format('%d', qs), 'qn', qn, 'qu', qu }) do fields[#fields + 1] = v end
    end
  end
  if learned == '1' then
    local cur = tonumber(redis.call('HGET', h, 'v')) or 0
    if cur ~= 0 and cur ~= ver then
      out[#out + 1] = i
      out[#out + 1] = cur
      out[#out + 1] = redis.call('HGET', h, 'ld') or ''
    else
      for _, v in ipairs({ 'v', math.max(cur, ver) + 1, 'ld', data, 'd', delay, 'c', conc }) do
        fields[#fields + 1] = v
      end
    end
  end
  if #fields > 0 then
    redis.call('HSET', h, unpack(fields))
  end
  local keep = idle + math.ceil(math.max(0, gate - now) / 1000)
  if redis.call('EXISTS', h) == 1 and redis.call('PTTL', h) < keep then redis.call('PEXPIRE', h, keep) end
end
return out
