-- count_pending: jobs of the queues that are running, or queued and ready by
-- now + horizon (read only).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, horizon_ms, queue...
-- Returns: the count
local by = NOW + tonumber(ARGV[4])
local total = 0
for i = 5, #ARGV do
  local q = ARGV[i]
  local c = redis.call('HMGET', P .. ':n:' .. q, 'queued', 'running')
  total = total + tonumber(c[1] or '0') + tonumber(c[2] or '0')
  for _, p in ipairs(redis.call('ZRANGE', pk(q), 0, -1)) do
    total = total - redis.call('ZCOUNT', rk(q, p), '(' .. by, '+inf')
  end
end
return total
