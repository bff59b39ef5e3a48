-- A running attempt's score in P:run, and a flow step's state (_lib.lua and _claim.lua).
local function run_score(le, dl, hd)
  local s = le
  if dl and dl < s then s = dl end
  if hd and hd < s then s = hd end
  return s
end

-- flows: set step idx of execution x to "state|released|reason" and keep the execution's
-- counters of steps by state (P:x:<x> fields c.<state>) equal to P:xs:<x>, so the fast
-- advance (decide_fast) reads counts instead of every step.
local function xs_set(x, idx, val)
  local xs = P .. ':xs:' .. x
  local xh = P .. ':x:' .. x
  local old = redis.call('HGET', xs, idx)
  redis.call('HSET', xs, idx, val)
  if old then redis.call('HINCRBY', xh, 'c.' .. string.match(old, '^[^|]*'), -1) end
  redis.call('HINCRBY', xh, 'c.' .. string.match(val, '^[^|]*'), 1)
end
