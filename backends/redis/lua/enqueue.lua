-- enqueue: store new jobs (queued, or skipped by a `skip` concurrency limit).
-- KEYS: none (derived from the prefix, see _lib.lua)
-- Shares its duplicate check and once-per-batch writes with enqueue_plain.lua
-- (the `-- #include` lines, expanded at load time).
-- ARGV: prefix, now, retention, then 25 per job: id, task_name, queue, payload,
--       priority, run_at ('' = now), delay_ms, max_attempts, lost_delay_ms,
--       timeout_ms, heartbeat_ms, schedule_to_start_ms, concurrency_key,
--       concurrency_limit, concurrency_skip ('1'/'0'), options, replay_of, unique_key,
--       unique_for_ms, rate_key, rate_limit, rate_window_ms, debounce_key, debounce_ms,
--       debounce_max_ms, concurrency_behavior, concurrency_group ('' = None for every
--       optional field)
-- Returns: a table of 1 (queued) / 0 (skipped) / {holder id, holder state} (a unique key
--          held, or a debounced call merged into its key's queued holder: nothing
--          stored) / {1, superseded id...} (queued, having ended those jobs of its key)
--          per job, in order; or {'dup', id} when a job id already exists (then nothing
--          is stored)
-- Unique keys: P:u:<key> is a hash {id, eq, uf} naming the last job stored with the key;
-- it holds the key while queued/running or until eq + uf (queue_core.rules.limits.
-- unique_holds, mirrored here so the check and the store are one atomic step).
-- Debounce keys: P:db:<key> names the key's holder, the last job stored with it
-- (SupportsDebounce, backends/redis/enqueue.py). A call whose holder is still queued is
-- merged into it: the holder takes the call's payload and is ready at
-- queue_core.rules.control.debounce_ready_at (mirrored: min(now + debounce, the burst's
-- first call -- the holder's enqueue -- + debounce_max)), keeping its member, so its
-- place among equal ready times, wherever it waits (its ready set, a concurrency key's
-- P:cw:<key>; a paused task's P:held zset takes the ready time from the hash at resume).
-- Claims run as scripts too, so a call and a claim of the holder are ordered.
-- Superseding keys (behaviour cancel_in_progress or latest, SupportsSupersede): P:sup:<key>
-- is a zset of the key's jobs that may be active (score = enqueue sequence; entries of
-- jobs no longer queued or running are dropped when met, and by prune). A new job ends
-- the ones queue_core.rules.control.supersede names (mirrored), as superseded_end says
-- (mirrored: cancelled, a running one's attempt too, or skipped; reason superseded),
-- before it is stored: the lookup, the ends and the store are one step.
-- Cost per queued job: one HSET with every field, one INCR of the sequence (shared by
-- the job index and the ready-set member), the ZADDs of its indexes; the queue's count,
-- priority index entry and wake-up token are written once per batch.
local S = 27
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
local function debounce_merge(dk, pl, dms, dmax)
  local hid = redis.call('GET', P .. ':db:' .. dk)
  if not hid then return nil end
  local f = redis.call('HMGET', jk(hid), 'st', 'eq', 'q', 'pr', 'mem', 'ss', 'ck')
  if f[1] ~= 'queued' then return nil end
  local ra = NOW + (dms or 0)
  if dmax then ra = math.min(ra, tonumber(f[2]) + dmax) end
  redis.call('HSET', jk(hid), 'pl', pl, 'ra', ra)
  redis.call('ZADD', rk(f[3], f[4]), 'XX', ra, f[5])
  if f[7] then redis.call('ZADD', P .. ':cw:' .. f[7], 'XX', ra, f[5]) end
  -- P:sts by queue_core.rules.leases.queued_expiry (mirrored: ready time + bound)
  if f[6] then redis.call('ZADD', STS, ra + tonumber(f[6]), hid) end
  if ra <= NOW then wake(f[3]) end
  return {hid, 'queued'}
end
-- the ids of the jobs of superseding key ck a new job of `behavior` ends: mirrors
-- queue_core.rules.control.supersede over the key's queued and running jobs, oldest first
local function supersede_victims(ck, behavior, limit)
  local z, active = P .. ':sup:' .. ck, {}
  for _, id in ipairs(redis.call('ZRANGE', z, 0, -1)) do
    local st = redis.call('HGET', jk(id), 'st')
    if st == 'queued' or st == 'running' then
      active[#active + 1] = {id, st}
    else
      redis.call('ZREM', z, id)
    end
  end
  local out = {}
  for i, a in ipairs(active) do
    if behavior == 'cancel_in_progress' then
      if i <= #active - limit + 1 then out[#out + 1] = a[1] end
    elseif a[2] == 'queued' then  -- latest
      out[#out + 1] = a[1]
    end
  end
  return out
end
-- end a superseded job as queue_core.rules.control.superseded_end says (mirrored): a
-- running one's attempt ends cancelled at once, its lease and slot released (its
-- worker's finish is refused, renew reports it lost), as a flow's EndJob does
local function supersede_end(id, behavior)
  local state = behavior == 'latest' and 'skipped' or 'cancelled'
  local f = redis.call('HMGET', jk(id), 'st', 'att', 'q', 'ck', 'wid', 'sa', 'pr', 'mem')
  local q, ck = f[3], nz(f[4])
  if f[1] == 'running' then
    record_attempt(id, f[2], f[5], f[6], '["cancelled","superseded",null,null,null,null,null]')
    leave_running(id, q, ck)
    terminal(id, q, state, 'superseded', ck, true)
  else
    unready(id, q, f[7], f[8], ck)
    count(q, 'queued', -1)
    terminal(id, q, state, 'superseded', ck)
  end
  redis.call('ZREM', P .. ':sup:' .. ck, id)
end
for i = 0, n - 1 do
  local b = 3 + i * S
  local id, tn, q, pl, pr = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local k = jk(id)
  local uk, held = nz(ARGV[b + 18]), nil
  if uk then held = unique_holder(uk) end
  local dk = nz(ARGV[b + 23])
  if dk and not held then
    held = debounce_merge(dk, pl, tonumber(ARGV[b + 24]), tonumber(ARGV[b + 25]))
  end
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
  local cb = nz(ARGV[b + 26])
  local sup = ck and (cb == 'cancel_in_progress' or cb == 'latest')
  local ended = nil
  if sup then
    ended = supersede_victims(ck, cb, tonumber(cl or '1'))
    for _, v in ipairs(ended) do supersede_end(v, cb) end
  end
  local h = {'tn', tn, 'q', q, 'pl', pl, 'pr', pr, 'ma', ARGV[b + 8], 'ld', ARGV[b + 9],
             'eq', NOW, 'ra', ra, 'att', 0, 'csk', ARGV[b + 15]}
  for j = 1, 5 do
    local v = ARGV[b + 9 + j]
    if v ~= '' then h[#h + 1] = OPT[j]; h[#h + 1] = v end
  end
  if ARGV[b + 16] ~= '' then h[#h + 1] = 'op'; h[#h + 1] = ARGV[b + 16] end
  if ARGV[b + 17] ~= '' then h[#h + 1] = 'ro'; h[#h + 1] = ARGV[b + 17] end
  if uk then h[#h + 1] = 'uk'; h[#h + 1] = uk end
  if dk then
    h[#h + 1] = 'dk'; h[#h + 1] = dk
    redis.call('SET', P .. ':db:' .. dk, id)
  end
  if cb then h[#h + 1] = 'cb'; h[#h + 1] = cb end
  local cg = nz(ARGV[b + 27])
  if cg then h[#h + 1] = 'cg'; h[#h + 1] = cg end
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
    -- P:sts by queue_core.rules.leases.queued_expiry (mirrored: ready time + bound)
    if ss then redis.call('ZADD', STS, ra + tonumber(ss), id) end
    -- #include _enqueue_queued
    if cb == 'round_robin' and ck then  -- into its group's key index (_rr.lua)
      local base = ':' .. q .. ':' .. (cg or tn)
      redis.call('ZADD', P .. ':rrj' .. base .. ':' .. ck, ra, m)
      redis.call('ZADD', P .. ':rrt' .. base, 'NX', 0, ck)
      redis.call('SADD', P .. ':rrq:' .. (cg or tn), q)
    end
    if sup then
      redis.call('ZADD', P .. ':sup:' .. ck, seq, id)
      table.insert(ended, 1, 1)
      out[#out + 1] = ended
    else
      out[#out + 1] = 1
    end
  end
  end
end
-- #include _enqueue_flush
return out
