-- round_robin groups (SupportsRoundRobin, backends/redis/roundrobin.py). Per queue q and
-- group g: P:rrt:<q>:<g> a zset of the group's keys scored by their served mark (the
-- group's claim counter P:rrc:<q>:<g> when the key was last served; 0 = never), so the
-- next turn is read from its low end; P:rrj:<q>:<g>:<key> a zset of each key's ready-set
-- members (score = ready time; an entry whose job is no longer queued with that member
-- is dropped when met; a key with none left is forgotten, its mark with it); P:rrq:<g>
-- the queues of group g. enqueue.lua indexes a new job, _flow.lua's release a
-- round_robin flow's step job, _lib.lua's to_queued a retried one (its new member),
-- retry_dead.lua a replayed one, claim.lua any group job it meets that is missing.
-- Included by claim.lua and rr_keys.lua (two closures per claim: rr_head, rr_before).

-- key's best claimable job in queue q: {key, served, member, ready time, priority}, or
-- nil (none ready, or the key at its limit); second value true when the key has no
-- queued job left (the caller forgets it). The index is in ready order, so its first
-- entry still queued in its ready set is the key's next job.
local function rr_head(q, base, key)
  local z = P .. ':rrj' .. base .. ':' .. key
  for _, mm in ipairs(redis.call('ZRANGE', z, 0, 15)) do
    local f = redis.call('HMGET', jk(string.sub(mm, 17)), 'st', 'mem', 'pr', 'ra', 'cl')
    if f[1] ~= 'queued' or f[2] ~= mm then
      redis.call('ZREM', z, mm)
    elseif tonumber(f[4]) > NOW then
      return nil, false
    elseif redis.call('ZSCORE', rk(q, f[3]), mm) then
      if f[5] and tonumber(redis.call('GET', P .. ':cr:' .. key) or '0') >= tonumber(f[5]) then
        return nil, false
      end
      return {key, 0, mm, tonumber(f[4]), tonumber(f[3])}, false
    end
  end
  return nil, redis.call('EXISTS', z) == 0
end

-- turns in the order of queue_core.rules.control.round_robin_order (mirrored): least
-- recently served first, never served first of all, ties by the best job's claim order
-- (priority, ready time, enqueue sequence), then the key
local function rr_before(a, b)
  if a[2] ~= b[2] then return a[2] < b[2] end
  if a[5] ~= b[5] then return a[5] > b[5] end
  if a[4] ~= b[4] then return a[4] < b[4] end
  if a[3] ~= b[3] then return a[3] < b[3] end
  return a[1] < b[1]
end
