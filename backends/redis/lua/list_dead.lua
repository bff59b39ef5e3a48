-- list_dead: a page of dead-letter entries, newest first (read only).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, offset, limit, task_name ('' = all)
-- Returns: flat list, 12 per entry: dead_id, job_id, task_name, queue, payload, error
--          message|nil, error_class|nil, reason, attempts JSON, dead_at, replay_of|nil
--          (11 fields + the id)
local idx = DZ
if ARGV[6] ~= '' then idx = P .. ':dt:' .. ARGV[6] end
local off, lim = tonumber(ARGV[4]), tonumber(ARGV[5])
local out = {}
if lim <= 0 then return out end
for _, did in ipairs(redis.call('ZREVRANGE', idx, off, off + lim - 1)) do
  local f = redis.call('HMGET', P .. ':d:' .. did, 'jid', 'tn', 'q', 'pl', 'em', 'ec', 'rs', 'at',
                       'da', 'ro')
  out[#out + 1] = did
  for i = 1, 10 do out[#out + 1] = f[i] end
end
return out
