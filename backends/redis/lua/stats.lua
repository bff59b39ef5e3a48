-- stats: per-queue counts by state (read only); ready/scheduled split by ready time.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention
-- Returns: per queue {queue, scheduled, field, value, field, value, ...}
local out = {}
for _, q in ipairs(redis.call('SMEMBERS', QS)) do
  local sched = 0
  for _, p in ipairs(redis.call('ZRANGE', pk(q), 0, -1)) do
    sched = sched + redis.call('ZCOUNT', rk(q, p), '(' .. NOW, '+inf')
  end
  -- reaped jobs waiting out their backoff (P:bo:<queue>, by ready time)
  sched = sched + redis.call('ZCOUNT', bk(q), '(' .. NOW, '+inf')
  local row = {q, sched}
  for _, v in ipairs(redis.call('HGETALL', P .. ':n:' .. q)) do row[#row + 1] = v end
  out[#out + 1] = row
end
return out
