-- admit.lua: admit one request on all of its scopes at once, or on none.
-- The same checks, in the same order, as store.Memory.Admit.
--
-- KEYS: each scope's state hash.
-- ARGV: now_us ('' = Redis TIME), lease, lease_ttl_ms, idle_ttl_ms, n,
--   deadline_us (0: none), then per scope: cost, concurrency, delay_us,
--   jitter, slot_delay_us, quota, window_us, version.
-- An admission run after its deadline (the caller's timeout, in Redis time)
-- is refused with an error and changes nothing: its caller has stopped
-- waiting for the reply, so a slot it took would be held by no one until
-- the lease expired (a Redis that was paused runs the commands queued
-- meanwhile when it resumes).
-- Reply: admitted (0/1), now_us, at_us (0: at a release), reason, scope
--   (1-based, 0: none), then per scope: slot, quota window, version, data
--   ('' unless newer than the caller's version).
-- Reasons: 1 concurrency, 2 delay, 3 slot delay, 4 gate, 5 quota.
--
-- State hash fields: c, d (shared concurrency and delay, written with the
-- learned state), last, jit (previous start and its jitter), sl (last start
-- per slot, comma separated), gate, qs, qn, qu (quota window start, number,
-- used), v, ld (learned state version and data), w (someone waits until
-- then: releases are published), e (the hash's expiry as this script last
-- set it, with Redis's TIME), and one field a lease,
-- "L:<lease>|<slot>" = its expiry. One key a scope, read with one HGETALL:
-- each redis.call costs about as much as the command itself.

local function bad(msg) return redis.error_reply('throttle: admit: ' .. msg) end
local function nonneg(v) return v ~= nil and v == v and v >= 0 and v < 1e300 end

local n = tonumber(ARGV[5])
if not n or n < 1 or n ~= math.floor(n) or #KEYS ~= n or #ARGV ~= 6 + 8 * n then
  return bad('malformed arguments')
end
local lease = ARGV[2]
if lease == '' or #lease > 256 or string.find(lease, '|', 1, true) then return bad('bad lease') end
local ttl, idle = tonumber(ARGV[3]), tonumber(ARGV[4])
if not nonneg(ttl) or ttl < 1 or not nonneg(idle) or idle < 1 then return bad('bad ttl') end
local now
local realtime = ARGV[1] == ''
if realtime then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
  if not nonneg(now) then return bad('bad time') end
end
local deadline = tonumber(ARGV[6])
if not nonneg(deadline) then return bad('bad deadline') end
if deadline > 0 and now > deadline then return bad('too late: the caller stopped waiting') end

-- Written for speed (a script's own work is most of an admission's cost in
-- Redis, and tables are its dearest part): each scope's values are read
-- into locals, then kept in one table made by one constructor (a table
-- grown field by field rehashes as it grows); the hash's fields are
-- matched by name, not copied into a table; slots and busy slots are
-- parsed only for a slot delay.
local tonumber, byte, match, format = tonumber, string.byte, string.match, string.format

local sc = {}
local none = {} -- the busy slots of every scope without any (only read)
for i = 1, n do
  local b = 6 + 8 * (i - 1)
  local cost, conc, delay = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local jit, sd, quota = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6])
  local win, ver = tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8])
  if not (nonneg(cost) and nonneg(conc) and nonneg(delay) and nonneg(jit) and nonneg(sd)
      and nonneg(quota) and nonneg(win) and nonneg(ver)) then
    return bad('scope ' .. i .. ': bad number')
  end
  if conc < 1 or (quota > 0 and win <= 0) then return bad('scope ' .. i .. ': bad limits') end
  -- Bad arguments of a later scope are found after this read: reads
  -- change nothing, and nothing is written before every scope was checked.
  local f = redis.call('HGETALL', KEYS[i])
  local live, busy, expired, first = 0, nil, nil, nil
  local cstored, dstored, last, pjit, gate, qs, qn, qu, sver, data, sl, kexp
  for j = 1, #f, 2 do
    local k, v = f[j], f[j + 1]
    if byte(k) == 76 then -- 'L': a lease, "L:<lease>|<slot>" = its expiry
      local exp = tonumber(v) or 0
      if exp > now then
        live = live + 1
        if sd > 0 then
          local slot = tonumber(match(k, '|(%-?%d+)$'))
          if slot then
            busy = busy or {}
            busy[slot] = true
          end
        end
        if first == nil or exp < first then first = exp end
      else
        expired = expired or {}
        expired[#expired + 1] = k
      end
    elseif k == 'last' then last = tonumber(v)
    elseif k == 'jit' then pjit = tonumber(v)
    elseif k == 'c' then cstored = tonumber(v)
    elseif k == 'd' then dstored = tonumber(v)
    elseif k == 'v' then sver = tonumber(v)
    elseif k == 'ld' then data = v
    elseif k == 'gate' then gate = tonumber(v)
    elseif k == 'sl' then sl = v
    elseif k == 'qs' then qs = tonumber(v)
    elseif k == 'qn' then qn = tonumber(v)
    elseif k == 'qu' then qu = tonumber(v)
    elseif k == 'e' then kexp = tonumber(v)
    end
  end
  local slots, nslots = nil, 0
  if sd > 0 then
    slots = {}
    if sl then
      for v in string.gmatch(sl, '[^,]+') do
        slots[nslots] = tonumber(v)
        nslots = nslots + 1
      end
    end
  end
  sc[i] = { h = KEYS[i], exists = #f > 0, cost = cost, conc = cstored or conc, delay = dstored or delay, jit = jit,
    sd = sd, quota = quota, win = win, ver = ver, live = live, busy = busy or none, expired = expired,
    first = first, last = last, pjit = pjit or 1, gate = gate or 0, qs = qs, qn = qn or 0, qu = qu or 0,
    sver = sver or 0, data = data, slots = slots, nslots = nslots, kexp = kexp }
end

-- freeslot: the free slot that can start soonest, -1 for a new slot at
-- now; nil when every slot is busy. Only the first conc slots count: the
-- slots above a lowered concurrency are not used again.
local function freeslot(s)
  local best, at = -1, nil
  for i = 0, math.min(s.nslots, s.conc) - 1 do
    if not s.busy[i] then
      local a = s.slots[i] + s.sd
      if at == nil or a < at then best, at = i, a end
    end
  end
  if (at == nil or at > now) and s.nslots < s.conc then return -1, now end
  return best, at
end

local function rollquota(s)
  if s.qs and now - s.qs >= s.win then
    local k = math.floor((now - s.qs) / s.win)
    s.qs, s.qn, s.qu = s.qs + k * s.win, s.qn + k, 0
  end
end

local at, why, who = now, 0, 0
for i = 1, n do
  local s = sc[i]
  if s.live >= s.conc then
    why, who = 1, i
    at = s.first or 0 -- the earliest lease expiry: the fallback wake
    break
  end
  if s.last then
    local t = s.last + s.delay * s.pjit
    if t > at then at, why, who = t, 2, i end
  end
  if s.sd > 0 then
    local _, free = freeslot(s)
    if free == nil then
      why, who, at = 1, i, 0
      break
    end
    if free > at then at, why, who = free, 3, i end
  end
  if s.gate > at then at, why, who = s.gate, 4, i end
  if s.quota > 0 then
    rollquota(s)
    if s.qs and s.qu > 0 and s.qu + s.cost > s.quota then
      local t = s.qs + s.win
      if t > at then at, why, who = t, 5, i end
    end
  end
end

local out = { 0, now, 0, why, who, 0, 0, 0, '' } -- (sized for one scope)
if why ~= 0 then
  out[3] = at
  -- Someone waits on these scopes until about then: release.lua
  -- publishes only while a 'w' is pending, so a fleet with no waiters
  -- sends no notification to every worker on every release.
  local waits = format('%d', now + ttl * 1000)
  for i = 1, n do
    if sc[i].exists then -- (a new hash would have no expiry)
      redis.call('HSET', sc[i].h, 'w', waits)
    end
  end
else
  out[1] = 1
end
local expiry = why == 0 and format('%d', now + ttl * 1000)
for i = 1, n do
  local s = sc[i]
  local slot, qwin = -1, 0
  if why == 0 then
    local jit = ARGV[6 + 8 * (i - 1) + 4]
    if s.sd == 0 and s.quota == 0 then
      -- The common case, without a table for the fields, and without
      -- the jitter when it is the previous start's (absent means 1).
      if s.pjit == s.jit then
        redis.call('HSET', s.h, 'last', now, 'L:' .. lease .. '|-1', expiry)
      else
        redis.call('HSET', s.h, 'last', now, 'jit', jit, 'L:' .. lease .. '|-1', expiry)
      end
    else
      local fields = { 'last', now, 'jit', jit }
      if s.sd > 0 then
        slot = freeslot(s)
        if slot < 0 then
          slot = s.nslots
          s.nslots = s.nslots + 1
        end
        s.slots[slot] = now
        local parts = {}
        for j = 0, s.nslots - 1 do parts[j + 1] = format('%d', s.slots[j]) end
        fields[5], fields[6] = 'sl', table.concat(parts, ',')
      end
      if s.quota > 0 then
        if not s.qs then s.qs, s.qn, s.qu = now, 0, 0 end
        rollquota(s)
        s.qu = s.qu + s.cost
        qwin = s.qn
        local k = #fields
        fields[k + 1], fields[k + 2], fields[k + 3] = 'qs', format('%d', s.qs), 'qn'
        fields[k + 4], fields[k + 5], fields[k + 6] = s.qn, 'qu', s.qu
      end
      local k = #fields
      fields[k + 1], fields[k + 2] = 'L:' .. lease .. '|' .. slot, expiry
      redis.call('HSET', s.h, unpack(fields))
    end
    if s.expired then redis.call('HDEL', s.h, unpack(s.expired)) end
    -- Keep the hash while a lease, a delay, a gate or a quota window is
    -- pending, and idle_ttl after. Nothing else needs it longer: release
    -- and renew only lengthen it for a gate or a lease this covers.
    local pending = math.max(s.gate, now + s.delay * s.jit, (s.qs or 0) + s.win)
    local keep = math.max(ttl + 1000, idle + math.ceil(math.max(0, pending - now) / 1000))
    if not realtime then
      redis.call('PEXPIRE', s.h, keep)
    elseif not (s.kexp and s.kexp >= now + keep * 1000) then
      -- In Redis time the expiry is set with a quarter of idle_ttl to
      -- spare and recorded in 'e': the admissions that follow, while it
      -- still covers what they need, skip the call (one of four). Every
      -- other script only lengthens an expiry, so 'e' never exceeds it.
      keep = keep + math.floor(idle / 4)
      redis.call('HSET', s.h, 'e', format('%d', now + keep * 1000))
      redis.call('PEXPIRE', s.h, keep)
    end
  end
  local k = 5 + 4 * (i - 1)
  out[k + 1], out[k + 2], out[k + 3], out[k + 4] = slot, qwin, s.sver, ''
  if s.sver > s.ver and s.data then out[k + 4] = s.data end
end
return out
