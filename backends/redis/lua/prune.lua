-- prune: delete up to `limit` finished jobs whose finished_at <= now - retention.
-- P:fin members are "<state>|<job id>|<queue>" so the counts stay right even when the
-- EXPIRE backstop removed the job's hash first.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, limit
-- Returns: the number of jobs deleted
local ms = redis.call('ZRANGEBYSCORE', FIN, '-inf', NOW - RET, 'LIMIT', 0, tonumber(ARGV[4]))
for _, m in ipairs(ms) do
  local state, id, q = string.match(m, '^([^|]*)|([^|]*)|(.*)$')
  redis.call('DEL', jk(id), ak(id))
  redis.call('ZREM', FIN, m)
  redis.call('ZREM', ALL, id)
  count(q, state, -1)
end
return #ms
