-- prune: delete up to `limit` finished jobs whose finished_at <= now - retention.
-- P:fin members are "<state>|<job id>|<queue>" so the counts stay right even when the
-- EXPIRE backstop removed the job's hash first.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, limit
-- Returns: the number of jobs deleted
local ms = redis.call('ZRANGEBYSCORE', FIN, '-inf', NOW - RET, 'LIMIT', 0, tonumber(ARGV[4]))
for _, m in ipairs(ms) do
  local state, id, q = string.match(m, '^([^|]*)|([^|]*)|(.*)$')
  local uk = redis.call('HGET', jk(id), 'uk')
  if uk and redis.call('HGET', P .. ':u:' .. uk, 'id') == id then
    redis.call('DEL', P .. ':u:' .. uk)  -- its unique key names no live job any more
  end
  redis.call('DEL', jk(id), ak(id))
  redis.call('ZREM', FIN, m)
  redis.call('ZREM', ALL, id)
  count(q, state, -1)
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
  redis.call('DEL', P .. ':x:' .. e, P .. ':xs:' .. e, P .. ':xe:' .. e, P .. ':xo:' .. e,
             P .. ':xj:' .. e, P .. ':xu:' .. e)
  redis.call('ZREM', P .. ':xl', e)
  if fl then redis.call('ZREM', P .. ':xl:' .. fl, e) end
  redis.call('ZREM', P .. ':xfin', e)
  redis.call('SREM', P .. ':xadv', e)
end
return #ms
