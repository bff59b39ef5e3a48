-- flow_apply: apply one plan (see _flow.lua) if the execution, and the concurrency key,
-- did not change since Python read them. A claim that only appended an event (claim.lua)
-- moves no version: it changes no plan but one that ends or cancels a step's job (a step
-- read queued may be running now), so such a plan ('1' below) also needs no event added.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, execution ('' = none), its version, events folded (taken
--       off P:xe), concurrency key ('' = none), its version, 'promote' (moves the key's
--       version) | 'unmark' (nothing to promote: out of P:xpk) | '', JSON operations,
--       '1' when the plan ends or cancels a step's job, a JSON guard ('' = none: a
--       workflow's, backends/redis/workflows.py): {"n": the event counter P:evn as read
--       (no event stored since), "f": [job id, attempt, lease token] (the current attempt
--       of a step job of this execution), "s": [attempt info JSON, delay ms, lost delay
--       ms or ''] (that attempt ended suspended: finish.lua's retry that spends no
--       attempt, applied here with the plan)}, then the blobs the operations name
-- Returns: {0} when a version moved (nothing written: read again and retry), {2} when
--          the guard's attempt is not current (nothing written), else {1, step jobs ended
--          while running (5 fields each, as reap), follow-ups (_flow.lua FOLLOW)}
local e, ck = ARGV[4], ARGV[7]
if e ~= '' and (redis.call('HGET', xk(e), 'v') or '0') ~= ARGV[5] then return {0} end
local xe = P .. ':xe:' .. e
if ARGV[11] == '1' and redis.call('LLEN', xe) ~= tonumber(ARGV[6]) then return {0} end
if ck ~= '' and (redis.call('GET', P .. ':xkv:' .. ck) or '0') ~= ARGV[8] then return {0} end
local G = nil
if ARGV[12] ~= '' then
  G = cjson.decode(ARGV[12])
  if G.n and (redis.call('GET', P .. ':evn') or '0') ~= G.n then return {0} end
  if G.f then
    local j = redis.call('HMGET', jk(G.f[1]), 'st', 'att', 'tok', 'x')
    if j[1] ~= 'running' or j[2] ~= G.f[2] or j[3] ~= G.f[3] or j[4] ~= e then return {2} end
  end
end
if ARGV[9] == 'unmark' then redis.call('SREM', P .. ':xpk', ck) end
if ARGV[9] == 'promote' then redis.call('INCR', P .. ':xkv:' .. ck) end
if e == '' then return {1, {}, {}} end
if G and G.s then  -- as finish.lua's 'queued' with a refund
  local id = G.f[1]
  local j = redis.call('HMGET', jk(id), 'att', 'wid', 'sa', 'q', 'ck', 'pr', 'ss')
  record_attempt(id, j[1], j[2], j[3], G.s[1])
  leave_running(id, j[4], nz(j[5]))
  redis.call('HINCRBY', jk(id), 'ma', 1)
  if G.s[3] ~= '' then redis.call('HSET', jk(id), 'lc', G.s[3]) end
  to_queued(id, j[4], j[6], NOW + tonumber(G.s[2]), nz(j[7]))
end
redis.call('LTRIM', xe, tonumber(ARGV[6]), -1)
if redis.call('LLEN', xe) == 0 then redis.call('SREM', P .. ':xadv', e) end
ARGB = 12
return {1, flow_ops(e, cjson.decode(ARGV[10])), FOLLOW}
