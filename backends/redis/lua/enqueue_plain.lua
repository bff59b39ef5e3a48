-- enqueue_plain: store new plain jobs, the common case of enqueue.lua with ten
-- arguments per job instead of 22 (no unique key, rate key, concurrency key, replay,
-- heartbeat, schedule-to-start or per-call options: each job is queued).
-- The stored job is the one enqueue.lua stores for the same job (same fields, sequence
-- number, indexes, counts and wake-up token); backends/redis/enqueue.py picks this script only for a batch
-- whose jobs are all plain.
-- KEYS: none (derived from the prefix, see _lib.lua)
-- Shares its duplicate check and once-per-batch writes with enqueue.lua
-- (the `-- #include` lines, expanded at load time).
-- ARGV: prefix, now, retention, then 10 per job: id, task_name, queue, payload, priority,
--       run_at ('' = now), delay_ms, max_attempts, lost_delay_ms, timeout_ms ('' = None)
-- Returns: the number of jobs stored; or {'dup', id} when a job id already exists (then
--          nothing is stored)
local S = 10
local n = (#ARGV - 3) / S
-- #include _enqueue_dup
local SEQ = P .. ':seq'
-- The batch takes n sequence numbers with one INCRBY (job i gets base + i + 1, as n
-- INCRs would give) and writes P:jobs and each ready set with one ZADD per key: per job
-- only the EXISTS of the duplicate check and one HSET are calls of their own.
local base = redis.call('INCRBY', SEQ, n) - n
local all, ready = {}, {}
local queued, prios, woken = {}, {}, {}
for i = 0, n - 1 do
  local b = 3 + i * S
  local id, q, pr = ARGV[b + 1], ARGV[b + 3], ARGV[b + 5]
  local ra = NOW
  if ARGV[b + 6] ~= '' then ra = tonumber(ARGV[b + 6]) end
  ra = ra + tonumber(ARGV[b + 7])
  local seq = base + i + 1
  local m = string.format('%016x', seq) .. id
  local to = ARGV[b + 10]
  if to ~= '' then
    redis.call('HSET', jk(id), 'tn', ARGV[b + 2], 'q', q, 'pl', ARGV[b + 4], 'pr', pr,
               'ma', ARGV[b + 8], 'ld', ARGV[b + 9], 'eq', NOW, 'ra', ra, 'att', 0,
               'csk', '0', 'to', to, 'st', 'queued', 'mem', m)
  else
    redis.call('HSET', jk(id), 'tn', ARGV[b + 2], 'q', q, 'pl', ARGV[b + 4], 'pr', pr,
               'ma', ARGV[b + 8], 'ld', ARGV[b + 9], 'eq', NOW, 'ra', ra, 'att', 0,
               'csk', '0', 'st', 'queued', 'mem', m)
  end
  all[#all + 1] = seq; all[#all + 1] = id
  local rkey = rk(q, pr)
  local zs = ready[rkey]
  if not zs then zs = {}; ready[rkey] = zs end
  zs[#zs + 1] = ra; zs[#zs + 1] = m
  -- #include _enqueue_queued
end
call_chunked('ZADD', ALL, all)
for rkey, zs in pairs(ready) do call_chunked('ZADD', rkey, zs) end
-- #include _enqueue_flush
return n
