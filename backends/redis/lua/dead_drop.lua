-- dead_drop: the last step of a retry_dead across homes (see dead_take.lua): remove the
-- entry if it is still marked by this replay.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, dead_id (as stored), mark
-- Returns: 1 when removed, 0 when not (gone, or marked by another replay)
local did = ARGV[4]
local dk = P .. ':d:' .. did
if redis.call('HGET', dk, 'rtk') ~= ARGV[5] then return 0 end
local tn = redis.call('HGET', dk, 'tn')
redis.call('DEL', dk)
redis.call('ZREM', DZ, did)
if tn then redis.call('ZREM', P .. ':dt:' .. tn, did) end
return 1
