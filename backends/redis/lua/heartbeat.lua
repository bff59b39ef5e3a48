-- heartbeat: the heartbeat deadline of a current attempt becomes now + heartbeat_ms.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, job_id, attempt, lease_token
-- Returns: -1 when the attempt is not current, else 1 when the job has a pending cancel
--          request and 0 when not
local id = ARGV[4]
local k = jk(id)
local f = redis.call('HMGET', k, 'st', 'att', 'tok', 'le', 'dl', 'hb', 'cr')
if f[1] ~= 'running' or f[2] ~= ARGV[5] or f[3] ~= ARGV[6] then return -1 end
if f[6] then
  local hd = NOW + tonumber(f[6])
  redis.call('HSET', k, 'hd', hd)
  redis.call('ZADD', RUN, run_score(tonumber(f[4]), tonumber(f[5]), hd), id)
end
if f[7] then return 1 end
return 0
