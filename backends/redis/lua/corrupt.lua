-- corrupt: dead-letter queued jobs whose record claim.lua could not read (corrupt_record,
-- queue_core.records.corrupt.corrupt_end), each alone; a job that is no longer queued, or
-- whose record reads again, is left as it is.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, then 3 per job: id, queue, priority (as claim.lua found it)
-- Returns: the executions whose step jobs were dead-lettered (the caller advances them)
defer_counts()
local xs = {}
for b = 4, #ARGV - 2, 3 do
  local id, q, p = ARGV[b], ARGV[b + 1], ARGV[b + 2]
  local f = redis.call('HMGET', jk(id), unpack(CLAIM_FIELDS))
  local bad = claim_corrupt(f, q)
  if (f[1] == 'queued' or not STATES[f[1]]) and claim_found(f) and #bad > 0 then
    unready(id, q, p, redis.call('HGET', jk(id), 'mem'), f[4])
    -- the queue it was queued in: the dead letter, its counts and a retry go there
    if f[25] ~= q then redis.call('HSET', jk(id), 'q', q) end
    count(q, 'queued', -1)
    local att = (tonumber(f[15]) or 0) + 1
    dead_corrupt(id, q, bad, att, nil, NOW, 'failed')
    if f[16] then xs[#xs + 1] = flow_event(id, f[16], att) end
  end
end
flush_counts()
return xs
