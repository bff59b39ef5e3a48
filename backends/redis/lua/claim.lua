-- claim: hand up to `limit` ready jobs of the named queues to one worker.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, worker_id, limit, lease_ms, token_nonce, queue...
-- Order: higher priority first, then earlier ready time, then enqueue order (the
-- member of a ready zset is a 16-hex-digit sequence number + the job id, so equal
-- scores sort by sequence). Jobs past schedule-to-start stay for reap; `queue`
-- concurrency jobs whose key is at its limit are parked in P:cw:<key> until a slot frees.
-- Rate-limited jobs (fields rk, rl, rw) are claimed only while their key's sliding window
-- P:rt:<key> (a zset of claim times) holds fewer than rl claims in (NOW - rw, NOW]
-- (queue_core.policy.limits.rate_grant, mirrored here); others stay in place, queued.
-- Returns: flat list, 20 per job: id, task_name, queue, payload, attempt, token,
--   lease_expires_at, deadline|nil, max_attempts, priority, timeout_ms|nil,
--   heartbeat_ms|nil, options|nil, enqueued_at, replay_of|nil, started_at,
--   execution_id|nil, step_id|nil, flow_deadline_at|nil, run_at (when the attempt became
--   due: the pick-up latency's start; decoded by backends/redis/claimed.py). For a flow step the deadline is
--   the earlier of the attempt's and the flow's, and the step becomes running (directly
--   in P:xs:<execution>, or as a pending event when earlier events wait for an advance,
--   so the order of the step's changes is kept).
defer_counts()
local wid, limit, lease, nonce = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local byprio, plist = {}, {}
for i = 8, #ARGV do
  local q = ARGV[i]
  for _, p in ipairs(redis.call('ZRANGE', pk(q), 0, -1)) do
    local n = tonumber(p)
    if not byprio[n] then byprio[n] = {}; plist[#plist + 1] = n end
    table.insert(byprio[n], {q, p})
  end
end
table.sort(plist, function(a, b) return a > b end)
local out, n = {}, 0
-- ready-set members taken this round, removed with one ZREM per set before the next
-- round reads the sets again
local taken = {}
local function unready_later(r, m)
  local t = taken[r]
  if not t then t = {}; taken[r] = t end
  t[#t + 1] = m
end

local rate_seq = 0
local function rate_take(rkey, rl, rw)
  local z = P .. ':rt:' .. rkey
  redis.call('ZREMRANGEBYSCORE', z, '-inf', NOW - rw)
  if redis.call('ZCARD', z) >= rl then return false end
  rate_seq = rate_seq + 1
  redis.call('ZADD', z, NOW, nonce .. 'r' .. rate_seq)
  redis.call('PEXPIRE', z, rw)
  return true
end

local function try(q, p, r, m, score)
  -- returns 'claimed', 'kept' (left in place) or 'gone' (left the zset)
  local id = string.sub(m, 17)
  local k = jk(id)
  local f = redis.call('HMGET', k, 'st', 'ss', 'ra', 'ck', 'cl', 'csk', 'tn', 'pl', 'ma',
                       'to', 'hb', 'op', 'eq', 'ro', 'att', 'x', 'xi', 'xn', 'fd',
                       'rk', 'rl', 'rw')
  if f[1] ~= 'queued' then
    unready_later(r, m)
    return 'gone'
  end
  if f[2] and tonumber(f[3]) + tonumber(f[2]) <= NOW then return 'kept' end
  local ck = f[4]
  if ck and f[5] and f[6] ~= '1' then
    local running = tonumber(redis.call('GET', P .. ':cr:' .. ck) or '0')
    if running >= tonumber(f[5]) then
      unready_later(r, m)
      redis.call('ZADD', P .. ':cw:' .. ck, score, m)
      return 'gone'
    end
  end
  if f[20] and not rate_take(f[20], tonumber(f[21]), tonumber(f[22])) then return 'kept' end
  unready_later(r, m)
  if f[2] then redis.call('ZREM', STS, id) end
  if ck then redis.call('INCR', P .. ':cr:' .. ck) end
  local att = tonumber(f[15]) + 1
  n = n + 1
  local tok = nonce .. n
  local le = NOW + lease
  local dl = f[10] and (NOW + tonumber(f[10]))
  local hd = f[11] and (NOW + tonumber(f[11]))
  if dl or hd then
    local h = {'st', 'running', 'att', att, 'tok', tok, 'wid', wid, 'sa', NOW, 'le', le}
    if dl then h[#h + 1] = 'dl'; h[#h + 1] = dl end
    if hd then h[#h + 1] = 'hd'; h[#h + 1] = hd end
    redis.call('HSET', k, unpack(h))
  else
    redis.call('HSET', k, 'st', 'running', 'att', att, 'tok', tok, 'wid', wid, 'sa', NOW,
               'le', le)
  end
  zop('ZADD', RUN, run_score(le, dl, hd), id)
  local x, fd = f[16], tonumber(f[19])
  if x then
    local xe = P .. ':xe:' .. x
    if redis.call('LLEN', xe) == 0 then
      xs_set(x, f[17], 'running|1|')
    else
      redis.call('RPUSH', xe, f[17] .. '|running|')
    end
    redis.call('HINCRBY', P .. ':x:' .. x, 'v', 1)
  end
  local edl = dl
  if fd and (not edl or fd < edl) then edl = fd end
  count(q, 'queued', -1)
  count(q, 'running', 1)
  local o = #out
  out[o + 1] = id; out[o + 2] = f[7]; out[o + 3] = q; out[o + 4] = f[8]
  out[o + 5] = att; out[o + 6] = tok; out[o + 7] = le; out[o + 8] = edl or false
  out[o + 9] = f[9]; out[o + 10] = p; out[o + 11] = f[10] or false
  out[o + 12] = f[11] or false; out[o + 13] = f[12] or false; out[o + 14] = f[13]
  out[o + 15] = f[14] or false; out[o + 16] = NOW
  out[o + 17] = x or false; out[o + 18] = f[18] or false; out[o + 19] = fd or false
  out[o + 20] = f[3] or false
  return 'claimed'
end

for _, p in ipairs(plist) do
  if n >= limit then break end
  local srcs = byprio[p]
  local kept = {}
  for i = 1, #srcs do kept[i] = 0 end
  while n < limit do
    local want = limit - n
    local cands = {}
    for i, s in ipairs(srcs) do
      local r = rk(s[1], s[2])
      local got = redis.call('ZRANGEBYSCORE', r, '-inf', NOW, 'WITHSCORES', 'LIMIT', kept[i], want)
      for j = 1, #got, 2 do
        cands[#cands + 1] = {tonumber(got[j + 1]), got[j], i, r, (j + 1) / 2 == want}
      end
    end
    if #cands == 0 then break end
    if #srcs > 1 then
      table.sort(cands, function(a, b)
        if a[1] ~= b[1] then return a[1] < b[1] end
        return a[2] < b[2]
      end)
    end
    for _, c in ipairs(cands) do
      local i = c[3]
      local res = try(srcs[i][1], srcs[i][2], c[4], c[2], c[1])
      if res == 'kept' then kept[i] = kept[i] + 1 end
      -- the last fetched member of a full batch: later members of that zset were not
      -- fetched, so the merge order is only known up to here
      if n >= limit or c[5] then break end
    end
    for r, ms in pairs(taken) do call_chunked('ZREM', r, ms) end
    taken = {}
  end
  for _, s in ipairs(srcs) do
    local r = rk(s[1], s[2])
    if redis.call('EXISTS', r) == 0 then redis.call('ZREM', pk(s[1]), s[2]) end
  end
end
flush_counts()
return out
