-- purge_dead: delete up to `batch` dead-letter entries (of one task; dead at or before
-- `before`).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, task_name ('' = all), before ('' = any time), batch
-- Returns: the number deleted (fewer than batch = nothing left to delete)
local idx = DZ
if ARGV[4] ~= '' then idx = P .. ':dt:' .. ARGV[4] end
local hi = '+inf'
if ARGV[5] ~= '' then hi = ARGV[5] end
local ids = redis.call('ZRANGEBYSCORE', idx, '-inf', hi, 'LIMIT', 0, tonumber(ARGV[6]))
for _, did in ipairs(ids) do
  local dk = P .. ':d:' .. did
  local tn = redis.call('HGET', dk, 'tn')
  redis.call('DEL', dk)
  redis.call('ZREM', DZ, did)
  if tn then redis.call('ZREM', P .. ':dt:' .. tn, did) end
end
return #ids
