-- next_ready: how long until a job of the queues may be claimable (read only); used by
-- wait_for_jobs before it blocks on the wake-up lists.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, queue...
-- Returns: 0 when a job is ready now, else milliseconds until the earliest ready time,
--          or -1 when no job is queued in a ready zset
local best = -1
for i = 4, #ARGV do
  local q = ARGV[i]
  for _, p in ipairs(redis.call('ZRANGE', pk(q), 0, -1)) do
    local head = redis.call('ZRANGE', rk(q, p), 0, 0, 'WITHSCORES')
    if head[2] then
      local wait = tonumber(head[2]) - NOW
      if wait <= 0 then return 0 end
      if best < 0 or wait < best then best = wait end
    end
  end
end
return best
