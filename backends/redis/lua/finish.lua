-- finish: record attempt ends and apply the core's decisions (fenced per end).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, then 12 per end: job_id, attempt, lease_token,
--       action ('c' complete, 'r' retry, 'd' dead, 'x' cancel, 't' time out),
--       delay_ms, lost_delay_ms ('' = keep), job reason (dead / timed-out reason),
--       has_result ('1'/'0'), result, attempt info (JSON array: outcome, reason,
--       error_class, error_type, message, traceback, mode), error message, error
--       class ('' = no error)
-- Returns: a table of 1 (took) / 0 (not current: nothing recorded) per end
defer_counts()
local S = 12
local out = {}
for b = 3, #ARGV - 1, S do
  local id = ARGV[b + 1]
  local k = jk(id)
  local f = redis.call('HMGET', k, 'st', 'att', 'tok', 'q', 'ck', 'wid', 'sa', 'pr', 'ss')
  if f[1] ~= 'running' or f[2] ~= ARGV[b + 2] or f[3] ~= ARGV[b + 3] then
    out[#out + 1] = 0
  else
    local q, ck, act = f[4], f[5], ARGV[b + 4]
    record_attempt(id, f[2], f[6], f[7], ARGV[b + 10])
    leave_running(id, q, ck)
    if act == 'c' then
      terminal(id, q, 'succeeded', nil, ck, true, ARGV[b + 8] == '1' and ARGV[b + 9] or nil)
    elseif act == 'r' then
      if ARGV[b + 6] ~= '' then redis.call('HSET', k, 'ld', ARGV[b + 6]) end
      to_queued(id, q, f[8], NOW + tonumber(ARGV[b + 5]), f[9])
    elseif act == 'd' then
      redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd')
      dead_letter(id, ARGV[b + 7], nz(ARGV[b + 12]) and ARGV[b + 11], nz(ARGV[b + 12]))
    elseif act == 'x' then
      terminal(id, q, 'cancelled', 'cancelled', ck, true)
    else
      terminal(id, q, 'timed_out', nz(ARGV[b + 7]), ck, true)
    end
    out[#out + 1] = 1
  end
end
flush_counts()
return out
