-- enqueue: store new jobs (queued, or skipped by a `skip` concurrency limit).
-- KEYS: none (derived from the prefix, see _lib.lua)
-- ARGV: prefix, now, retention, then 17 per job: id, task_name, queue, payload,
--       priority, run_at ('' = now), delay_ms, max_attempts, lost_delay_ms,
--       timeout_ms, heartbeat_ms, schedule_to_start_ms, concurrency_key,
--       concurrency_limit, concurrency_skip ('1'/'0'), options, replay_of
--       ('' = None for every optional field)
-- Returns: a table of 1 (queued) / 0 (skipped) per job, in order; or
--          {'dup', id} when a job id already exists (then nothing is stored)
local S = 17
local n = (#ARGV - 3) / S
local seen = {}
for i = 0, n - 1 do
  local id = ARGV[4 + i * S]
  if seen[id] or redis.call('EXISTS', jk(id)) == 1 then return {'dup', id} end
  seen[id] = true
end
local out = {}
for i = 0, n - 1 do
  local b = 3 + i * S
  local id, tn, q, pl, pr = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local ra = NOW
  if ARGV[b + 6] ~= '' then ra = tonumber(ARGV[b + 6]) end
  ra = ra + tonumber(ARGV[b + 7])
  local ss, ck, cl = nz(ARGV[b + 12]), nz(ARGV[b + 13]), nz(ARGV[b + 14])
  local skip = ARGV[b + 15] == '1'
  local h = {'tn', tn, 'q', q, 'pl', pl, 'pr', pr, 'ma', ARGV[b + 8], 'ld', ARGV[b + 9],
             'eq', NOW, 'ra', ra, 'att', 0, 'csk', ARGV[b + 15]}
  local opt = {'to', 'hb', 'ss', 'ck', 'cl'}
  for j = 1, 5 do
    local v = ARGV[b + 9 + j]
    if v ~= '' then h[#h + 1] = opt[j]; h[#h + 1] = v end
  end
  if ARGV[b + 16] ~= '' then h[#h + 1] = 'op'; h[#h + 1] = ARGV[b + 16] end
  if ARGV[b + 17] ~= '' then h[#h + 1] = 'ro'; h[#h + 1] = ARGV[b + 17] end
  local active_key = ck and (P .. ':ca:' .. ck)
  if RET ~= 0 then index_job(id) end
  if skip and ck and cl and tonumber(redis.call('GET', active_key) or '0') >= tonumber(cl) then
    if RET ~= 0 then
      h[#h + 1] = 'st'; h[#h + 1] = 'skipped'
      redis.call('HSET', jk(id), unpack(h))
    end
    -- not active: terminal() must not give back a slot it never took
    terminal(id, q, 'skipped', 'concurrency_limit', nil)
    out[#out + 1] = 0
  else
    h[#h + 1] = 'st'; h[#h + 1] = 'queued'
    redis.call('HSET', jk(id), unpack(h))
    if RET == 0 then index_job(id) end
    if ck then redis.call('INCR', active_key) end
    count(q, 'queued', 1)
    make_ready(id, q, pr, ra, ss)
    out[#out + 1] = 1
  end
end
return out
