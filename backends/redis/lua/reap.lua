-- reap: handle up to `limit` running attempts past a bound and queued jobs past their
-- schedule-to-start deadline. P:run is scored by the earliest of lease expiry,
-- deadline + REAP_MARGIN and heartbeat deadline + REAP_MARGIN (run_score); P:sts by
-- queue_core.rules.leases.queued_expiry
-- (ready time + schedule_to_start_ms, written where a job becomes ready).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, limit, flows_first_done ('1': the caller has already
--       advanced the flow executions past their deadline), limit of executions to advance
-- Returns: {'x', now, execution ids} when flow executions are past their deadline and
--          flows_first_done is not '1' (nothing else done: the caller times them out,
--          so their running steps end flow_timeout rather than lost, then calls again);
--          else {jobs, now, executions with pending events, concurrency keys to
--          promote}, jobs a flat list, 5 per job: job_id, attempt (0 = none ran),
--          outcome|nil, reason, state after the reap. A step job's change is recorded
--          as a pending event of its execution (flow_event), which the caller advances.
-- What happens to a running attempt mirrors queue_core.rules.outcomes.reap_verdict
-- (which bound wins: queue_core.rules.leases.expired_bound); the contract suite pins
-- every case, so keep the two in step.
-- a reaped job queued again (below): ready at ra, keeping its ready-set member m (its
-- enqueue order) and its place in line `place` (<= ra, queue_core.rules.outcomes.
-- reap_place_at, kept in 'po' for a later reap). Ready now: into its ready set scored by
-- its place; else into P:bo:<queue> until ra (claim.lua moves it over, next_ready.lua,
-- peek.lua, count_pending.lua and stats.lua read it). A round_robin job's key index gets
-- its ready time (a turn never takes it early; within its key it goes by ready time).
local function requeue_in_place(id, q, pr, ra, place, ss, m)
  local k = jk(id)
  redis.call('HSET', k, 'st', 'queued', 'mem', m, 'ra', ra, 'po', place)
  redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd', 'rs')
  count(q, 'queued', 1)
  -- P:sts by queue_core.rules.leases.queued_expiry (mirrored: ready time + bound)
  if ss then redis.call('ZADD', STS, ra + tonumber(ss), id) end
  if ra <= NOW then
    redis.call('ZADD', rk(q, pr), place, m)
    redis.call('ZADD', pk(q), pr, pr)
    wake(q)
  else
    redis.call('ZADD', bk(q), ra, m)
  end
  index_round_robin(k, q, ra, m)
end

-- mirrors queue_core.rules.outcomes.MAX_HELD_REFUNDS (tests/backends/redis checks the two)
local MAX_HELD_REFUNDS = 2
local limit, xlimit = tonumber(ARGV[4]), tonumber(ARGV[6])
if ARGV[5] ~= '1' then
  -- an execution's deadline, like an attempt's, is judged REAP_MARGIN late
  -- (queue_core.rules.leases.reap_cutoff): the worker running a step records it first
  local due = redis.call('ZRANGEBYSCORE', P .. ':xdl', '-inf', NOW - REAP_MARGIN, 'LIMIT', 0,
                         xlimit)
  if #due > 0 then return {'x', NOW, due} end
end
-- the integer fields of a running job's HMGET below and those it needs (corrupt_fields)
local REAP_INTS = {{2, 'att'}, {3, 'le'}, {4, 'dl'}, {5, 'hd'}, {7, 'ma'}, {8, 'ld'}, {12, 'sa'},
                   {13, 'pr'}, {14, 'ss'}, {15, 'lc'}, {17, 'ra'}, {19, 'po'}}
local REAP_NEEDED = {{2, 'att'}, {7, 'ma'}, {8, 'ld'}, {9, 'q'}, {13, 'pr'}}
local out, n = {}, 0
local stale = {}
if limit > 0 then stale = redis.call('ZRANGEBYSCORE', RUN, '-inf', NOW, 'LIMIT', 0, limit) end
for _, id in ipairs(stale) do
  local k = jk(id)
  local f = redis.call('HMGET', k, 'st', 'att', 'le', 'dl', 'hd', 'cr', 'ma', 'ld', 'q', 'ck',
                       'wid', 'sa', 'pr', 'ss', 'lc', 'x', 'ra', 'mem', 'po', 'ah',
                       'ahr')
  local bad = f[1] == 'running' and corrupt_fields(f, REAP_INTS, REAP_NEEDED) or {}
  if f[1] ~= 'running' then
    redis.call('ZREM', RUN, id)
  elseif #bad > 0 then
    -- a corrupt record is dead-lettered alone (corrupt_record): the reaper never loops on it
    local q = f[9] or ''
    leave_running(id, q, f[10])
    dead_corrupt(id, q, bad, f[2], f[11] or nil, f[12], 'lost')
    local att = tonumber(f[2]) or 0
    if f[16] then flow_event(id, f[16], att) end
    n = n + 1
    local o = #out
    out[o + 1] = id; out[o + 2] = att; out[o + 3] = 'lost'; out[o + 4] = 'corrupt_record'
    out[o + 5] = 'dead'
  else
    local dl, hd, le = tonumber(f[4]), tonumber(f[5]), tonumber(f[3])
    -- mirrors queue_core.rules.leases.expired_bound (timeout > heartbeat > lease, the
    -- two deadlines REAP_MARGIN late) and queue_core.rules.outcomes.reap_outcome (lost
    -- for a lease, timed_out otherwise)
    local reason, outcome
    if dl and dl + REAP_MARGIN <= NOW then reason, outcome = 'timeout', 'timed_out'
    elseif hd and hd + REAP_MARGIN <= NOW then reason, outcome = 'heartbeat_timeout', 'timed_out'
    elseif not le or le <= NOW then reason, outcome = 'lease_expired', 'lost' end
    if not reason then
      -- scored before the margin existed: look again once a bound has passed
      redis.call('ZADD', RUN, run_score(le, dl, hd), id)
    else
      local att, q, ck = tonumber(f[2]), f[9], f[10]
      record_attempt(id, f[2], f[11], f[12],
        '["' .. outcome .. '","' .. reason .. '",null,null,null,null,null]')
      leave_running(id, q, ck)
      redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd', 'ah')
      -- mirrors queue_core.rules.outcomes.reap_verdict: a cancel request ends it
      -- cancelled; a held attempt (claimed ahead, 'ah' its number: its body never
      -- started) while the job had fewer than MAX_HELD_REFUNDS such refunds ('ahr'), or
      -- attempts left: queued at now + lost delay (a retry's 'lc', else the enqueued
      -- 'ld'; none for a held one, whose budget grows by one: refund); otherwise
      -- dead-lettered retries_exhausted
      local state
      local held = f[20] ~= false and f[20] == f[2] and (tonumber(f[21]) or 0) < MAX_HELD_REFUNDS
      if f[6] then
        state = 'cancelled'
        terminal(id, q, state, 'cancelled', ck)
      elseif held or att < tonumber(f[7]) then
        state = 'queued'
        if held then
          redis.call('HINCRBY', k, 'ma', 1)
          redis.call('HINCRBY', k, 'ahr', 1)
        end
        -- mirrors queue_core.rules.outcomes.reap_ready_at: lost delay 0 and no
        -- schedule-to-start bound keep the previous ready time; otherwise now + lost delay
        local ld, ra, po = tonumber(f[15] or f[8]), tonumber(f[17]), tonumber(f[19])
        if held then ld = 0 end
        local ready = NOW + ld
        if ld == 0 and ra and not f[14] then ready = math.min(ra, NOW) end
        if f[18] then
          -- mirrors queue_core.rules.outcomes.reap_place_at: the place it had (an earlier
          -- reap's 'po', else the claimed attempt's ready time), never after `ready`; the
          -- ready-set member (its enqueue order) is kept
          requeue_in_place(id, q, f[13], ready, math.min(po or ra or ready, ready), f[14], f[18])
        else
          to_queued(id, q, f[13], ready, f[14])
        end
      else
        state = 'dead'
        dead_letter(id, 'retries_exhausted', nil, nil)
      end
      if f[16] then flow_event(id, f[16], att) end
      n = n + 1
      local o = #out
      out[o + 1] = id; out[o + 2] = att; out[o + 3] = outcome; out[o + 4] = reason
      out[o + 5] = state
    end
  end
end
if n < limit then
  -- mirrors queue_core.rules.leases.schedule_to_start_expired: queued_expiry <= now
  local late = redis.call('ZRANGEBYSCORE', STS, '-inf', NOW, 'LIMIT', 0, limit - n)
  for _, id in ipairs(late) do
    local f = redis.call('HMGET', jk(id), 'st', 'q', 'pr', 'mem', 'ck', 'x', 'att')
    if f[1] == 'queued' then
      unready(id, f[2], f[3], f[4], f[5])
      count(f[2], 'queued', -1)
      dead_letter(id, 'schedule_to_start', nil, nil)
      if f[6] then flow_event(id, f[6], (tonumber(f[7]) or 0) + 1) end
      local o = #out
      out[o + 1] = id; out[o + 2] = 0; out[o + 3] = false; out[o + 4] = 'schedule_to_start'
      out[o + 5] = 'dead'
    else
      redis.call('ZREM', STS, id)
    end
  end
end
return {out, NOW, redis.call('SRANDMEMBER', P .. ':xadv', xlimit),
        redis.call('SRANDMEMBER', P .. ':xpk', xlimit)}
