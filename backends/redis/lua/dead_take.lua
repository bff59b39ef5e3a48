-- dead_take: the first step of a retry_dead whose replay is stored in another home than
-- the entry (a Redis Cluster, backends/redis/admin.py): mark the entry as being replayed
-- by a new job id, so that a concurrent retry of the same entry finds it taken, and
-- return what the replay is built from (queue_core.rules.outcomes.replay_job, in Python).
-- The entry is removed by dead_drop.lua once the replay is stored.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, dead_id (as stored), new_job_id, mark to replace ('' =
--       none: a mark that stayed after a crash, taken over by the caller)
-- Returns: 0 when there is no such entry; -1 when it is a flow step's; {'taken', mark}
--          when another retry marked it ("<new job id>|<marked at>"); else {'ok', the
--          mark set, the values of the spec fields below ('' = none)}
local dk = P .. ':d:' .. ARGV[4]
if redis.call('EXISTS', dk) == 0 then return 0 end
if redis.call('HEXISTS', dk, 'x') == 1 then return -1 end
local mark = redis.call('HGET', dk, 'rtk')
if mark and mark ~= ARGV[6] then return {'taken', mark} end
mark = ARGV[5] .. '|' .. NOW
redis.call('HSET', dk, 'rtk', mark)
local f = redis.call('HMGET', dk, 'tn', 'q', 'pl', 'pr', 'ma', 'ld', 'to', 'hb', 'ss', 'ck', 'cl',
                     'csk', 'op', 'ro', 'rk', 'rl', 'rw')
local out = {'ok', mark}
for i = 1, 17 do out[i + 2] = f[i] or '' end
return out
