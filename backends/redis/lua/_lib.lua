-- Shared prelude, prepended to every script of this directory at load time.
-- Every script takes ARGV[1] = key prefix, ARGV[2] = now in epoch ms ('' = use the
-- server's TIME), ARGV[3] = retention in ms; its own arguments start at ARGV[4].
-- Keys are derived from the prefix inside the script (see docs/backends/redis.md), so
-- every key a script touches shares the prefix: on a Redis Cluster the prefix is a home's
-- hash tag ({qc:<queue>} or {qc}, backends/redis/homes.py), so a script runs in one slot.
-- #include _base

-- #include _batch

-- #include _corrupt

local function incr(key, d)
  local v = redis.call('INCRBY', key, d)
  if v <= 0 then redis.call('DEL', key) end
  return v
end

-- every stored job, by enqueue order (SupportsJobScan)
local function index_job(id)
  redis.call('ZADD', ALL, redis.call('INCR', P .. ':seq'), id)
end

local function nz(v) if v == false or v == '' then return nil end return v end

-- index a queued job whose hash already holds st=queued, mem=m and ra in its ready zset
local function index_ready(id, q, pr, ra, ss, m)
  redis.call('ZADD', rk(q, pr), ra, m)
  redis.call('ZADD', pk(q), pr, pr)
  -- P:sts by queue_core.rules.leases.queued_expiry (mirrored: ready time + bound)
  if ss then redis.call('ZADD', STS, ra + tonumber(ss), id) end
end

-- put a queued job (hash already says st=queued) into its ready zset
local function make_ready(id, q, pr, ra, ss)
  local m = string.format('%016x', redis.call('INCR', P .. ':seq')) .. id
  redis.call('HSET', jk(id), 'mem', m, 'ra', ra)
  index_ready(id, q, pr, ra, ss, m)
  if ra <= NOW then wake(q) end
end

-- move the oldest job parked on concurrency key ck back to its ready set (claim parks
-- it again if the key is still at its limit, so an extra move is harmless)
local function unpark_one(ck)
  local top = redis.call('ZPOPMIN', P .. ':cw:' .. ck)
  if top[1] then
    local m, score = top[1], tonumber(top[2])
    local id = string.sub(m, 17)
    local f = redis.call('HMGET', jk(id), 'st', 'q', 'pr')
    if f[1] == 'queued' then
      redis.call('ZADD', rk(f[2], f[3]), score, m)
      redis.call('ZADD', pk(f[2]), f[3], f[3])
      wake(f[2])
    end
  end
end

-- take a queued job out of every ready structure; a concurrency job that was in its
-- ready set may have been the one a freed slot woke, so it passes that wake-up on
local function unready(id, q, pr, mem, ck)
  if mem then
    local r = rk(q, pr)
    local was_ready = redis.call('ZREM', r, mem) == 1
    if was_ready and redis.call('EXISTS', r) == 0 then
      redis.call('ZREM', pk(q), pr)
    end
    if ck then
      redis.call('ZREM', P .. ':cw:' .. ck, mem)
      if was_ready then unpark_one(ck) end
    end
    if not was_ready then redis.call('ZREM', bk(q), mem) end  -- a reaped job in its backoff
  end
  redis.call('ZREM', STS, id)
end

-- a running job with concurrency key ck gives back its slot; one parked job returns
local function release_slot(ck)
  incr(P .. ':cr:' .. ck, -1)
  unpark_one(ck)
end

-- the job reaches a final state and is indexed for prune (fin_add), which deletes it once
-- finished_at <= now - retention; retention 0 keeps no finished job but still leaves it to
-- the next prune, like every backend (queue_core.rules.outcomes.parse_retention).
-- lease = true also drops the lease fields of a running job (same HDEL); res, when not
-- nil, is stored as the result (same HSET)
local function terminal(id, q, state, reason, ck, lease, res)
  if ck then incr(P .. ':ca:' .. ck, -1) end
  local k = jk(id)
  local fx = fin_add(state .. '|' .. id .. '|' .. q)
  if reason then
    if res then
      redis.call('HSET', k, 'st', state, 'fa', NOW, 'fx', fx, 'rs', reason, 'res', res)
    else
      redis.call('HSET', k, 'st', state, 'fa', NOW, 'fx', fx, 'rs', reason)
    end
    if lease then redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd') end
  else
    if res then
      redis.call('HSET', k, 'st', state, 'fa', NOW, 'fx', fx, 'res', res)
    else
      redis.call('HSET', k, 'st', state, 'fa', NOW, 'fx', fx)
    end
    if lease then
      redis.call('HDEL', k, 'rs', 'tok', 'le', 'dl', 'hd')
    else
      redis.call('HDEL', k, 'rs')
    end
  end
  redis.call('PEXPIRE', k, RET + 86400000)
  redis.call('PEXPIRE', ak(id), RET + 86400000)
  count(q, state, 1)
  tp_add(q, state, 1)
end

-- A job's newest attempt record, when it names no reason and no error (outcome and mode
-- only: every first-time success), is kept in the job hash, not in its attempt list:
-- field 'la' = 'number|started|finished - started|outcome|mode' and field 'lw' = its
-- worker, each as short as the hash's other fields ('wid' holds the same worker id), so
-- the hash stays a listpack and a job that succeeds on its first attempt is one key, not
-- two. The next record moves it to the list first (record_attempt); readers append it to
-- the list (la_json here, backends/redis/records.py with_last in Python).
local LA = '^(%d+)|(%d+)|(-?%d+)|([%w_]+)|([%w_]*)$'
local function la_json(la, wid)
  local n, sa, d, outcome, mode = string.match(la, LA)
  if not n or not wid then return nil end
  return '[' .. n .. ',' .. cjson.encode(wid) .. ',' .. sa .. ',' .. (tonumber(sa) + tonumber(d)) ..
    ',"' .. outcome .. '",null,null,null,null,null,' .. (mode == '' and 'null' or '"' .. mode .. '"') .. ']'
end

-- a dead-letter entry for job id; f = the job's fields read by DEAD_FIELDS: the spec as
-- enqueued ('ld' is the attempt-1 lost delay; a retry's update lives in 'lc'), which
-- retry_dead.lua replays (mirrors queue_core.rules.outcomes.replay_job)
local DEAD_FIELDS = {'tn', 'q', 'pl', 'pr', 'ma', 'ld', 'to', 'hb', 'ss', 'ck', 'cl', 'csk', 'op', 'ro',
                     'rk', 'rl', 'rw', 'cb', 'cg'}
local function dead_letter(id, reason, em, ec)
  local f = redis.call('HMGET', jk(id), unpack(DEAD_FIELDS))
  local did = string.format('%016x', redis.call('INCR', P .. ':dseq'))
  local dk = P .. ':d:' .. did
  local recs = redis.call('LRANGE', ak(id), 0, -1)
  local la = redis.call('HMGET', jk(id), 'la', 'lw')
  if la[1] then recs[#recs + 1] = la_json(la[1], la[2]) end
  local args = {'jid', id, 'rs', reason, 'da', NOW, 'at', '[' .. table.concat(recs, ',') .. ']'}
  for i, name in ipairs(DEAD_FIELDS) do
    if f[i] then args[#args + 1] = name; args[#args + 1] = f[i] end
  end
  local x = redis.call('HGET', jk(id), 'x')
  if x then args[#args + 1] = 'x'; args[#args + 1] = x end
  if em then args[#args + 1] = 'em'; args[#args + 1] = em end
  if ec then args[#args + 1] = 'ec'; args[#args + 1] = ec end
  redis.call('HSET', dk, unpack(args))
  redis.call('ZADD', DZ, NOW, did)
  redis.call('ZADD', P .. ':dt:' .. (f[1] or ''), NOW, did)
  redis.call('HSET', jk(id), 'did', did)
  terminal(id, f[2], 'dead', reason, nz(f[10]))
  return did
end

-- an attempt record: JSON [number, worker, started, finished, outcome, reason,
-- error_class, error_type, message, traceback, mode]; info is the JSON of the last 7
-- (att and sa are numbers as stored; a corrupt one is recorded as 0 / null, so the list
-- stays JSON: queue_core.records.corrupt); prev: the job's {'la', 'lw'} when the caller's
-- HMGET read them already (finish.lua), else nil (read here)
local function record_attempt(id, att, wid, sa, info, prev)
  local k = jk(id)
  prev = prev or redis.call('HMGET', k, 'la', 'lw')
  if prev[1] then
    local rec = la_json(prev[1], prev[2])
    if rec then redis.call('RPUSH', ak(id), rec) end
  end
  local n, s = tonumber(att), tonumber(sa)
  local outcome, mode = string.match(info,
    '^%["([%w_]+)",%s*null,%s*null,%s*null,%s*null,%s*null,%s*(.-)%]$')
  if mode == 'null' then mode = '' else mode = mode and string.match(mode, '^"([%w_]+)"$') end
  if mode and n and s and type(wid) == 'string' and n == math.floor(n) and n >= 0 and
      s == math.floor(s) and s >= 0 and s < 1e14 then
    redis.call('HSET', k, 'la', n .. '|' .. s .. '|' .. (tonumber(NOW) - s) .. '|' .. outcome .. '|' ..
      mode, 'lw', wid)
    return
  end
  if prev[1] then redis.call('HDEL', k, 'la', 'lw') end
  redis.call('RPUSH', ak(id), '[' .. (n or 0) .. ',' .. cjson.encode(wid) .. ',' ..
    (s or 'null') .. ',' .. NOW .. ',' .. string.sub(info, 2))
end

-- dead-letter job id, whose record is corrupt (the fields of `bad`), with reason
-- corrupt_record (queue_core.records.corrupt.corrupt_end), recording attempt att (outcome
-- `outcome`, worker wid, started sa) with the error that names the fields; q: its queue as
-- the caller knows it, written when the hash lost it, so the entry and counts have one
local function dead_corrupt(id, q, bad, att, wid, sa, outcome)
  local k = jk(id)
  local em = 'stored record is corrupt: ' .. table.concat(bad, ', ')
  record_attempt(id, att, wid, sa, '["' .. outcome .. '","corrupt_record","CorruptRecord",' ..
    '"CorruptRecord",' .. cjson.encode(em) .. ',null,null]')
  redis.call('HSETNX', k, 'q', q)
  redis.call('HSETNX', k, 'tn', '')
  redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd')
  return dead_letter(id, 'corrupt_record', em, 'CorruptRecord')
end

-- a running job stops running: lease index, running counts, concurrency slot
local function leave_running(id, q, ck)
  zop('ZREM', RUN, id)
  count(q, 'running', -1)
  if ck then release_slot(ck) end
end

-- a round_robin job (hash k, queue q) queued again with ready time ra and ready-set
-- member m: m into its key's index, the key into its group's turns (claim.lua's _rr.lua)
local function index_round_robin(k, q, ra, m)
  local rr = redis.call('HMGET', k, 'cb', 'ck', 'cg', 'tn')
  if rr[1] == 'round_robin' and rr[2] then
    local base = ':' .. q .. ':' .. (rr[3] or rr[4])
    redis.call('ZADD', P .. ':rrj' .. base .. ':' .. rr[2], ra, m)
    redis.call('ZADD', P .. ':rrt' .. base, 'NX', 0, rr[2])
  end
end

-- keep_m: the job's previous ready-set member, to keep its place in line (a reap with
-- lost delay 0, see reap.lua); nil = a fresh sequence number (the back of its ready time)
local function to_queued(id, q, pr, ra, ss, keep_m)
  local k = jk(id)
  local m = keep_m or (string.format('%016x', redis.call('INCR', P .. ':seq')) .. id)
  redis.call('HSET', k, 'st', 'queued', 'mem', m, 'ra', ra)
  redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd', 'rs', 'po')
  count(q, 'queued', 1)
  index_ready(id, q, pr, ra, ss, m)
  index_round_robin(k, q, ra, m)
  if ra <= NOW then wake(q) end
end

-- #include _running

-- flows: a step job (hash field x = its execution) changed state by an event. The change
-- becomes a pending event of the execution ("idx|new job state|job reason|attempt": a
-- queued job's end, with no attempt running, carries the number of the attempt it would
-- have started, so queue_core.rules.flows.plan.fold takes it after the end of the attempt
-- before), the execution's version moves (so an advance that read it before retries) and
-- the execution joins P:xadv, the executions that need an advance. The decision itself is
-- taken in Python (backends/redis/flows.py, design docs/design/flows-storage.md §10): the
-- caller advances right after, and reap() advances whatever a killed caller left.
local function flow_event(id, x, attempt)
  local f = redis.call('HMGET', jk(id), 'xi', 'st', 'rs')
  redis.call('RPUSH', P .. ':xe:' .. x, f[1] .. '|' .. f[2] .. '|' .. (f[3] or '') .. '|' .. attempt)
  redis.call('HINCRBY', P .. ':x:' .. x, 'v', 1)
  redis.call('SADD', P .. ':xadv', x)
  return x
end
