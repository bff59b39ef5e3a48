-- enqueue_one: enqueue_plain.lua for a batch of one job (a single delay()), with the
-- _now.lua prelude alone: no closure, table or loop is built per call, each key is
-- named once, and the writes are the calls enqueue_plain.lua makes for one job (an INCR
-- instead of INCRBY 1). The stored job, indexes, counts, throughput counter and wake-up
-- token are the same (tests/backends/redis/test_enqueue_plain.py compares every key);
-- a change to what enqueue_plain.lua or _base.lua's count/tp_add/wake write must be
-- made here too.
-- ARGV: prefix, now, retention, then one job as enqueue_plain.lua takes it: id,
--       task_name, queue, payload, priority, run_at ('' = now), delay_ms, max_attempts,
--       lost_delay_ms, timeout_ms ('' = None)
-- Returns: 1; or {'dup', id} when the id already exists (then nothing is stored)
local id, q, pr = ARGV[4], ARGV[6], ARGV[8]
local jkey = P .. ':j:' .. id
if redis.call('EXISTS', jkey) == 1 then return {'dup', id} end
local seq = redis.call('INCR', P .. ':seq')
local ra = NOW
if ARGV[9] ~= '' then ra = tonumber(ARGV[9]) end
ra = ra + tonumber(ARGV[10])
local m = string.format('%016x', seq) .. id
local to = ARGV[13]
if to ~= '' then
  redis.call('HSET', jkey, 'tn', ARGV[5], 'q', q, 'pl', ARGV[7], 'pr', pr,
             'ma', ARGV[11], 'ld', ARGV[12], 'eq', NOW, 'ra', ra, 'att', 0,
             'csk', '0', 'to', to, 'st', 'queued', 'mem', m)
else
  redis.call('HSET', jkey, 'tn', ARGV[5], 'q', q, 'pl', ARGV[7], 'pr', pr,
             'ma', ARGV[11], 'ld', ARGV[12], 'eq', NOW, 'ra', ra, 'att', 0,
             'csk', '0', 'st', 'queued', 'mem', m)
end
redis.call('ZADD', P .. ':jobs', seq, id)
redis.call('ZADD', P .. ':r:' .. q .. ':' .. pr, ra, m)
-- count(q, 'queued', 1) of _base.lua
local nkey = P .. ':n:' .. q
local v = redis.call('HINCRBY', nkey, 'queued', 1)
if v <= 0 then
  redis.call('HDEL', nkey, 'queued')
  if redis.call('EXISTS', nkey) == 0 then redis.call('SREM', P .. ':queues', q) end
elseif v == 1 then
  redis.call('SADD', P .. ':queues', q)
end
-- tp_add(q, 'enqueued', 1) of _base.lua
local tkey = P .. ':tp:' .. math.floor(NOW / 60000)
redis.call('HINCRBY', tkey, 'enqueued|' .. q, 1)
redis.call('PEXPIRE', tkey, 3720000)
redis.call('ZADD', P .. ':p:' .. q, pr, pr)
-- wake(q) of _base.lua, for a job ready now
if ra <= NOW then
  local wkey = P .. ':w:' .. q
  if redis.call('LLEN', wkey) < 8 then redis.call('LPUSH', wkey, '1') end
end
return 1
