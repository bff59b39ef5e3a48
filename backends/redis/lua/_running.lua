-- A running attempt's score in P:run, and a flow step's state (_lib.lua and _claim.lua).

-- mirrors queue_core.rules.leases.REAP_MARGIN_MS: the reaper judges a deadline or a
-- heartbeat bound passed this long after it (a live worker records it first)
local REAP_MARGIN = 1000

-- The score is queue_core.rules.leases.reap_due: the first instant expired_bound names a
-- bound, the earliest of lease expiry, deadline + REAP_MARGIN and heartbeat deadline +
-- REAP_MARGIN; reap.lua judges which.
local function run_score(le, dl, hd)
  local s = le
  if dl and dl + REAP_MARGIN < s then s = dl + REAP_MARGIN end
  if hd and hd + REAP_MARGIN < s then s = hd + REAP_MARGIN end
  return s
end

-- flows: step idx of execution x takes state with reason; keeps the execution's counts of
-- steps by state (P:x:<x> fields c.<state>) equal to P:xs:<x> (the counts plan.step_end
-- reads). A queued or running step's job was released; any other keeps the flag it had,
-- and so does a workflow's step standing for a sub-execution (flag '2': it has no job).
local function xs_set(x, idx, state, reason)
  local xs = P .. ':xs:' .. x
  local xh = P .. ':x:' .. x
  local old = redis.call('HGET', xs, idx)
  local released = '1'
  local was = old and string.match(old, '^[^|]*|([^|]*)') or '0'
  if was == '2' or (state ~= 'queued' and state ~= 'running') then released = was end
  redis.call('HSET', xs, idx, state .. '|' .. released .. '|' .. reason)
  if old then redis.call('HINCRBY', xh, 'c.' .. string.match(old, '^[^|]*'), -1) end
  redis.call('HINCRBY', xh, 'c.' .. state, 1)
end
