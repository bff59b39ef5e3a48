-- prune: delete up to `limit` finished jobs whose finished_at <= now - retention.
-- The retention index (fin_add in _batch.lua) is the stream P:fins plus the sorted set
-- P:fin (out-of-order finishes, what an entry taken in part leaves, and the index of
-- versions before the stream); the sorted set is read first. Members are
-- "<state>|<job id>|<queue>" so the counts stay right even when the EXPIRE backstop
-- removed the job's hash first. A job of a stored workflow is not the retention's (its
-- function reads it on its next run): it moves to the execution's P:xh:<e> (its backstop
-- expiry removed) and goes with the execution.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, limit
-- Returns: the ids of the jobs deleted: not those kept back for a workflow, but those
--          deleted with their execution (on a Redis Cluster the caller then drops their
--          entries in the job directory, backends/redis/homes.py)
local CUT = NOW - RET
local budget = tonumber(ARGV[4])
local ids = {}
local function drop_job(m)
  local state, id, q = string.match(m, '^([^|]*)|([^|]*)|(.*)$')
  ids[#ids + 1] = id
  local uk, dk, cb, ck = unpack(redis.call('HMGET', jk(id), 'uk', 'dk', 'cb', 'ck'))
  if uk and redis.call('HGET', P .. ':u:' .. uk, 'id') == id then
    redis.call('DEL', P .. ':u:' .. uk)  -- its unique key names no live job any more
  end
  if dk and redis.call('GET', P .. ':db:' .. dk) == id then
    redis.call('DEL', P .. ':db:' .. dk)  -- nor its debounce key
  end
  if cb and ck then redis.call('ZREM', P .. ':sup:' .. ck, id) end  -- nor its superseding key
  redis.call('DEL', jk(id), ak(id))
  redis.call('ZREM', ALL, id)
  count(q, state, -1)
end
local function take(m)
  local id = string.match(m, '^[^|]*|([^|]*)|')
  local x = redis.call('HGET', jk(id), 'x')
  if x and redis.call('HGET', P .. ':x:' .. x, 'k') == 'workflow' then
    redis.call('SADD', P .. ':xh:' .. x, m)
    redis.call('PERSIST', jk(id))
    redis.call('PERSIST', ak(id))
  else
    drop_job(m)
  end
end
local ms = redis.call('ZRANGEBYSCORE', FIN, '-inf', CUT, 'LIMIT', 0, budget)
for _, m in ipairs(ms) do
  redis.call('ZREM', FIN, m)
  take(m)
end
budget = budget - #ms
-- the stream, oldest entry first: a member whose job hash names another entry ('fx') has
-- run again since (its count went then) and is passed over; a job hash gone (the EXPIRE
-- backstop) still counts
while budget > 0 and CUT >= 0 do
  local es = redis.call('XRANGE', FINS, '-', CUT, 'COUNT', math.min(budget, 100))
  if #es == 0 then break end
  for _, e in ipairs(es) do
    if budget == 0 then break end
    local fx, left = e[1], {}
    local members = cmsgpack.unpack(e[2][2])
    for _, m in ipairs(members) do
      local id = string.match(m, '^[^|]*|([^|]*)|')
      local now_fx = redis.call('HGET', jk(id), 'fx')
      if now_fx == fx or (not now_fx and redis.call('EXISTS', jk(id)) == 0) then
        if budget > 0 then
          take(m)
          budget = budget - 1
        else
          left[#left + 1] = tonumber(string.match(fx, '^(%d+)'))
          left[#left + 1] = m
        end
      end
    end
    redis.call('XDEL', FINS, fx)
    if #left > 0 then call_chunked('ZADD', FIN, left) end  -- the entry's rest, still due
  end
end
-- finished flow executions go with the same cutoff (their step jobs finished no later
-- than the execution, so the loop above takes them in the same or an earlier call)
local xs = redis.call('ZRANGEBYSCORE', P .. ':xfin', '-inf', NOW - RET, 'LIMIT', 0,
                      tonumber(ARGV[4]))
for _, e in ipairs(xs) do
  local fl, sh = unpack(redis.call('HMGET', P .. ':x:' .. e, 'fl', 'sh'))
  if sh and redis.call('DECR', P .. ':fsn:' .. sh) <= 0 then
    redis.call('DEL', P .. ':fs:' .. sh, P .. ':fsn:' .. sh)
  end
  for _, m in ipairs(redis.call('SMEMBERS', P .. ':xh:' .. e)) do
    drop_job(m)
  end
  redis.call('DEL', P .. ':x:' .. e, P .. ':xs:' .. e, P .. ':xe:' .. e, P .. ':xo:' .. e,
             P .. ':xj:' .. e, P .. ':xu:' .. e, P .. ':xh:' .. e, P .. ':xm:' .. e,
             P .. ':xmi:' .. e, P .. ':xw:' .. e)
  redis.call('ZREM', P .. ':xl', e)
  if fl then redis.call('ZREM', P .. ':xl:' .. fl, e) end
  redis.call('ZREM', P .. ':xfin', e)
  redis.call('SREM', P .. ':xadv', e)
end
-- workflow events sent at or before the cutoff (SupportsWorkflows.send_event)
local evs = redis.call('ZRANGEBYSCORE', P .. ':evt', '-inf', NOW - RET, 'LIMIT', 0,
                       tonumber(ARGV[4]))
for _, m in ipairs(evs) do
  local seq, name = string.match(m, '^([^|]*)|(.*)$')
  redis.call('ZREM', P .. ':ev:' .. name, seq)
  redis.call('HDEL', P .. ':evd:' .. name, seq)
  redis.call('HDEL', P .. ':evk:' .. name, seq)
  redis.call('ZREM', P .. ':evt', m)
end
return ids
