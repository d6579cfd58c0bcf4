-- admit.lua: admit one request on all of its scopes at once, or on none.
-- The same checks, in the same order, as throttle.MemoryStore.Admit.
--
-- KEYS, per scope: its state hash, then its lease set (member
--   "<lease>|<slot>", score = expiry in microseconds).
-- ARGV: now_us ('' = Redis TIME), lease, lease_ttl_ms, idle_ttl_ms, n, then
--   per scope: cost, concurrency, delay_us, jitter, slot_delay_us, quota,
--   window_us, version.
-- Reply: admitted (0/1), now_us, at_us (0: at a release), reason, scope
--   (1-based, 0: none), then per scope: slot, quota window, version, data
--   ('' unless newer than the caller's version).
-- Reasons: 1 concurrency, 2 delay, 3 slot delay, 4 gate, 5 quota.
--
-- State hash fields: c, d (shared concurrency and delay, written with the
-- learned state), last, jit (previous start and its jitter), sl (last start
-- per slot, comma separated), gate, qs, qn, qu (quota window start, number,
-- used), v, ld (learned state version and data).

local function bad(msg) return redis.error_reply('throttle: admit: ' .. msg) end
local function nonneg(v) return v ~= nil and v == v and v >= 0 and v < 1e300 end

local n = tonumber(ARGV[5])
if not n or n < 1 or n ~= math.floor(n) or #KEYS ~= 2 * n or #ARGV ~= 5 + 8 * n then
  return bad('malformed arguments')
end
local lease = ARGV[2]
if lease == '' or #lease > 256 or string.find(lease, '|', 1, true) then return bad('bad lease') end
local ttl, idle = tonumber(ARGV[3]), tonumber(ARGV[4])
if not nonneg(ttl) or ttl < 1 or not nonneg(idle) or idle < 1 then return bad('bad ttl') end
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
  if not nonneg(now) then return bad('bad time') end
end

local sc = {}
for i = 1, n do
  local b = 5 + 8 * (i - 1)
  local s = { h = KEYS[2 * i - 1], l = KEYS[2 * i] }
  s.cost, s.conc, s.delay = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  s.jit, s.sd, s.quota = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
  s.win, s.ver = tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8])
  for _, v in ipairs({ s.cost, s.conc, s.delay, s.jit, s.sd, s.quota, s.win, s.ver }) do
    if not nonneg(v) then return bad('scope ' .. i .. ': bad number') end
  end
  if s.conc < 1 or (s.quota > 0 and s.win <= 0) then return bad('scope ' .. i .. ': bad limits') end
  sc[i] = s
end

-- The slots of a scope: last start per slot (0-based), and which are busy.
local function slots(s)
  local last, k = {}, 0
  local str = redis.call('HGET', s.h, 'sl')
  if str then
    for v in string.gmatch(str, '[^,]+') do last[k] = tonumber(v); k = k + 1 end
  end
  local busy = {}
  for _, m in ipairs(redis.call('ZRANGE', s.l, 0, -1)) do
    local x = string.match(m, '|(%-?%d+)$')
    if x then busy[tonumber(x)] = true end
  end
  return last, k, busy
end

-- The free slot that can start soonest: -1 for a new slot at now; nil when
-- every slot is busy.
local function freeslot(s)
  local last, k, busy = slots(s)
  local best, at = -1, nil
  for i = 0, k - 1 do
    if not busy[i] then
      local a = last[i] + s.sd
      if at == nil or a < at then best, at = i, a end
    end
  end
  if (at == nil or at > now) and k < s.conc then return -1, now, last, k end
  return best, at, last, k
end

local function rollquota(s)
  if s.qs and now - s.qs >= s.win then
    local k = math.floor((now - s.qs) / s.win)
    s.qs, s.qn, s.qu = s.qs + k * s.win, s.qn + k, 0
  end
end

local at, why, who, blocked = now, 0, 0, false
for i = 1, n do
  local s = sc[i]
  redis.call('ZREMRANGEBYSCORE', s.l, '-inf', now)
  local f = redis.call('HMGET', s.h, 'c', 'd', 'last', 'jit', 'gate', 'qs', 'qn', 'qu', 'v', 'ld')
  s.conc = tonumber(f[1]) or s.conc
  s.delay = tonumber(f[2]) or s.delay
  s.last, s.pjit, s.gate = tonumber(f[3]), tonumber(f[4]) or 1, tonumber(f[5]) or 0
  s.qs, s.qn, s.qu = tonumber(f[6]), tonumber(f[7]) or 0, tonumber(f[8]) or 0
  s.sver, s.data = tonumber(f[9]) or 0, f[10]
  if not blocked then
    local function later(t, r)
      if t > at then at, why, who = t, r, i end
    end
    if redis.call('ZCARD', s.l) >= s.conc then
      blocked, why, who = true, 1, i
      local first = redis.call('ZRANGE', s.l, 0, 0, 'WITHSCORES')
      at = tonumber(first[2]) or 0 -- the earliest lease expiry: the fallback wake
    else
      if s.last then later(s.last + s.delay * s.pjit, 2) end
      if s.sd > 0 then
        local _, free = freeslot(s)
        if free == nil then
          blocked, why, who, at = true, 1, i, 0
        else
          later(free, 3)
        end
      end
      if not blocked then
        later(s.gate, 4)
        if s.quota > 0 then
          rollquota(s)
          if s.qs and s.qu > 0 and s.qu + s.cost > s.quota then later(s.qs + s.win, 5) end
        end
      end
    end
  end
end

local out = { 0, now, 0, why, who }
if why ~= 0 then
  out[3] = at
else
  out[1] = 1
end
for i = 1, n do
  local s = sc[i]
  local slot, qwin = -1, 0
  if why == 0 then
    local fields = { 'last', now, 'jit', ARGV[5 + 8 * (i - 1) + 4] }
    if s.sd > 0 then
      local best, _, last, k = freeslot(s)
      if best < 0 then best = k; k = k + 1 end
      last[best] = now
      local parts = {}
      for j = 0, k - 1 do parts[#parts + 1] = string.format('%d', last[j]) end
      slot = best
      fields[#fields + 1] = 'sl'
      fields[#fields + 1] = table.concat(parts, ',')
    end
    if s.quota > 0 then
      if not s.qs then s.qs, s.qn, s.qu = now, 0, 0 end
      rollquota(s)
      s.qu = s.qu + s.cost
      qwin = s.qn
      for _, v in ipairs({ 'qs', string.format('%d', s.qs), 'qn', s.qn, 'qu', s.qu }) do fields[#fields + 1] = v end
    end
    redis.call('HSET', s.h, unpack(fields))
    local expiry = now + ttl * 1000
    redis.call('ZADD', s.l, expiry, lease .. '|' .. slot)
    if redis.call('PTTL', s.l) < ttl + 1000 then redis.call('PEXPIRE', s.l, ttl + 1000) end
    -- Keep the hash while anything in it is pending, and idle_ttl after.
    local pending = math.max(s.gate, now + s.delay * s.jit, (s.qs or 0) + s.win)
    local keep = idle + math.ceil(math.max(0, pending - now) / 1000)
    if redis.call('PTTL', s.h) < keep then redis.call('PEXPIRE', s.h, keep) end
  end
  out[#out + 1] = slot
  out[#out + 1] = qwin
  out[#out + 1] = s.sver
  if s.sver > s.ver and s.data then out[#out + 1] = s.data else out[#out + 1] = '' end
end
return out
