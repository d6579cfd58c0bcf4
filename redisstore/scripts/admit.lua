-- admit.lua: admit one request on all of its scopes at once, or on none.
-- The same checks, in the same order, as store.Memory.Admit.
--
-- KEYS: each scope's state hash.
-- ARGV: now_us ('' = Redis TIME), lease, lease_ttl_ms, idle_ttl_ms, n,
--   deadline_us (0: none), channel, waits (0/1), since_us (0: none),
--   grace_us, then per scope: scope key, cost, concurrency, delay_us,
--   jitter, slot_delay_us, quota, window_us, version, bound_us (the
--   longest the scope may be held: store.Scope.WaitBound), max_conc (0:
--   no bound).
-- An admission run after its deadline (the caller's timeout, in Redis time)
-- is refused with an error and changes nothing: its caller has stopped
-- waiting for the reply, so a slot it took would be held by no one until
-- the lease expired (a Redis that was paused runs the commands queued
-- meanwhile when it resumes).
-- Reply: admitted (0/1), now_us, at_us (0: at a release), reason, scope
--   (1-based, 0: none), then per scope: slot, quota window, version, data
--   ('' unless newer than the caller's version).
-- Reasons: 1 concurrency, 2 delay, 3 slot delay, 4 gate, 5 quota, 6 queue.
--
-- State hash fields: c, d (shared concurrency and delay, written with the
-- learned state), last, jit (previous start and its jitter), sl (last start
-- per slot, comma separated), gate, qs, qn, qu (quota window start, number,
-- used), v, ld (learned state version and data), w (someone waits until
-- then: releases are published), q (the turn: "<since_us>|<lease>|<until_us>",
-- the waiter first refused among those this scope held back), qw (a
-- request waited behind the turn: its end is published), and one field a
-- lease, "L:<lease>|<slot>" = its expiry. One key a scope, read with one
-- HGETALL: each redis.call costs about as much as the command itself.
--
-- What the hash holds is read within bounds, whoever wrote it (a worker
-- configured otherwise, an older version, a stranger under the prefix, a
-- clock that was ahead): a value that is no number, or out of its range,
-- reads as absent; a lease's expiry is cut to lease_ttl from now, a gate to
-- bound, a start, a slot's start or a quota window's start to now, a turn's
-- end to its longest; and what is cut is written back, so it is held that
-- long at most from the first admission that finds it. A key of another
-- type, or a hash with more fields than this script ever writes, is no
-- scope's state: it is deleted (once every argument is checked) and the
-- scope starts afresh. Every hash this script writes gets its expiry.

local function bad(msg) return redis.error_reply('throttle: admit: ' .. msg) end
local function nonneg(v) return v ~= nil and v == v and v >= 0 and v < 1e300 end

local H = 10 -- header arguments
local P = 11 -- arguments per scope
local n = tonumber(ARGV[5])
if not n or n < 1 or n ~= math.floor(n) or #KEYS ~= n or #ARGV ~= H + P * n then
  return bad('malformed arguments')
end
local lease = ARGV[2]
if lease == '' or #lease > 256 or string.find(lease, '|', 1, true) then return bad('bad lease') end
local ttl, idle = tonumber(ARGV[3]), tonumber(ARGV[4])
if not nonneg(ttl) or ttl < 1 or not nonneg(idle) or idle < 1 then return bad('bad ttl') end
local channel, waits, since, grace = ARGV[7], ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
if (waits ~= '0' and waits ~= '1') or not nonneg(since) or not nonneg(grace) then return bad('bad turn') end
waits = waits == '1'
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
if since == 0 or since > now then since = now end

-- Written for speed (a script's own work is most of an admission's cost in
-- Redis, and tables are its dearest part): each scope's values are read
-- into locals, then kept in one table made by one constructor (a table
-- grown field by field rehashes as it grows); the hash's fields are
-- matched by name, not copied into a table; slots and busy slots are
-- parsed only for a slot delay.
local tonumber, byte, match, format = tonumber, string.byte, string.match, string.format
local leasemax = now + ttl * 1000

-- maxdata bounds the learned state handed out (a policy's is about 1 KiB).
local maxdata = 65536

-- hset writes fields (name, value, ...) to h, in calls of at most 4096
-- arguments (unpack's limit is about 8000).
local function hset(h, fields)
  for j = 1, #fields, 4096 do redis.call('HSET', h, unpack(fields, j, math.min(j + 4095, #fields))) end
end

-- num reads a field as a number in [0, 1e300), else nil.
local function num(v)
  v = tonumber(v)
  if nonneg(v) then return v end
  return nil
end

local sc = {}
local none = {} -- the busy slots of every scope without any (only read)
for i = 1, n do
  local b = H + P * (i - 1)
  local key = ARGV[b + 1]
  local cost, conc, delay = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  local jit, sd, quota = tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]), tonumber(ARGV[b + 7])
  local win, ver = tonumber(ARGV[b + 8]), tonumber(ARGV[b + 9])
  local bound, maxc = tonumber(ARGV[b + 10]), tonumber(ARGV[b + 11])
  if not (nonneg(cost) and nonneg(conc) and nonneg(delay) and nonneg(jit) and nonneg(sd)
      and nonneg(quota) and nonneg(win) and nonneg(ver) and nonneg(bound) and nonneg(maxc)) then
    return bad('scope ' .. i .. ': bad number')
  end
  if conc < 1 or (quota > 0 and win <= 0) or bound < 1 then return bad('scope ' .. i .. ': bad limits') end
  -- Bad arguments of a later scope are found after this read: reads
  -- change nothing, and nothing is written before every scope was checked.
  local f = redis.pcall('HGETALL', KEYS[i])
  local reset = false
  if f.err or #f > 2 * (1024 + 2 * math.max(conc, maxc)) then
    reset, f = true, none -- another type, or stuffed: no state of ours
  end
  local live, busy, expired, first, fix = 0, nil, nil, nil, nil
  local cstored, dstored, last, pjit, gate, qs, qn, qu, sver, data, sl, turn, qw
  for j = 1, #f, 2 do
    local k, v = f[j], f[j + 1]
    if byte(k) == 76 then -- 'L': a lease, "L:<lease>|<slot>" = its expiry
      local exp = num(v)
      if exp and exp > now then
        if exp > leasemax then
          exp = leasemax
          fix = fix or {}
          fix[#fix + 1], fix[#fix + 2] = k, format('%d', exp)
        end
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
    elseif k == 'last' then last = num(v)
    elseif k == 'jit' then pjit = num(v)
    elseif k == 'c' then cstored = num(v)
    elseif k == 'd' then dstored = num(v)
    elseif k == 'v' then sver = num(v)
    elseif k == 'ld' then data = v
    elseif k == 'gate' then gate = num(v)
    elseif k == 'sl' then sl = v
    elseif k == 'qs' then qs = num(v)
    elseif k == 'qn' then qn = num(v)
    elseif k == 'qu' then qu = num(v)
    elseif k == 'q' then turn = v
    elseif k == 'qw' then qw = true
    end
  end
  if cstored and (cstored < 1 or cstored ~= math.floor(cstored)) then cstored = nil end
  if cstored and maxc > 0 and cstored > maxc then cstored = maxc end
  if dstored and dstored > bound then dstored = bound end
  if sver and (sver > 9007199254740991 or sver ~= math.floor(sver)) then sver, data = nil, nil end
  if data and #data > maxdata then sver, data = nil, nil end -- no policy's: not handed out
  local latest = math.max(last or 0, qs or 0)
  if gate and latest > now then
    -- A start after now: the clock went back at least that far (or a
    -- worker's was ahead). The gate goes back as far, keeping the time
    -- it had left from the start before it, as admission.State's rebase
    -- does; the starts are moved to now below.
    gate = math.max(gate - (latest - now), 0)
    fix = fix or {}
    fix[#fix + 1], fix[#fix + 2] = 'gate', format('%d', gate)
  end
  if last and last > now then
    last = now
    fix = fix or {}
    fix[#fix + 1], fix[#fix + 2] = 'last', format('%d', now)
  end
  if gate and gate > now + bound then
    gate = now + bound
    fix = fix or {}
    fix[#fix + 1], fix[#fix + 2] = 'gate', format('%d', gate)
  end
  if qs and qs > now then
    qs = now
    fix = fix or {}
    fix[#fix + 1], fix[#fix + 2] = 'qs', format('%d', now)
  end
  local tsince, tlease, tuntil
  if turn then
    local a, l, u = match(turn, '^(%d+)|([^|]+)|(%d+)$')
    tsince, tlease, tuntil = tonumber(a), l, tonumber(u)
    if not (tsince and tuntil) then
      tlease = nil
    elseif tsince > now or tuntil > now + math.max(bound, ttl * 1000, win) + grace then
      -- Longer than any refusal names: a stranger's, or a clock's that
      -- was ahead. It ends as the latest a waiter's could.
      tsince, tuntil = math.min(tsince, now), now + math.max(bound, ttl * 1000, win) + grace
      fix = fix or {}
      fix[#fix + 1], fix[#fix + 2] = 'q', format('%d|%s|%d', tsince, tlease, tuntil)
    end
  end
  local slots, nslots = nil, 0
  if sd > 0 then
    slots = {}
    if sl then
      local moved = false
      for v in string.gmatch(sl, '[^,]+') do
        local t = num(v) or 0
        if t > now then t, moved = now, true end
        slots[nslots] = t
        nslots = nslots + 1
        if nslots >= 1024 then break end
      end
      if moved then
        local parts = {}
        for j = 0, nslots - 1 do parts[j + 1] = format('%d', slots[j]) end
        fix = fix or {}
        fix[#fix + 1], fix[#fix + 2] = 'sl', table.concat(parts, ',')
      end
    end
  end
  sc[i] = { h = KEYS[i], key = key, exists = #f > 0, reset = reset, cost = cost, conc = cstored or conc,
    delay = dstored or delay, jit = jit, sd = sd, quota = quota, win = win, ver = ver, bound = bound,
    live = live, busy = busy or none, expired = expired, first = first, last = last, pjit = pjit or 1,
    gate = gate or 0, qs = qs, qn = qn or 0, qu = qu or 0, sver = sver or 0, data = data, slots = slots,
    nslots = nslots, fix = fix, tsince = tsince, tlease = tlease, tuntil = tuntil, qw = qw }
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

-- live reports whether s's turn holds others back now.
local function turnlive(s) return s.tlease ~= nil and now < s.tuntil end

local at, why, who = now, 0, 0
for i = 1, n do
  local s = sc[i]
  if s.live >= s.conc then
    why, who = 1, i
    at = s.first or 0 -- the earliest lease expiry: the fallback wake
    break
  end
  -- t, r: when this scope admits, and the rule that holds it until then.
  local t, r = now, 0
  if s.last then
    local x = s.last + math.min(s.delay * s.pjit, s.bound)
    if x > t then t, r = x, 2 end
  end
  if s.sd > 0 then
    local _, free = freeslot(s)
    if free == nil then
      why, who, at = 1, i, 0
      break
    end
    if free > t then t, r = free, 3 end
  end
  if s.gate > t then t, r = s.gate, 4 end
  if s.quota > 0 then
    rollquota(s)
    if s.qs and s.qu > 0 and s.qu + s.cost > s.quota then
      local x = s.qs + s.win
      if x > t then t, r = x, 5 end
    end
  end
  if r == 0 and turnlive(s) and s.tlease ~= lease then
    -- The scope would admit now, but a waiter that came first has the
    -- turn: wait for its admission (published) or the turn's end.
    why, who, at = 6, i, s.tuntil
    break
  end
  if t > at then at, why, who = t, r, i end
end

-- A scope written to on a refusal (expiry, turns): written once, with its
-- fixes, and kept as an admission would keep it.
local function keep(s)
  local pending = math.max(s.gate, now + math.min(s.delay * s.jit, s.bound), (s.qs or 0) + s.win, s.tuntil or 0)
  return math.max(ttl + 1000, idle + math.ceil(math.max(0, pending - now) / 1000))
end

local function flush(s, fields)
  if s.reset then redis.call('DEL', s.h) end
  if s.fix then
    for j = 1, #s.fix do fields[#fields + 1] = s.fix[j] end
  end
  if #fields > 0 then
    hset(s.h, fields)
    redis.call('PEXPIRE', s.h, keep(s))
  end
end

local out = { 0, now, 0, why, who, 0, 0, 0, '' } -- (sized for one scope)
if why ~= 0 then
  out[3] = at
  -- Someone waits on these scopes until about then: release.lua
  -- publishes only while a 'w' is pending, so a fleet with no waiters
  -- sends no notification to every worker on every release.
  local waitsuntil = format('%d', now + ttl * 1000)
  for i = 1, n do
    local s = sc[i]
    local fields = {}
    if s.exists then fields[1], fields[2] = 'w', waitsuntil end
    if waits and i == who then
      -- The turn goes to this caller if it came first, or if the turn
      -- has ended; it lasts until grace after the time named.
      if s.tlease == lease or not turnlive(s) or since < s.tsince or (since == s.tsince and lease < s.tlease) then
        s.tsince, s.tlease, s.tuntil = since, lease, (at > 0 and at or now + ttl * 1000) + grace
        fields[#fields + 1], fields[#fields + 2] = 'q', format('%d|%s|%d', since, lease, s.tuntil)
      end
    end
    if why == 6 and i == who then fields[#fields + 1], fields[#fields + 2] = 'qw', '1' end
    flush(s, fields)
  end
else
  out[1] = 1
end
local expiry = why == 0 and format('%d', now + ttl * 1000)
for i = 1, n do
  local s = sc[i]
  local slot, qwin = -1, 0
  if why == 0 then
    if s.reset then redis.call('DEL', s.h) end
    local jit = ARGV[H + P * (i - 1) + 5]
    if s.sd == 0 and s.quota == 0 and not s.fix then
      -- The common case, without a table for the fields, and without
      -- the jitter when it is the previous start's (absent means 1).
      if s.pjit == s.jit then
        redis.call('HSET', s.h, 'last', now, 'L:' .. lease .. '|-1', expiry)
      else
        redis.call('HSET', s.h, 'last', now, 'jit', jit, 'L:' .. lease .. '|-1', expiry)
      end
    else
      local fields = s.fix or {}
      fields[#fields + 1], fields[#fields + 2] = 'last', now
      if s.pjit ~= s.jit then
        fields[#fields + 1], fields[#fields + 2] = 'jit', jit
      end
      if s.sd > 0 then
        slot = freeslot(s)
        if slot < 0 then
          slot = s.nslots
          s.nslots = s.nslots + 1
        end
        s.slots[slot] = now
        local parts = {}
        for j = 0, s.nslots - 1 do parts[j + 1] = format('%d', s.slots[j]) end
        fields[#fields + 1], fields[#fields + 2] = 'sl', table.concat(parts, ',')
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
      fields[#fields + 1], fields[#fields + 2] = 'L:' .. lease .. '|' .. slot, expiry
      hset(s.h, fields)
    end
    local gone = s.expired
    if s.tlease == lease then
      -- The turn was this caller's: the next waiter's comes, and those
      -- that waited behind it are told.
      gone = gone or {}
      gone[#gone + 1], gone[#gone + 2] = 'q', 'qw'
      if s.qw then redis.call('PUBLISH', channel, s.key) end
      s.tuntil = nil
    end
    if gone then
      for j = 1, #gone, 4096 do redis.call('HDEL', s.h, unpack(gone, j, math.min(j + 4095, #gone))) end
    end
    -- Keep the hash while a lease, a delay, a gate or a quota window is
    -- pending, and idle_ttl after. Nothing else needs it longer: release
    -- and renew only lengthen it for a gate or a lease this covers.
    redis.call('PEXPIRE', s.h, keep(s))
  end
  local k = 5 + 4 * (i - 1)
  out[k + 1], out[k + 2], out[k + 3], out[k + 4] = slot, qwin, s.sver, ''
  if s.sver > s.ver and s.data then out[k + 4] = s.data end
end
return out
