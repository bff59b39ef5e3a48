-- resume: remove a pause; the jobs of a paused task or flow that claims moved aside
-- (P:held:<field>, see claim.lua) go back to their ready sets, in their order (the
-- member keeps the enqueue sequence, the score is the job's ready time 'ra').
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, field ('<kind>:<name>')[, version]
-- On a Redis Cluster the pause is removed in the shared home, which moves the pause
-- version P:pv (the reply); then each queue's home is called with that version (the
-- pause hash is not there): it keeps the highest as P:rv, so that a claim that read the
-- pauses before the resume moves no job aside after this sweep (claim.lua), and puts
-- back the jobs its claims moved aside.
-- Returns: 1 (on a cluster's shared home: the new pause version) when the pause was
--          stored, 0 when there was none
local ret = 1
if ARGV[5] then
  if tonumber(ARGV[5]) > tonumber(redis.call('GET', P .. ':rv') or '0') then
    redis.call('SET', P .. ':rv', ARGV[5])
  end
else
  if redis.call('HDEL', P .. ':paused', ARGV[4]) == 0 then return 0 end
  -- #cluster _resume_version
end
local h = P .. ':held:' .. ARGV[4]
local woken = {}
for _, m in ipairs(redis.call('ZRANGE', h, 0, -1)) do
  local f = redis.call('HMGET', jk(string.sub(m, 17)), 'st', 'q', 'pr', 'mem', 'ra')
  -- a job that ended or went back to its ready set since is left where it is
  if f[1] == 'queued' and f[4] == m then
    redis.call('ZADD', rk(f[2], f[3]), f[5], m)
    redis.call('ZADD', pk(f[2]), f[3], f[3])
    if tonumber(f[5]) <= NOW and not woken[f[2]] then
      woken[f[2]] = true
      wake(f[2])
    end
  end
end
redis.call('DEL', h)
return ret
