-- Batched writes: count() and zop() between defer_counts() and flush_counts() sum and
-- collect, then write each count and sorted set once (_lib.lua and _claim.lua).
-- sorted-set writes that may wait for the flush too: ZD[cmd][key] = flat argument list
local ZD = nil

local function zop(cmd, key, a, b)
  if not ZD then
    if b then redis.call(cmd, key, a, b) else redis.call(cmd, key, a) end
    return
  end
  local t = ZD[cmd][key]
  if not t then t = {}; ZD[cmd][key] = t end
  t[#t + 1] = a
  if b then t[#t + 1] = b end
end

-- from here to flush_counts(), count() sums and zop() collects (a batch script then
-- writes each count once and each sorted set with one command); nothing in between may
-- read those counts or sorted sets
local function defer_counts() DEFER = {}; ZD = {ZREM = {}, ZADD = {}}; TPD = {} end

-- The retention index of finished jobs is the stream P:fins: appending is O(1) whatever
-- the history holds (a sorted set's insert slows as it grows: docs/guides/performance.md).
-- One entry per write, id <NOW>-<P:finseq>, field 'm' = the msgpacked members
-- "<state>|<job id>|<queue>"; each job hash keeps its entry's id as 'fx', so prune.lua
-- knows an entry of a job that has run again since (flow_rerun) and passes it over.
-- An id must grow: a NOW older than the stream's last entry (a caller's clock behind
-- another's, a test's explicit time) goes to the sorted set P:fin, score NOW, which
-- prune.lua reads first (it is also the index written by versions before the stream).
local function fin_write(fx, ms)
  local r = redis.pcall('XADD', FINS, fx, 'm', cmsgpack.pack(ms))
  if type(r) == 'table' and r.err then
    local args = {}
    for _, m in ipairs(ms) do args[#args + 1] = NOW; args[#args + 1] = m end
    call_chunked('ZADD', FIN, args)
  end
end

-- m joins the retention index; returns the id of its entry (one per batch)
local function fin_add(m)
  if not ZD then
    local fx = NOW .. '-' .. redis.call('INCR', FINQ)
    fin_write(fx, {m})
    return fx
  end
  if not ZD.FX then ZD.FX = NOW .. '-' .. redis.call('INCR', FINQ); ZD.FM = {} end
  ZD.FM[#ZD.FM + 1] = m
  return ZD.FX
end

local function flush_counts()
  local pending, z, tp = DEFER, ZD, TPD
  DEFER, ZD, TPD = nil, nil, nil
  if next(tp) then
    local key = P .. ':tp:' .. math.floor(NOW / 60000)
    for f, d in pairs(tp) do redis.call('HINCRBY', key, f, d) end
    redis.call('PEXPIRE', key, TP_TTL)
  end
  for q, t in pairs(pending) do
    for state, d in pairs(t) do
      if d ~= 0 then count(q, state, d) end
    end
  end
  for key, args in pairs(z.ZREM) do call_chunked('ZREM', key, args) end
  for key, args in pairs(z.ZADD) do call_chunked('ZADD', key, args) end
  if z.FX then fin_write(z.FX, z.FM) end
end
