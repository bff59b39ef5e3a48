-- progress: store a job's latest progress report when the attempt is current (fenced
-- like heartbeat.lua). The report lives on the job hash (pruned with it): 'pg' the
-- report as sent (JSON [fraction, message]), 'pa' when it was stored.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, job_id, attempt, lease_token, report JSON
-- Returns: 1 when stored, 0 when the attempt is not current (nothing stored)
local k = P .. ':j:' .. ARGV[4]
local f = redis.call('HMGET', k, 'st', 'att', 'tok')
if f[1] ~= 'running' or f[2] ~= ARGV[5] or f[3] ~= ARGV[6] then return 0 end
redis.call('HSET', k, 'pg', ARGV[7], 'pa', NOW)
return 1
