-- rr_keys: the keys of round_robin group g with a claimable job, in the order the next
-- claims serve them (SupportsRoundRobin.round_robin_keys): rr_turns of each queue of the
-- group (a key in several queues counts once, at its best turn).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, group
-- Returns: the keys, in turn order
-- #include _rr

-- every turn of group g in queue q with a claimable job, in turn order (rr_keys.lua)
local function rr_turns(q, g)
  local base = ':' .. q .. ':' .. g
  local out = {}
  local marks = redis.call('ZRANGE', P .. ':rrt' .. base, 0, -1, 'WITHSCORES')
  for i = 1, #marks, 2 do
    local t = rr_head(q, base, marks[i])
    if t then
      t[2] = tonumber(marks[i + 1])
      out[#out + 1] = t
    end
  end
  table.sort(out, rr_before)
  return out
end

local g = ARGV[4]
local all, seen = {}, {}
for _, q in ipairs(redis.call('SMEMBERS', P .. ':rrq:' .. g)) do
  for _, t in ipairs(rr_turns(q, g)) do
    local was = seen[t[1]]
    if not was or t[2] < was[2] or (t[2] == was[2] and t[4] < was[4]) then seen[t[1]] = t end
  end
end
for _, t in pairs(seen) do all[#all + 1] = t end
table.sort(all, rr_before)
local out = {}
for i, t in ipairs(all) do out[i] = t[1] end
return out
