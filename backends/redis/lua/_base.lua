-- Base prelude: what every script needs (the prefix, NOW, key names, counts, throughput
-- counters, chunked calls, wake-up tokens). _lib.lua starts with it; a script that needs
-- nothing more (enqueue_plain.lua, the single-enqueue hot path) is run with this alone
-- (backends/redis/scripts.py PRELUDES): each EVALSHA builds every closure of its prelude
-- again, so a shorter one is a cheaper call.
-- Every script takes ARGV[1] = key prefix, ARGV[2] = now in epoch ms ('' = use the
-- server's TIME), ARGV[3] = retention in ms; its own arguments start at ARGV[4].
-- Keys are derived from the prefix inside the script (see docs/backends/redis.md), so
-- every key a script touches shares the prefix: on a Redis Cluster the prefix is a home's
-- hash tag ({qc:<queue>} or {qc}, backends/redis/homes.py), so a script runs in one slot.
-- #include _now
local RUN = P .. ':run'
local STS = P .. ':sts'
local FIN = P .. ':fin'
local FINS = P .. ':fins'
local FINQ = P .. ':finseq'
local DZ = P .. ':dz'
local QS = P .. ':queues'
local ALL = P .. ':jobs'

local function jk(id) return P .. ':j:' .. id end
local function ak(id) return P .. ':a:' .. id end
local function rk(q, pr) return P .. ':r:' .. q .. ':' .. pr end
local function pk(q) return P .. ':p:' .. q end
-- reaped jobs of a queue waiting out their backoff (score = ready time, member = the
-- job's ready-set member): claim.lua moves them into their ready set at their kept place
local function bk(q) return P .. ':bo:' .. q end
local function wk(q) return P .. ':w:' .. q end

-- per-queue job counts by state; the queue leaves the index when all are zero.
-- Between defer_counts() and flush_counts() the changes are summed per queue and state
-- and written once each at the flush (a batch script then touches each count once).
local DEFER = nil
local function count(q, state, d)
  if DEFER then
    local t = DEFER[q]
    if not t then t = {}; DEFER[q] = t end
    t[state] = (t[state] or 0) + d
    return
  end
  local key = P .. ':n:' .. q
  local v = redis.call('HINCRBY', key, state, d)
  if v <= 0 then
    redis.call('HDEL', key, state)
    if redis.call('EXISTS', key) == 0 then redis.call('SREM', QS, q) end
  elseif v == d then
    redis.call('SADD', QS, q)
  end
end

-- throughput counters (queue_core.rules.throughput, read by backends/redis/throughput.py):
-- one hash per minute, P:tp:<epoch minute>, field '<kind>|<queue>' (kind = 'enqueued'
-- or a final state), kept TP_TTL ms after its last write (the one-hour window + 2 min).
-- Between defer_counts() and flush_counts() they are summed like count().
local TP_TTL = 3720000
local TPD = nil
local function tp_add(q, kind, d)
  local f = kind .. '|' .. q
  if TPD then
    TPD[f] = (TPD[f] or 0) + d
    return
  end
  local key = P .. ':tp:' .. math.floor(NOW / 60000)
  redis.call('HINCRBY', key, f, d)
  redis.call('PEXPIRE', key, TP_TTL)
end

-- redis.call(cmd, key, args...) in slices of at most 1000 arguments (Lua stack limit)
local function call_chunked(cmd, key, args)
  for i = 1, #args, 1000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
  end
end

-- at most 8 tokens: a full list (no idle worker took them) costs one read-only LLEN
local function wake(q)
  local k = wk(q)
  if redis.call('LLEN', k) < 8 then redis.call('LPUSH', k, '1') end
end
