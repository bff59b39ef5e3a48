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
end
