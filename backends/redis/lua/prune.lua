-- prune: delete up to `limit` finished jobs whose finished_at <= now - retention.
-- P:fin members are "<state>|<job id>|<queue>" so the counts stay right even when the
-- EXPIRE backstop removed the job's hash first. A job of a stored workflow is not the
-- retention's (its function reads it on its next run): it moves to the execution's
-- P:xh:<e> (its backstop expiry removed) and goes with the execution.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, limit
-- Returns: the ids of the jobs deleted: not those kept back for a workflow, but those
--          deleted with their execution (on a Redis Cluster the caller then drops their
--          entries in the job directory, backends/redis/homes.py)
local ms = redis.call('ZRANGEBYSCORE', FIN, '-inf', NOW - RET, 'LIMIT', 0, tonumber(ARGV[4]))
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
for _, m in ipairs(ms) do
  redis.call('ZREM', FIN, m)
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
