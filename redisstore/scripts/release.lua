-- release.lua: end a lease and store what the request taught.
-- The same steps as store.Memory.Release.
--
-- KEYS: each scope's state hash (see admit.lua).
-- ARGV: now_us ('' = Redis TIME), lease ('' = learned state only),
--   idle_ttl_ms, channel, n, then per scope: scope key, slot, quota window,
--   gate_us (0: none), quota_delta, quota_floor (-1: none), window_us,
--   learned (0/1), version, data, delay_us, concurrency.
-- Reply: per conflicting scope: index (1-based), version, data.
-- A lease that ended publishes the scope key on the channel. A lease that
-- held no slot there is a waiter that gave up: its turn ends (admit.lua),
-- published if others waited behind it.
-- The common case, a lease ended with nothing learned and no one waiting,
-- is two calls and no notification. Every argument is checked before
-- anything is written; a key of another type is no scope's state, and is
-- deleted; a stored value that is no number reads as absent.

local function bad(msg) return redis.error_reply('throttle: release: ' .. msg) end
local function num(v) return v ~= nil and v == v and v > -1e300 and v < 1e300 end
local maxversion = 9007199254740991

local n = tonumber(ARGV[5])
if not n or n < 1 or n ~= math.floor(n) or #KEYS ~= n or #ARGV ~= 5 + 12 * n then
  return bad('malformed arguments')
end
local lease, channel = ARGV[2], ARGV[4]
if #lease > 256 or string.find(lease, '|', 1, true) then return bad('bad lease') end
local idle = tonumber(ARGV[3])
if not num(idle) or idle < 1 then return bad('bad ttl') end
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
  if not num(now) or now < 0 then return bad('bad time') end
end
-- clock reads Redis's time only when a scope needs it.
local function clock()
  if now == nil then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return now
end
-- stored reads a stored field as a number >= 0, else nil.
local function stored(v)
  v = tonumber(v)
  if num(v) and v >= 0 then return v end
  return nil
end
-- first runs the first command on hash h: a key of another type is
-- deleted first.
local function first(h, ...)
  local r = redis.pcall(...)
  if type(r) == 'table' and r.err and string.find(r.err, 'WRONGTYPE', 1, true) then
    redis.call('DEL', h)
    return redis.call(...)
  end
  return r
end

for i = 1, n do
  local b = 5 + 12 * (i - 1)
  local slot, qwin, gate = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local qdelta, qfloor, win = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
  local learned, ver = ARGV[b + 8], tonumber(ARGV[b + 9])
  local delay, conc = tonumber(ARGV[b + 11]), tonumber(ARGV[b + 12])
  if not (num(slot) and num(qwin) and num(gate) and num(qdelta) and num(qfloor) and num(win)
      and num(ver) and num(delay) and num(conc)) then
    return bad('scope ' .. i .. ': bad number')
  end
  if gate < 0 or win < 0 or ver < 0 or ver > maxversion or delay < 0 or (learned == '1' and conc < 1)
      or slot < -1 or slot > 2147483647 or slot ~= math.floor(slot) then
    return bad('scope ' .. i .. ': bad value')
  end
end

local out = {}
for i = 1, n do
  local b = 5 + 12 * (i - 1)
  local h = KEYS[i]
  local key = ARGV[b + 1]
  local slot, qwin, gate = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local qdelta, qfloor, win = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
  local learned, ver = ARGV[b + 8], tonumber(ARGV[b + 9])
  local data, delay, conc = ARGV[b + 10], tonumber(ARGV[b + 11]), tonumber(ARGV[b + 12])

  local ended, touched = false, false
  if lease ~= '' then
    touched = true
    if first(h, 'HDEL', h, 'L:' .. lease .. '|' .. string.format('%d', slot)) == 1 then
      ended = true
      -- Notify only while someone waits (admit.lua sets 'w' on a refusal).
      local w = stored(redis.call('HGET', h, 'w'))
      if w and w > clock() then
        redis.call('PUBLISH', channel, key)
      end
    else
      -- No slot held: a waiter that gave up, whose turn ends.
      local t = redis.call('HMGET', h, 'q', 'qw')
      if t[1] and string.match(t[1], '^%d+|([^|]+)|%d+$') == lease then
        redis.call('HDEL', h, 'q', 'qw')
        if t[2] then redis.call('PUBLISH', channel, key) end
      end
    end
  end
  local quota = win > 0 and (qdelta ~= 0 or qfloor >= 0)
  if gate > 0 or quota or learned == '1' then
    local fields = {}
    local st
    if touched then
      st = redis.call('HMGET', h, 'gate', 'v', 'qs', 'qn', 'qu')
    else
      st = first(h, 'HMGET', h, 'gate', 'v', 'qs', 'qn', 'qu')
    end
    if gate > (stored(st[1]) or 0) then
      fields[#fields + 1] = 'gate'
      fields[#fields + 1] = string.format('%d', gate)
    end
    local qs, qn, qu = stored(st[3]), stored(st[4]) or 0, stored(st[5]) or 0
    if quota and qs then
      -- A correction counts in the window it arrives in; an actual cost
      -- only in its own window. A start after now (a clock that was
      -- ahead) is now.
      qs = math.min(qs, clock())
      if now - qs >= win then
        local k = math.floor((now - qs) / win)
        qs, qn, qu = qs + k * win, qn + k, 0
      end
      if qdelta ~= 0 and qwin == qn then qu = math.max(0, qu + qdelta) end
      if qfloor >= 0 then qu = math.max(qu, qfloor) end
      local k = #fields
      fields[k + 1], fields[k + 2], fields[k + 3] = 'qs', string.format('%d', qs), 'qn'
      fields[k + 4], fields[k + 5], fields[k + 6] = qn, 'qu', qu
    end
    if learned == '1' then
      local cur = stored(st[2]) or 0
      if cur > maxversion or cur ~= math.floor(cur) then cur = 0 end -- not a version a store gave
      local theirs
      if cur ~= 0 and cur ~= ver then
        theirs = redis.call('HGET', h, 'ld') or ''
        if #theirs > 65536 then cur = 0 end -- no policy's (admit.lua's maxdata): ours replaces it
      end
      if cur ~= 0 and cur ~= ver then
        out[#out + 1] = i
        out[#out + 1] = cur
        out[#out + 1] = theirs
      else
        local k = #fields
        fields[k + 1], fields[k + 2], fields[k + 3], fields[k + 4] = 'v', string.format('%d', math.min(math.max(cur, ver) + 1, maxversion)), 'ld', data
        fields[k + 5], fields[k + 6], fields[k + 7], fields[k + 8] = 'd', delay, 'c', conc
      end
    end
    if #fields > 0 then
      redis.call('HSET', h, unpack(fields))
      -- Every key expires. A hash whose lease just ended has the expiry
      -- admit.lua set; else this may have made it: idle_ttl. A gate
      -- lengthens it.
      local keep = idle
      if gate > 0 then keep = idle + math.ceil(math.max(0, gate - clock()) / 1000) end
      if not ended then redis.call('PEXPIRE', h, keep, 'NX') end
      if gate > 0 then redis.call('PEXPIRE', h, keep, 'GT') end
    end
  end
end
return out
