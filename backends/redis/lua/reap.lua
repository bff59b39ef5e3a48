-- reap: handle up to `limit` running attempts past a bound and queued jobs past their
-- schedule-to-start deadline. P:run is scored by the earliest of lease expiry,
-- deadline and heartbeat deadline; P:sts by ready time + schedule_to_start_ms.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, limit
-- Returns: flat list, 5 per job: job_id, attempt (0 = none ran), outcome|nil, reason,
--          state after the reap. A step job's change is recorded as a pending event of
--          its execution (flow_event); the caller then advances P:xadv.
-- What happens to a running attempt mirrors queue_core.policy.outcomes.reap_verdict
-- (which bound wins: queue_core.policy.leases.expired_bound); the contract suite pins
-- every case, so keep the two in step.
local limit = tonumber(ARGV[4])
local out, n = {}, 0
local stale = redis.call('ZRANGEBYSCORE', RUN, '-inf', NOW, 'LIMIT', 0, limit)
for _, id in ipairs(stale) do
  local k = jk(id)
  local f = redis.call('HMGET', k, 'st', 'att', 'le', 'dl', 'hd', 'cr', 'ma', 'ld', 'q', 'ck',
                       'wid', 'sa', 'pr', 'ss', 'lc', 'x', 'ra', 'mem')
  if f[1] ~= 'running' then
    redis.call('ZREM', RUN, id)
  else
    local dl, hd = tonumber(f[4]), tonumber(f[5])
    -- mirrors queue_core.policy.leases.expired_bound (timeout > heartbeat > lease) and
    -- queue_core.policy.outcomes.reap_outcome (lost for a lease, timed_out otherwise)
    local reason, outcome
    if dl and dl <= NOW then reason, outcome = 'timeout', 'timed_out'
    elseif hd and hd <= NOW then reason, outcome = 'heartbeat_timeout', 'timed_out'
    else reason, outcome = 'lease_expired', 'lost' end
    local att, q, ck = tonumber(f[2]), f[9], f[10]
    record_attempt(id, f[2], f[11], f[12],
      '["' .. outcome .. '","' .. reason .. '",null,null,null,null,null]')
    leave_running(id, q, ck)
    redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd')
    -- mirrors queue_core.policy.outcomes.reap_verdict: a cancel request ends it
    -- cancelled; attempts left: queued at now + lost delay (a retry's 'lc', else the
    -- enqueued 'ld'); otherwise dead-lettered retries_exhausted
    local state
    if f[6] then
      state = 'cancelled'
      terminal(id, q, state, 'cancelled', ck)
    elseif att < tonumber(f[7]) then
      state = 'queued'
      -- mirrors queue_core.policy.outcomes.reap_ready_at: lost delay 0 and no
      -- schedule-to-start bound keep the previous ready time and ready-set member (the
      -- job's place in line); otherwise now + lost delay
      local ld, ra = tonumber(f[15] or f[8]), tonumber(f[17])
      if ld == 0 and ra and not f[14] then
        to_queued(id, q, f[13], math.min(ra, NOW), nil, f[18] or nil)
      else
        to_queued(id, q, f[13], NOW + ld, f[14])
      end
    else
      state = 'dead'
      dead_letter(id, 'retries_exhausted', nil, nil)
    end
    if f[16] then flow_event(id, f[16]) end
    n = n + 1
    local o = #out
    out[o + 1] = id; out[o + 2] = att; out[o + 3] = outcome; out[o + 4] = reason
    out[o + 5] = state
  end
end
if n < limit then
  local late = redis.call('ZRANGEBYSCORE', STS, '-inf', NOW, 'LIMIT', 0, limit - n)
  for _, id in ipairs(late) do
    local f = redis.call('HMGET', jk(id), 'st', 'q', 'pr', 'mem', 'ck', 'x')
    if f[1] == 'queued' then
      unready(id, f[2], f[3], f[4], f[5])
      count(f[2], 'queued', -1)
      dead_letter(id, 'schedule_to_start', nil, nil)
      if f[6] then flow_event(id, f[6]) end
      local o = #out
      out[o + 1] = id; out[o + 2] = 0; out[o + 3] = false; out[o + 4] = 'schedule_to_start'
      out[o + 5] = 'dead'
    else
      redis.call('ZREM', STS, id)
    end
  end
end
return out
