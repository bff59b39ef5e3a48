-- cancel: a queued job ends cancelled; a running one gets a cancel request.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, job_id
-- Returns: {the job's state afterwards, its execution id when a step job ended (the
--          caller advances it) or false}, or nil for an unknown id
local id = ARGV[4]
local k = jk(id)
local f = redis.call('HMGET', k, 'st', 'q', 'pr', 'mem', 'ck', 'x', 'att')
if not f[1] then return false end
if f[1] == 'queued' then
  unready(id, f[2], f[3], f[4], f[5])
  count(f[2], 'queued', -1)
  terminal(id, f[2], 'cancelled', 'cancelled', f[5])
  if f[6] then return {'cancelled', flow_event(id, f[6], tonumber(f[7]) + 1)} end
  return {'cancelled', false}
elseif f[1] == 'running' then
  redis.call('HSET', k, 'cr', '1')
end
return {f[1], false}
