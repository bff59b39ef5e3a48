-- start_refs(first, last): the bodies of attempts held ahead of free slots started (the
-- refs in ARGV, 4 each from ARGV[first + 1]: job_id, attempt, lease_token, ago; `last`
-- is the index before the last ref's first value), each ago ms before NOW
-- (SupportsPrefetch.start_claimed; start.lua, and finish.lua for start_and_finish):
-- fenced per ref, the attempt's start becomes NOW - ago and its deadline and heartbeat
-- bound count from it (as claim.lua counts them for a claim). Returns a table per ref:
-- 1 started, 0 not current (left as it is).
local function start_refs(first, last)
  local out = {}
  for b = first, last, 4 do
    local id = ARGV[b + 1]
    local k = jk(id)
    local f = redis.call('HMGET', k, 'st', 'att', 'tok', 'le', 'to', 'hb')
    if f[1] ~= 'running' or f[2] ~= ARGV[b + 2] or f[3] ~= ARGV[b + 3] then
      out[#out + 1] = 0
    else
      local s = NOW - tonumber(ARGV[b + 4])
      local dl = f[5] and (s + tonumber(f[5]))
      local hd = f[6] and (s + tonumber(f[6]))
      local h = {'sa', s}
      if dl then h[#h + 1] = 'dl'; h[#h + 1] = dl end
      if hd then h[#h + 1] = 'hd'; h[#h + 1] = hd end
      redis.call('HSET', k, unpack(h))
      redis.call('HDEL', k, 'ah')
      zop('ZADD', RUN, run_score(tonumber(f[4]), dl, hd), id)
      out[#out + 1] = 1
    end
  end
  return out
end
