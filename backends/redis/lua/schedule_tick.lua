-- schedule_tick: enqueue one job for a periodic tick, unless the tick is not later than
-- the schedule's last tick (hash P:schedules, field = schedule name, value = last tick).
-- Prepended to enqueue.lua (after _lib.lua) at load time: the check, the new last tick
-- and the enqueue are one script, so racing schedulers store exactly one job per tick.
-- ARGV: prefix, now, retention, schedule name, tick ms, then enqueue.lua's arguments of
-- one job (backends.redis.records.enqueue_args). Returns: {'tick'} when the tick was
-- taken before; otherwise as enqueue.lua.
local SCHED_NAME, SCHED_TICK = ARGV[4], tonumber(ARGV[5])
table.remove(ARGV, 4)
table.remove(ARGV, 4)
local SCHED_KEY = P .. ':schedules'
local SCHED_LAST = redis.call('HGET', SCHED_KEY, SCHED_NAME)
if SCHED_LAST and tonumber(SCHED_LAST) >= SCHED_TICK then return {'tick'} end
if redis.call('EXISTS', jk(ARGV[4])) == 1 then return {'dup', ARGV[4]} end
redis.call('HSET', SCHED_KEY, SCHED_NAME, SCHED_TICK)
