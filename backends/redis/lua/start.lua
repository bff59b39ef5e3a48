-- start: the bodies of attempts held ahead of free slots started, each ago ms before NOW
-- (SupportsPrefetch.start_claimed): fenced per ref, the attempt's start becomes NOW - ago
-- and its deadline and heartbeat bound count from it (as claim.lua counts them for a claim).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, then 4 per ref: job_id, attempt, lease_token, ago
-- Returns: a table per ref: 1 started, 0 not current (left as it is)
local out = {}
for b = 3, #ARGV - 1, 4 do
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
    zop('ZADD', RUN, run_score(tonumber(f[4]), dl, hd), id)
    out[#out + 1] = 1
  end
end
return out
