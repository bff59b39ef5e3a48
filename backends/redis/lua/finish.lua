-- finish: record attempt ends and apply the core's decisions (fenced per end).
-- The state and job reason of each decision are computed in Python by
-- queue_core.rules.outcomes.end_state; this script only applies them.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, the number of starts, then 4 per start (job_id, attempt,
--       lease_token, ago: the bodies of held attempts that started, stored first, as
--       start.lua stores them; SupportsStartWithFinish.start_and_finish), the number of
--       executions to read steps of ahead, then 3 per execution (id, P:xs fields, P:xu
--       fields: comma-separated step indexes; backends/redis/fold_reads.py), then 14 per
--       end: job_id, attempt, lease_token,
--       end state ('succeeded', 'queued' = retry, 'dead', 'cancelled', 'timed_out'),
--       delay_ms, lost_delay_ms ('' = keep), job reason ('' = none),
--       has_result ('1'/'0'), result, attempt info (JSON array: outcome, reason,
--       error_class, error_type, message, traceback, mode), error message, error
--       class ('' = no error), refund ('1': the attempt spent none of the retry budget,
--       Decision.spends_attempt false: max_attempts 'ma' grows by one; '0' otherwise),
--       progress ('' = none; else the end's report as progress.lua stores it: 'pg',
--       with 'pa' = now, only when the end takes)
-- Returns: a table of 1 (took) / 0 (not current: nothing recorded) per end; for a step
--          job that took, its execution id instead of 1 (the caller advances it), and
--          for the first of each execution {id, head, events, now[, xs, xu]}: the
--          advance's first read (RedisFlows._fast), taken once every end of this call is
--          recorded, the time the ends were recorded at (the advance's), and the step
--          fields asked ahead for it, so that the advance starts without a round trip of
--          its own
defer_counts()
local S = 14
local NS = tonumber(ARGV[4])
-- #include _start_refs
if NS > 0 then start_refs(4, 3 + 4 * NS) end
local R = 5 + 4 * NS -- the number of executions to read steps of ahead
local NR = tonumber(ARGV[R])
local reads = {}
for r = R + 1, R + 3 * NR, 3 do reads[ARGV[r]] = {ARGV[r + 1], ARGV[r + 2]} end
local out = {}
local steps = false -- a step job's end took: its execution's head goes back too
for b = R + 3 * NR, #ARGV - 1, S do
  local id = ARGV[b + 1]
  local k = jk(id)
  local f = redis.call('HMGET', k, 'st', 'att', 'tok', 'q', 'ck', 'wid', 'sa', 'pr', 'ss', 'x',
    'la', 'lw')
  if f[1] ~= 'running' or f[2] ~= ARGV[b + 2] or f[3] ~= ARGV[b + 3] then
    out[#out + 1] = 0
  else
    local q, ck, act = f[4], f[5], ARGV[b + 4]
    record_attempt(id, f[2], f[6], f[7], ARGV[b + 10], {f[11], f[12]})
    leave_running(id, q, ck)
    if ARGV[b + 13] == '1' then redis.call('HINCRBY', k, 'ma', 1) end
    if ARGV[b + 14] ~= '' then redis.call('HSET', k, 'pg', ARGV[b + 14], 'pa', NOW) end
    if act == 'succeeded' then
      terminal(id, q, act, nil, ck, true, ARGV[b + 8] == '1' and ARGV[b + 9] or nil)
    elseif act == 'queued' then
      -- 'lc': the lost delay a reap of the next attempt applies; 'ld' stays as enqueued
      -- (the dead-letter entry carries the spec as enqueued)
      if ARGV[b + 6] ~= '' then redis.call('HSET', k, 'lc', ARGV[b + 6]) end
      to_queued(id, q, f[8], NOW + tonumber(ARGV[b + 5]), f[9])
    elseif act == 'dead' then
      redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd')
      dead_letter(id, ARGV[b + 7], nz(ARGV[b + 12]) and ARGV[b + 11], nz(ARGV[b + 12]))
    else
      terminal(id, q, act, nz(ARGV[b + 7]), ck, true)
    end
    local x = f[10]
    if x then
      if act == 'succeeded' and ARGV[b + 8] == '1' then
        redis.call('HSET', P .. ':xo:' .. x, redis.call('HGET', k, 'xi'), ARGV[b + 9])
      end
      out[#out + 1] = flow_event(id, x, f[2])
      steps = true
    else
      out[#out + 1] = 1
    end
  end
end
flush_counts()
if not steps then return out end -- plain jobs only: nothing more to build
-- the fields of backends/redis/flows.py _FAST_FIELDS, in its order (a test compares them)
local HEAD = {'fl', 'sh', 'st', 'rs', 'fs', 'mp', 'to', 'dl', 'ca', 'sa', 'fa', 'ck', 'cl',
  'cb', 'v', 'c.pending', 'c.queued', 'c.running', 'c.succeeded', 'c.dead', 'c.cancelled',
  'c.skipped', 'c.timed_out', 'c.not_run', 'k', 'aw', 'pi', 'px'}
local seen = {}
for i = 1, #out do
  local x = out[i]
  if type(x) == 'string' and not seen[x] then
    seen[x] = true
    out[i] = {x, redis.call('HMGET', P .. ':x:' .. x, unpack(HEAD)),
      redis.call('LRANGE', P .. ':xe:' .. x, 0, -1), NOW}
    local rd = reads[x]
    if rd then
      for j = 1, 2 do
        local fields = {}
        for v in string.gmatch(rd[j], '[^,]+') do fields[#fields + 1] = v end
        out[i][4 + j] = #fields > 0 and
          redis.call('HMGET', P .. (j == 1 and ':xs:' or ':xu:') .. x, unpack(fields)) or {}
      end
    end
  end
end
return out
