-- claim: hand up to `limit` ready jobs of the named queues to one worker.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, worker_id, limit, lease_ms, token_nonce, queue...
--       (on a Redis Cluster then the pauses, _paused_argv.lua). A negative lease_ms is a
--       claim ahead of free slots (SupportsPrefetch.claim_ahead): the attempts are held,
--       with no deadline and no heartbeat bound until start.lua sets them.
-- Order: higher priority first, then earlier ready time, then enqueue order (the
-- member of a ready zset is a 16-hex-digit sequence number + the job id, so equal
-- scores sort by sequence). Jobs past schedule-to-start stay for reap; `queue`
-- concurrency jobs whose key is at its limit are parked in P:cw:<key> until a slot frees.
-- Rate-limited jobs (fields rk, rl, rw) are claimed only while their key's sliding window
-- P:rt:<key> (a zset of kept times: each granted claim's start_by = NOW + RATE_START_MS)
-- holds fewer than rl times after NOW - rw (queue_core.rules.limits.rate_grant, mirrored
-- here); others stay in place, queued.
-- A job whose hash has a field claim cannot read (corrupt_fields) is not claimed: the
-- reply is then {that list, {id, queue, priority, ...}}, and the caller dead-letters those
-- with corrupt.lua (queue_core.records.corrupt).
-- Pauses (P:paused, field '<kind>:<name>', backends/redis/pauses.py) mirror
-- queue_core.rules.control.paused: one HLEN per claim while nothing is paused; a paused
-- queue's ready sets are not read; a job of a paused task or flow met by the claim is
-- moved aside once, to P:held:<kind>:<name> (same score and member as in its ready set;
-- resume.lua moves it back). On a Redis Cluster they come as the last argument
-- (_paused_argv.lua).
-- Returns: flat list, 21 per job: id, task_name, queue, payload, attempt, token,
--   lease_expires_at, deadline|nil, max_attempts, priority, timeout_ms|nil,
--   heartbeat_ms|nil, options|nil, enqueued_at, replay_of|nil, started_at,
--   execution_id|nil, step_id|nil, flow_deadline_at|nil, run_at (when the attempt became
--   due: the pick-up latency's start), start_by|nil (a rate-limited claim's latest body
--   start; decoded by backends/redis/claimed.py). On a Redis Cluster one more element may
--   follow: the named queues that also have jobs in the shared home (_claim_pins.lua).
--   For a flow step the deadline is
--   the earlier of the attempt's and the flow's, and the step becomes running (directly
--   in P:xs:<execution>, moving its version, or as a pending event when earlier events
--   wait for an advance, so the order of the step's changes is kept).
defer_counts()
local QUEUES_FROM = 8
local wid, limit, lease, nonce = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local ahead = lease < 0
if ahead then lease = -lease end
-- #include _paused
-- the reaped jobs of queue q whose backoff has passed by NOW move into their ready set,
-- scored by their kept place ('po'); an entry whose job is no longer queued with that
-- member is dropped. Returns how many moved.
local function promote_backoff(q)
  local due = redis.call('ZRANGEBYSCORE', bk(q), '-inf', NOW)
  if #due == 0 then return 0 end
  redis.call('ZREMRANGEBYSCORE', bk(q), '-inf', NOW)
  local moved = 0
  for _, m in ipairs(due) do
    local f = redis.call('HMGET', jk(string.sub(m, 17)), 'st', 'mem', 'pr', 'po', 'ra')
    local ra = tonumber(f[5])
    if f[1] == 'queued' and f[2] == m and ra then
      if ra > NOW then  -- its ready time moved since (a debounce merge)
        redis.call('ZADD', bk(q), ra, m)
      else
        redis.call('ZADD', rk(q, f[3]), math.min(tonumber(f[4]) or ra, ra), m)
        redis.call('ZADD', pk(q), f[3], f[3])
        moved = moved + 1
      end
    end
  end
  return moved
end

local byprio, plist = {}, {}
for i = QUEUES_FROM, #ARGV do
  local q = ARGV[i]
  if not (PQ and PQ[q]) then
    promote_backoff(q)  -- reaped jobs past their backoff take their kept place
    for _, p in ipairs(redis.call('ZRANGE', pk(q), 0, -1)) do
      local n = tonumber(p)
      if not byprio[n] then byprio[n] = {}; plist[#plist + 1] = n end
      table.insert(byprio[n], {q, p})
    end
  end
end
table.sort(plist, function(a, b) return a > b end)
local out, n = {}, 0
local corrupt = {}
-- ready-set members taken this round, removed with one ZREM per set before the next
-- round reads the sets again
local taken = {}
local function unready_later(r, m)
  local t = taken[r]
  if not t then t = {}; taken[r] = t end
  t[#t + 1] = m
end

-- queue_core.rules.limits.RATE_START_MS (tests/backends/redis/test_scripts.py pins it)
local RATE_START_MS = 100
local rate_seq = 0
-- mirrors queue_core.rules.limits.rate_grant for one claim (want = 1): drop the kept
-- times at or before NOW - rw; grant when fewer than rl remain, keeping NOW +
-- RATE_START_MS (the claim's start_by, returned); the key expires once that time is a
-- window old. false when not granted.
local function rate_take(rkey, rl, rw)
  local z = P .. ':rt:' .. rkey
  redis.call('ZREMRANGEBYSCORE', z, '-inf', NOW - rw)
  if redis.call('ZCARD', z) >= rl then return false end
  rate_seq = rate_seq + 1
  local start_by = NOW + RATE_START_MS
  redis.call('ZADD', z, start_by, nonce .. 'r' .. rate_seq)
  redis.call('PEXPIRE', z, rw + RATE_START_MS)
  return start_by
end

-- #include _rr

local try
-- the claim met m, a job of round_robin group g (key ck) of queue q: claim in its place
-- the group's next turn (rr_turns), the first whose job can be claimed now, and mark its
-- key served with the group's next counter value. Returns 'claimed' (m itself),
-- 'swapped' (another job: m stays, to be met again) or nil (no turn: m is judged alone)
local function rr_claim(q, g, ck, m, score)
  local base = ':' .. q .. ':' .. g
  local T = P .. ':rrt' .. base
  redis.call('ZADD', P .. ':rrj' .. base .. ':' .. ck, 'NX', score, m)
  redis.call('ZADD', T, 'NX', 0, ck)
  redis.call('SADD', P .. ':rrq:' .. g, q)
  local forget = {}
  -- offer turn t; the outcome when its job was claimed
  local function take(t)
    if try(q, t[5], rk(q, t[5]), t[3], t[4], true) ~= 'claimed' then return nil end
    redis.call('ZADD', T, redis.call('INCR', P .. ':rrc' .. base), t[1])
    redis.call('ZREM', P .. ':rrj' .. base .. ':' .. t[1], t[3])
    if t[3] == m then return 'claimed' end
    return 'swapped'
  end
  local function head(key, served)
    local t, empty = rr_head(q, base, key)
    if empty then forget[#forget + 1] = key end
    if t then t[2] = served end
    return t
  end
  local res = nil
  -- never served keys first, by their best job
  local fresh = {}
  for _, key in ipairs(redis.call('ZRANGEBYSCORE', T, 0, 0)) do
    fresh[#fresh + 1] = head(key, 0)
  end
  table.sort(fresh, rr_before)
  for _, t in ipairs(fresh) do
    res = take(t)
    if res then break end
  end
  -- then the others, least recently served first, until one takes
  local off = 0
  while not res do
    local page = redis.call('ZRANGEBYSCORE', T, '(0', '+inf', 'WITHSCORES', 'LIMIT', off, 16)
    if #page == 0 then break end
    for i = 1, #page, 2 do
      local t = head(page[i], tonumber(page[i + 1]))
      if t then res = take(t) end
      if res then break end
    end
    off = off + #page / 2
  end
  if #forget > 0 then redis.call('ZREM', T, unpack(forget)) end
  return res
end

try = function(q, p, r, m, score, turn)
  -- returns 'claimed', 'kept' (left in place), 'gone' (left the zset) or 'swapped'
  -- (a round_robin group's next turn claimed in its place; turn: this job is that turn)
  local id = string.sub(m, 17)
  local k = jk(id)
  local f = redis.call('HMGET', k, unpack(CLAIM_FIELDS))
  if f[1] ~= 'queued' and (STATES[f[1]] or not (f[1] or claim_found(f))) then
    unready_later(r, m)
    return 'gone'
  end
  if #claim_corrupt(f, q) > 0 then
    -- a corrupt record: left in place, untouched, for corrupt.lua to dead-letter alone
    corrupt[#corrupt + 1] = id; corrupt[#corrupt + 1] = q; corrupt[#corrupt + 1] = p
    return 'kept'
  end
  if f[23] == 'round_robin' and f[4] and not turn then
    local res = rr_claim(q, f[24] or f[7], f[4], m, score)
    if res then return res end
  end
  if PT then
    -- mirrors queue_core.rules.control.paused (task, then the execution's flow; the
    -- queue was checked before its ready sets were read), inline: no closure per claim
    local held = PT[f[7]] and ('task:' .. f[7])
    if not held and f[16] and next(PF) then
      local fl = redis.call('HGET', P .. ':x:' .. f[16], 'fl')
      if fl and PF[fl] then held = 'flow:' .. fl end
    end
    if held then
      -- on a cluster: a resume swept this home after the caller read the pauses (P:rv
      -- past the version it read, resume.lua): left in place for the next claim
      if PV and tonumber(redis.call('GET', P .. ':rv') or '0') > PV then return 'kept' end
      unready_later(r, m)
      redis.call('ZADD', P .. ':held:' .. held, score, m)
      return 'gone'
    end
  end
  -- mirrors queue_core.rules.leases.schedule_to_start_expired: left for reap, which finds
  -- it in STS (added here when missing: a bound written to the hash after the job was
  -- indexed would otherwise keep it queued and pending forever; found by nox -s fuzz)
  if f[2] and tonumber(f[3]) + tonumber(f[2]) <= NOW then
    redis.call('ZADD', STS, 'NX', tonumber(f[3]) + tonumber(f[2]), id)
    return 'kept'
  end
  -- mirrors queue_core.rules.leases.step_refused: a flow step at its execution's deadline
  -- is not started; left queued for the flow's reap, which ends it not_run
  if f[19] and tonumber(f[19]) <= NOW then return 'kept' end
  local ck = f[4]
  if ck and f[5] and f[6] ~= '1' then
    local running = tonumber(redis.call('GET', P .. ':cr:' .. ck) or '0')
    if running >= tonumber(f[5]) then
      unready_later(r, m)
      redis.call('ZADD', P .. ':cw:' .. ck, score, m)
      return 'gone'
    end
  end
  local start_by = false
  if f[20] then
    start_by = rate_take(f[20], tonumber(f[21]), tonumber(f[22]))
    if not start_by then return 'kept' end
  end
  unready_later(r, m)
  if f[2] then redis.call('ZREM', STS, id) end
  if ck then redis.call('INCR', P .. ':cr:' .. ck) end
  local att = tonumber(f[15]) + 1
  n = n + 1
  local tok = nonce .. n
  local le = NOW + lease
  local dl = not ahead and f[10] and (NOW + tonumber(f[10]))
  local hd = not ahead and f[11] and (NOW + tonumber(f[11]))
  if dl or hd then
    local h = {'st', 'running', 'att', att, 'tok', tok, 'wid', wid, 'sa', NOW, 'le', le}
    if dl then h[#h + 1] = 'dl'; h[#h + 1] = dl end
    if hd then h[#h + 1] = 'hd'; h[#h + 1] = hd end
    redis.call('HSET', k, unpack(h))
  elseif ahead then
    -- 'ah': the attempt number held (its body not started; start_refs clears it): a reap
    -- spends no attempt of it (queue_core.rules.outcomes.reap_verdict, reap.lua)
    redis.call('HSET', k, 'st', 'running', 'att', att, 'tok', tok, 'wid', wid, 'sa', NOW,
               'le', le, 'ah', att)
  else
    redis.call('HSET', k, 'st', 'running', 'att', att, 'tok', tok, 'wid', wid, 'sa', NOW,
               'le', le)
  end
  zop('ZADD', RUN, run_score(le, dl, hd), id)
  local x, fd = f[16], tonumber(f[19])
  if x then
    local xe = P .. ':xe:' .. x
    if redis.call('LLEN', xe) == 0 then
      xs_set(x, f[17], 'running', '')
      redis.call('HINCRBY', P .. ':x:' .. x, 'v', 1)
    else  -- no version move: flow_apply.lua checks appended events where they matter
      redis.call('RPUSH', xe, f[17] .. '|running||' .. att)
    end
  end
  -- mirrors queue_core.rules.leases.step_deadline: the earlier of the attempt's and the flow's
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
  out[o + 20] = f[3] or false; out[o + 21] = start_by
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
      local res = try(srcs[i][1], srcs[i][2], c[4], c[2], c[1], false)
      if res == 'kept' then kept[i] = kept[i] + 1 end
      -- the last fetched member of a full batch: later members of that zset were not
      -- fetched, so the merge order is only known up to here; after a swap the sets are
      -- read again (the job met stays where it was, and is met again)
      if n >= limit or c[5] or res == 'swapped' then break end
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
-- #cluster _claim_pins
-- corrupt records found: {jobs, {id, queue, priority, ...}} (backends/redis/claimed.py; on
-- a cluster the jobs' list carries the pinned queues' list, _claim_pins.lua, as above)
if #corrupt > 0 then return {out, corrupt} end
return out
