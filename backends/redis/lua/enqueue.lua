-- enqueue: store new jobs (queued, or skipped by a `skip` concurrency limit).
-- KEYS: none (derived from the prefix, see _lib.lua)
-- Shares its duplicate check and once-per-batch writes with enqueue_plain.lua
-- (the `-- #include` lines, expanded at load time).
-- ARGV: prefix, now, retention, then 17 per job: id, task_name, queue, payload,
--       priority, run_at ('' = now), delay_ms, max_attempts, lost_delay_ms,
--       timeout_ms, heartbeat_ms, schedule_to_start_ms, concurrency_key,
--       concurrency_limit, concurrency_skip ('1'/'0'), options, replay_of, unique_key,
--       unique_for_ms, rate_key, rate_limit, rate_window_ms
--       ('' = None for every optional field)
-- Returns: a table of 1 (queued) / 0 (skipped) / {holder id, holder state} (a unique key
--          held: nothing stored) per job, in order; or {'dup', id} when a job id already
--          exists (then nothing is stored)
-- Unique keys: P:u:<key> is a hash {id, eq, uf} naming the last job stored with the key;
-- it holds the key while queued/running or until eq + uf (queue_core.policy.limits.
-- unique_holds, mirrored here so the check and the store are one atomic step).
-- Cost per queued job: one HSET with every field, one INCR of the sequence (shared by
-- the job index and the ready-set member), the ZADDs of its indexes; the queue's count,
-- priority index entry and wake-up token are written once per batch.
local S = 22
local n = (#ARGV - 3) / S
-- #include _enqueue_dup
local SEQ = P .. ':seq'
local OPT = {'to', 'hb', 'ss', 'ck', 'cl'}
local out = {}
local queued, prios, woken = {}, {}, {}
local function unique_holder(uk)
  local id, eq, uf = unpack(redis.call('HMGET', P .. ':u:' .. uk, 'id', 'eq', 'uf'))
  if not id then return nil end
  local st = redis.call('HGET', jk(id), 'st') or 'succeeded'  -- pruned: it had finished
  if st == 'queued' or st == 'running' then return {id, st} end
  if uf and NOW < tonumber(eq) + tonumber(uf) then return {id, st} end
  return nil
end
for i = 0, n - 1 do
  local b = 3 + i * S
  local id, tn, q, pl, pr = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local k = jk(id)
  local uk, held = nz(ARGV[b + 18]), nil
  if uk then held = unique_holder(uk) end
  if held then
    out[#out + 1] = held
  else
  if uk then
    local u = {'id', id, 'eq', NOW}
    if ARGV[b + 19] ~= '' then u[5] = 'uf'; u[6] = ARGV[b + 19] end
    redis.call('DEL', P .. ':u:' .. uk)
    redis.call('HSET', P .. ':u:' .. uk, unpack(u))
  end
  local ra = NOW
  if ARGV[b + 6] ~= '' then ra = tonumber(ARGV[b + 6]) end
  ra = ra + tonumber(ARGV[b + 7])
  local ss, ck, cl = nz(ARGV[b + 12]), nz(ARGV[b + 13]), nz(ARGV[b + 14])
  local skip = ARGV[b + 15] == '1'
  local h = {'tn', tn, 'q', q, 'pl', pl, 'pr', pr, 'ma', ARGV[b + 8], 'ld', ARGV[b + 9],
             'eq', NOW, 'ra', ra, 'att', 0, 'csk', ARGV[b + 15]}
  for j = 1, 5 do
    local v = ARGV[b + 9 + j]
    if v ~= '' then h[#h + 1] = OPT[j]; h[#h + 1] = v end
  end
  if ARGV[b + 16] ~= '' then h[#h + 1] = 'op'; h[#h + 1] = ARGV[b + 16] end
  if ARGV[b + 17] ~= '' then h[#h + 1] = 'ro'; h[#h + 1] = ARGV[b + 17] end
  if uk then h[#h + 1] = 'uk'; h[#h + 1] = uk end
  if ARGV[b + 20] ~= '' then
    h[#h + 1] = 'rk'; h[#h + 1] = ARGV[b + 20]
    h[#h + 1] = 'rl'; h[#h + 1] = ARGV[b + 21]
    h[#h + 1] = 'rw'; h[#h + 1] = ARGV[b + 22]
  end
  local active_key = ck and (P .. ':ca:' .. ck)
  if skip and ck and cl and tonumber(redis.call('GET', active_key) or '0') >= tonumber(cl) then
    index_job(id)
    h[#h + 1] = 'st'; h[#h + 1] = 'skipped'
    redis.call('HSET', k, unpack(h))
    -- not active: terminal() must not give back a slot it never took
    terminal(id, q, 'skipped', 'concurrency_limit', nil)
    tp_add(q, 'enqueued', 1)
    out[#out + 1] = 0
  else
    local seq = redis.call('INCR', SEQ)
    local m = string.format('%016x', seq) .. id
    h[#h + 1] = 'st'; h[#h + 1] = 'queued'
    h[#h + 1] = 'mem'; h[#h + 1] = m
    redis.call('HSET', k, unpack(h))
    redis.call('ZADD', ALL, seq, id)
    if ck then redis.call('INCR', active_key) end
    redis.call('ZADD', rk(q, pr), ra, m)
    if ss then redis.call('ZADD', STS, ra + tonumber(ss), id) end
    -- #include _enqueue_queued
    out[#out + 1] = 1
  end
  end
end
-- #include _enqueue_flush
return out
