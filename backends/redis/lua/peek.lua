-- peek: the first `limit` ready members of the named queues, in claim order (read only).
-- On a Redis Cluster a claim across several homes (hash tags) asks each home first and
-- claims from each the share the merged order gives it (backends/redis/claiming.py).
-- KEYS: none (derived from the prefix, here a home's tag)
-- ARGV: prefix, now, retention, limit, queue...
-- Returns: flat list, 3 per member: priority, score (place in line), member; then, on a
--          Redis Cluster, the queues that also have jobs in the shared home
--          (_claim_pins.lua)
local QUEUES_FROM = 5
local limit = tonumber(ARGV[4])
local byprio, plist = {}, {}
for i = QUEUES_FROM, #ARGV do
  local q = ARGV[i]
  for _, p in ipairs(redis.call('ZRANGE', pk(q), 0, -1)) do
    local n = tonumber(p)
    if not byprio[n] then byprio[n] = {}; plist[#plist + 1] = n end
    table.insert(byprio[n], {q, p})
  end
end
table.sort(plist, function(a, b) return a > b end)
local out, got = {}, 0
for _, p in ipairs(plist) do
  if got >= limit then break end
  local cands = {}
  for _, s in ipairs(byprio[p]) do
    local r = redis.call('ZRANGEBYSCORE', rk(s[1], s[2]), '-inf', NOW, 'WITHSCORES', 'LIMIT', 0,
                         limit - got)
    for j = 1, #r, 2 do cands[#cands + 1] = {tonumber(r[j + 1]), r[j]} end
  end
  table.sort(cands, function(a, b)
    if a[1] ~= b[1] then return a[1] < b[1] end
    return a[2] < b[2]
  end)
  for i = 1, math.min(#cands, limit - got) do
    out[#out + 1] = p; out[#out + 1] = cands[i][1]; out[#out + 1] = cands[i][2]
    got = got + 1
  end
end
-- reaped jobs whose backoff has passed, not yet moved to their ready set (claim.lua does
-- that first): candidates at their kept place ('po'), so a cluster claim gives their home
-- its share
for i = QUEUES_FROM, #ARGV do
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', bk(ARGV[i]), '-inf', NOW)) do
    local f = redis.call('HMGET', jk(string.sub(m, 17)), 'st', 'mem', 'pr', 'po', 'ra')
    local ra = tonumber(f[5])
    if f[1] == 'queued' and f[2] == m and ra and ra <= NOW then
      out[#out + 1] = f[3]; out[#out + 1] = math.min(tonumber(f[4]) or ra, ra)
      out[#out + 1] = m
    end
  end
end
-- #cluster _claim_pins
return out
