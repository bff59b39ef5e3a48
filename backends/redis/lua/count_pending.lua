-- count_pending: jobs of the queues that are running, or queued and ready by
-- now + horizon (read only).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, horizon_ms, queue...
--       (on a Redis Cluster then the pauses, _paused_argv.lua)
-- Queued jobs matching a pause are left out: every queued job of a paused queue, and the
-- jobs of a paused task or flow that a claim moved aside (P:held:<field>).
-- Returns: the count
-- #include _paused
local by = NOW + tonumber(ARGV[4])
local held = {}  -- queue -> its jobs moved aside that are still queued
if PH then
  for _, field in ipairs(PH) do
    for _, m in ipairs(redis.call('ZRANGE', P .. ':held:' .. field, 0, -1)) do
      local f = redis.call('HMGET', jk(string.sub(m, 17)), 'st', 'q', 'mem')
      if f[1] == 'queued' and f[3] == m then held[f[2]] = (held[f[2]] or 0) + 1 end
    end
  end
end
local total = 0
for i = 5, #ARGV do
  local q = ARGV[i]
  local c = redis.call('HMGET', P .. ':n:' .. q, 'queued', 'running')
  if PQ and PQ[q] then
    total = total + tonumber(c[2] or '0')
  else
    total = total + tonumber(c[1] or '0') + tonumber(c[2] or '0') - (held[q] or 0)
    for _, p in ipairs(redis.call('ZRANGE', pk(q), 0, -1)) do
      total = total - redis.call('ZCOUNT', rk(q, p), '(' .. by, '+inf')
    end
    -- reaped jobs whose backoff ends after the horizon (P:bo:<queue>, by ready time)
    total = total - redis.call('ZCOUNT', bk(q), '(' .. by, '+inf')
  end
end
return total
