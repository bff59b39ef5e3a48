-- next_ready: how long until a job of the queues may be claimable (read only); used by
-- wait_for_jobs before it blocks on the wake-up lists.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, queue... (on a Redis Cluster then the pauses, _paused_argv.lua)
-- Returns: 0 when a job is ready now, else milliseconds until the earliest ready time,
--          or -1 when no job is queued in a ready zset. A paused queue's jobs do not
--          count, nor those of a paused task or flow that a claim moved aside.
-- #include _paused
local best = -1
for i = 4, #ARGV do
  local q = ARGV[i]
  if not (PQ and PQ[q]) then
    -- reaped jobs waiting out their backoff (P:bo:<queue>, by ready time)
    local bo = redis.call('ZRANGE', bk(q), 0, 0, 'WITHSCORES')
    if bo[2] then
      local wait = tonumber(bo[2]) - NOW
      if wait <= 0 then return 0 end
      if best < 0 or wait < best then best = wait end
    end
    for _, p in ipairs(redis.call('ZRANGE', pk(q), 0, -1)) do
      local head = redis.call('ZRANGE', rk(q, p), 0, 0, 'WITHSCORES')
      if head[2] then
        local wait = tonumber(head[2]) - NOW
        if wait <= 0 then return 0 end
        if best < 0 or wait < best then best = wait end
      end
    end
  end
end
return best
