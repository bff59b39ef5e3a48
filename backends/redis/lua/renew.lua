-- renew: extend the lease of every current attempt named (fenced per ref).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, lease_ms, then 3 per ref: job_id, attempt, lease_token
-- Returns: a table per ref: 0 lost (not current), 1 renewed, 2 renewed and the job has a
--          pending cancel request
defer_counts()
local lease = tonumber(ARGV[4])
local out = {}
for b = 4, #ARGV - 1, 3 do
  local id = ARGV[b + 1]
  local k = jk(id)
  local f = redis.call('HMGET', k, 'st', 'att', 'tok', 'dl', 'hd', 'cr')
  if f[1] ~= 'running' or f[2] ~= ARGV[b + 2] or f[3] ~= ARGV[b + 3] then
    out[#out + 1] = 0
  else
    local le = NOW + lease
    redis.call('HSET', k, 'le', le)
    zop('ZADD', RUN, run_score(le, tonumber(f[4]), tonumber(f[5])), id)
    if f[6] then out[#out + 1] = 2 else out[#out + 1] = 1 end
  end
end
flush_counts()
return out
