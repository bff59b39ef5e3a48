-- Flows: the one interpreter of queue_core.rules.flows.plan operations, prepended (after
-- _lib.lua) to flow_start.lua and flow_apply.lua. The core decides (plan.fold_fast,
-- plan.fold, plan.start_ops), backends/redis/flows.py serializes the plan once; this file
-- writes each operation and the job changes it implies. No rule is re-derived here.
-- Keys of execution e, all under the prefix P (the shared home on a cluster): the table of
-- docs/backends/redis.md (P:x:<e> its hash, with v the version and c.<state> the step
-- counts; P:xs:<e> step idx -> "state|released (1/0)|reason"; P:xu:<e> unmet counts;
-- P:xe:<e> pending events; P:xj:<e> the step jobs, released as stored). A workflow's
-- (SPEC §12) also: P:xm:<e> memo key -> value and P:xmi:<e> memo key -> "seq|at" (x field
-- mn: the last memo number), P:xw:<e> its event waits memo key -> event name, indexed by
-- name in P:wn:<name> ("<e>\n<memo key>" -> the wait's JSON), P:xh:<e> its finished jobs
-- held from the job retention (prune.lua); x fields k (kind), pi/px (parent link), aw
-- (awaited step indexes).

-- follow-ups Python runs after the script (backends/redis/flows.py): 'c', a sub-execution
-- to cancel (decide.cancel cannot run here); 'a', a parent execution to advance
local FOLLOW = {}
-- ARGV index before the first blob (the bytes an op carries: a memo's value, a job's
-- arguments); set by the script that calls flow_ops
local ARGB = 0

local function xk(e) return P .. ':x:' .. e end

-- Release: step idx's job, stored at start, is enqueued now (deterministic id
-- "<e>.<idx>": a second release is a no-op)
local flow_rerun
local function flow_release(e, idx, deadline)
  local id = e .. '.' .. idx
  local packed = redis.call('HGET', P .. ':xj:' .. e, idx)
  if not packed then return end  -- a sub-execution's step: no job
  local t = cmsgpack.unpack(packed)
  if redis.call('EXISTS', jk(id)) == 1 then return flow_rerun(e, id, t, deadline) end
  local ra = NOW
  if t.ra ~= '' then ra = tonumber(t.ra) end
  ra = ra + tonumber(t.dms)
  local seq = redis.call('INCR', P .. ':seq')
  local m = string.format('%016x', seq) .. id
  local h = t.h
  for _, v in ipairs({'eq', NOW, 'ra', ra, 'att', 0, 'st', 'queued', 'mem', m}) do
    h[#h + 1] = v
  end
  if deadline ~= '' then h[#h + 1] = 'fd'; h[#h + 1] = deadline end
  redis.call('HSET', jk(id), unpack(h))
  redis.call('ZADD', ALL, seq, id)
  if t.ck ~= '' then redis.call('INCR', P .. ':ca:' .. t.ck) end
  count(t.q, 'queued', 1)
  index_ready(id, t.q, t.pr, ra, nz(t.ss), m)
  if t.rr and t.ck ~= '' then  -- a round_robin flow's step: into its key's index (_rr.lua)
    local base = ':' .. t.q .. ':' .. t.rr
    redis.call('ZADD', P .. ':rrj' .. base .. ':' .. t.ck, ra, m)
    redis.call('ZADD', P .. ':rrt' .. base, 'NX', 0, t.ck)
    redis.call('SADD', P .. ':rrq:' .. t.rr, t.q)
  end
  if ra <= NOW then wake(t.q) end
end

-- Release of a finished job (a step put back by queue_core.rules.flows.workflow.resume_ops):
-- it runs again, queued and ready now, max_attempts = attempts so far + the budget it was
-- stored with (t.h), reason/result cleared, its dead-letter entry removed, attempts kept;
-- a queued or running job: nothing
flow_rerun = function(e, id, t, deadline)
  local k = jk(id)
  local f = redis.call('HMGET', k, 'st', 'att', 'q', 'pr', 'ss', 'did', 'ck')
  if f[1] == 'queued' or f[1] == 'running' then return end
  if f[6] then
    local dk = P .. ':d:' .. f[6]
    local tn = redis.call('HGET', dk, 'tn')
    redis.call('DEL', dk)
    redis.call('ZREM', DZ, f[6])
    if tn then redis.call('ZREM', P .. ':dt:' .. tn, f[6]) end
  end
  local m = f[1] .. '|' .. id .. '|' .. f[3]
  redis.call('ZREM', FIN, m)
  redis.call('SREM', P .. ':xh:' .. e, m)
  count(f[3], f[1], -1)
  redis.call('PERSIST', k)
  redis.call('PERSIST', ak(id))
  local budget = 1
  for i = 1, #t.h, 2 do if t.h[i] == 'ma' then budget = tonumber(t.h[i + 1]) end end
  redis.call('HDEL', k, 'rs', 'res', 'fa', 'fx', 'did', 'cr', 'lc', 'fd')
  redis.call('HSET', k, 'ma', tonumber(f[2]) + budget)
  if deadline ~= '' then redis.call('HSET', k, 'fd', deadline) end
  if f[7] then redis.call('INCR', P .. ':ca:' .. f[7]) end
  to_queued(id, f[3], f[4], NOW, f[5])
end

-- EndJob: step idx's job, if its state is `when`, ends state/reason; a running one's
-- attempt ends outcome/reason (fenced: its lease fields go) and is returned in out
local function flow_end_job(e, idx, when, state, reason, outcome, out)
  local id = e .. '.' .. idx
  local f = redis.call('HMGET', jk(id), 'st', 'att', 'q', 'ck', 'wid', 'sa', 'pr', 'mem')
  if not f[1] and redis.call('EXISTS', xk(id)) == 1 then  -- a sub-execution's step
    FOLLOW[#FOLLOW + 1] = 'c'; FOLLOW[#FOLLOW + 1] = id
  end
  if f[1] ~= when then return end
  local q, ck = f[3], nz(f[4])
  if when == 'running' then
    record_attempt(id, f[2], f[5], f[6],
      '["' .. outcome .. '","' .. reason .. '",null,null,null,null,null]')
    leave_running(id, q, ck)
    terminal(id, q, state, reason, ck, true)
    local o = #out
    out[o + 1] = id; out[o + 2] = tonumber(f[2]); out[o + 3] = outcome
    out[o + 4] = reason; out[o + 5] = state
  else  -- queued (ready or in a retry backoff): it leaves the ready sets, unclaimed
    unready(id, q, f[7], f[8], ck)
    count(q, 'queued', -1)
    terminal(id, q, state, reason, ck)
  end
end

-- a step job's arguments as flow_start.lua stores them (released by flow_release):
-- ARGV[b + 1..16] = backends.redis.records.job_args
local OPT = {'to', 'hb', 'ss', 'ck', 'cl'}
-- rr: the round_robin group of the execution's steps (flow_start.lua's H.rr), or nil
local function flow_job(e, i, sid, b, rr)
  -- id, task, queue, payload, priority, run_at, delay, max_attempts, lost_delay,
  -- timeout, heartbeat, schedule_to_start, conc key, conc limit, conc skip, options
  local jh = {'tn', ARGV[b + 2], 'q', ARGV[b + 3], 'pl', ARGV[b + 4], 'pr', ARGV[b + 5],
              'ma', ARGV[b + 8], 'ld', ARGV[b + 9], 'csk', ARGV[b + 15],
              'x', e, 'xi', i, 'xn', sid}
  for j = 1, 5 do
    local v = ARGV[b + 9 + j]
    if v ~= '' then jh[#jh + 1] = OPT[j]; jh[#jh + 1] = v end
  end
  if ARGV[b + 16] ~= '' then jh[#jh + 1] = 'op'; jh[#jh + 1] = ARGV[b + 16] end
  if rr == '' then rr = nil end
  if rr then
    jh[#jh + 1] = 'cb'; jh[#jh + 1] = 'round_robin'; jh[#jh + 1] = 'cg'; jh[#jh + 1] = rr
  end
  return cmsgpack.pack({q = ARGV[b + 3], pr = ARGV[b + 5], ra = ARGV[b + 6],
                        dms = ARGV[b + 7], ss = ARGV[b + 12], ck = ARGV[b + 13], h = jh,
                        rr = rr})
end

-- SetReady / Wake: step idx's job, if queued, becomes ready at `at` (a string: PARKED_AT
-- is past a double's exact integers) with ready-set score `score` (Python's: a parked
-- job's is 2 * PARKED_AT, above any claim's now, which a double cannot tell from PARKED_AT)
local function flow_ready(e, idx, at, score)
  local id = e .. '.' .. idx
  local f = redis.call('HMGET', jk(id), 'st', 'q', 'pr', 'mem', 'ck', 'ss')
  if f[1] ~= 'queued' then return end
  unready(id, f[2], f[3], f[4], nz(f[5]))
  local m = string.format('%016x', redis.call('INCR', P .. ':seq')) .. id
  redis.call('HSET', jk(id), 'mem', m, 'ra', at)
  redis.call('ZADD', rk(f[2], f[3]), score, m)
  redis.call('ZADD', pk(f[2]), f[3], f[3])
  -- P:sts by queue_core.rules.leases.queued_expiry (mirrored, as index_ready)
  if f[6] then redis.call('ZADD', STS, tonumber(at) + tonumber(f[6]), id) end
  if tonumber(score) <= NOW then wake(f[2]) end
end

-- a workflow's event wait memo key goes (DropWaiter; every one at Finished)
local function wf_drop_wait(e, mk)
  local xw = P .. ':xw:' .. e
  local name = redis.call('HGET', xw, mk)
  if name then
    redis.call('HDEL', P .. ':wn:' .. name, e .. '\n' .. mk)
    redis.call('HDEL', xw, mk)
  end
end

-- the operations only workflows use (PutMemo, DropMemos, AddStep, SetReady, Wake,
-- SetAwaiting, AddWaiter, DropWaiter, Reopened, SetUnmet); false for an unknown kind
local function wf_op(e, x, op)
  local k = op[1]
  if k == 'M' then  -- key, blob: a new key takes the next memo number, a replaced one keeps it
    local xmi = P .. ':xmi:' .. e
    local old = redis.call('HGET', xmi, op[2])
    local seq = old and string.match(old, '^([^|]*)') or redis.call('HINCRBY', x, 'mn', 1)
    redis.call('HSET', xmi, op[2], seq .. '|' .. NOW)
    redis.call('HSET', P .. ':xm:' .. e, op[2], ARGV[ARGB + op[3]])
  elseif k == 'D' then  -- memo keys
    for j = 2, #op do
      redis.call('HDEL', P .. ':xm:' .. e, op[j])
      redis.call('HDEL', P .. ':xmi:' .. e, op[j])
    end
  elseif k == 'A' then  -- idx, step id, state, first blob of its job's arguments (0: none,
    -- a sub-execution's step), the job's flow deadline
    local idx, flag = op[2], '2'
    if op[5] > 0 then
      flag = '1'
      redis.call('HSET', P .. ':xj:' .. e, idx, flow_job(e, idx, op[3], ARGB + op[5] - 1))
    end
    redis.call('HSET', P .. ':xs:' .. e, idx, op[4] .. '|' .. flag .. '|')
    redis.call('HINCRBY', x, 'c.' .. op[4], 1)
    local sp, item = redis.call('HGET', x, 'sp') or '[]', '[' .. cjson.encode(op[3]) .. ',[]]'
    if sp == '[]' then sp = '[' .. item .. ']' else sp = string.sub(sp, 1, -2) .. ',' .. item .. ']' end
    redis.call('HSET', x, 'sp', sp)
    if op[5] > 0 then flow_release(e, idx, op[6]) end
  elseif k == 'Y' then  -- idx, ready at, its score
    flow_ready(e, op[2], op[3], op[4])
  elseif k == 'K' then  -- idx: ready now
    flow_ready(e, op[2], NOW, NOW)
  elseif k == 'G' then  -- awaited step indexes, comma-separated ('' = none)
    if op[2] == '' then redis.call('HDEL', x, 'aw') else redis.call('HSET', x, 'aw', op[2]) end
  elseif k == 'W' then  -- memo key, event name, the wait's JSON
    wf_drop_wait(e, op[2])
    redis.call('HSET', P .. ':xw:' .. e, op[2], op[3])
    redis.call('HSET', P .. ':wn:' .. op[3], e .. '\n' .. op[2], op[4])
  elseif k == 'w' then  -- memo key
    wf_drop_wait(e, op[2])
  elseif k == 'O' then  -- Reopened: out of prune's index, back among its key's executions
    redis.call('HDEL', x, 'fa')
    redis.call('ZREM', P .. ':xfin', e)
    local ck, seq = unpack(redis.call('HMGET', x, 'ck', 'seq'))
    if ck then
      redis.call('ZADD', P .. ':xka:' .. ck, seq, e)
      redis.call('INCR', P .. ':xkv:' .. ck)
    end
  elseif k == 'U' then  -- idx, unmet
    redis.call('HSET', P .. ':xu:' .. e, op[2], op[3])
  else
    return false
  end
  return true
end

-- Finished of a workflow or a sub-execution: its waits go; a sub-execution's end is a
-- step event of its parent (state = queue_core.rules.flows.workflow.sub_step_state,
-- computed in Python), which Python advances after the script
local function wf_finished(e, x, sub_state, reason)
  local xw = P .. ':xw:' .. e
  for _, mk in ipairs(redis.call('HKEYS', xw)) do wf_drop_wait(e, mk) end
  local pi, px = unpack(redis.call('HMGET', x, 'pi', 'px'))
  -- (a parent without that step: its start_child_execution lost its fence after this
  -- execution was started; nothing to end)
  if pi and sub_state ~= '' and redis.call('HEXISTS', P .. ':xs:' .. pi, px) == 1 then
    redis.call('RPUSH', P .. ':xe:' .. pi, px .. '|' .. sub_state .. '|' .. reason .. '|0')
    redis.call('HINCRBY', xk(pi), 'v', 1)
    redis.call('SADD', P .. ':xadv', pi)
    FOLLOW[#FOLLOW + 1] = 'a'; FOLLOW[#FOLLOW + 1] = pi
  end
end

-- apply plan operations to execution e (kinds: S SetStep, X SetExecution, B Started,
-- F Finished, E EndJob, C RequestCancel, R Release, and wf_op's; '' = none); returns the step jobs
-- ended while running (5 fields each, as reap.lua)
local function flow_ops(e, ops)
  local out, x = {}, xk(e)
  for _, op in ipairs(ops) do
    local k = op[1]
    if k == 'S' then  -- idx, state, reason, then a success's dependents: one unmet less each
      xs_set(e, op[2], op[3], op[4])
      for j = 5, #op do redis.call('HINCRBY', P .. ':xu:' .. e, op[j], -1) end
    elseif k == 'X' then  -- state, reason, failed step, deadline
      local sets, dels = {'st', op[2]}, {}
      for j, name in ipairs({'rs', 'fs', 'dl'}) do
        if op[j + 2] == '' then dels[#dels + 1] = name
        else sets[#sets + 1] = name; sets[#sets + 1] = op[j + 2] end
      end
      redis.call('HSET', x, unpack(sets))
      if #dels > 0 then redis.call('HDEL', x, unpack(dels)) end
    elseif k == 'B' then  -- deadline: into the reaper's index
      redis.call('HSET', x, 'sa', NOW)
      if op[2] ~= '' then redis.call('ZADD', P .. ':xdl', op[2], e) end
    elseif k == 'F' then  -- out of the deadline index, into prune's; its key's place frees
      redis.call('HSET', x, 'fa', NOW)
      redis.call('ZREM', P .. ':xdl', e)
      redis.call('ZADD', P .. ':xfin', NOW, e)
      local ck = redis.call('HGET', x, 'ck')
      if ck then
        redis.call('ZREM', P .. ':xka:' .. ck, e)
        redis.call('INCR', P .. ':xkv:' .. ck)
        redis.call('SADD', P .. ':xpk', ck)
      end
      wf_finished(e, x, op[2], op[3])
    elseif k == 'E' then  -- idx, when, state, reason, outcome
      flow_end_job(e, op[2], op[3], op[4], op[5], op[6], out)
    elseif k == 'C' then  -- idx: a running job is asked to cancel (a sub-execution: cancelled)
      local id = e .. '.' .. op[2]
      local st = redis.call('HGET', jk(id), 'st')
      if st == 'running' then redis.call('HSET', jk(id), 'cr', '1') end
      if not st and redis.call('EXISTS', xk(id)) == 1 then
        FOLLOW[#FOLLOW + 1] = 'c'; FOLLOW[#FOLLOW + 1] = id
      end
    elseif k == 'R' then  -- idx, deadline
      flow_release(e, op[2], op[3])
    elseif not wf_op(e, x, op) then
      error('unknown flow operation ' .. tostring(k))
    end
  end
  if redis.call('EXISTS', x) == 1 then redis.call('HINCRBY', x, 'v', 1) end
  return out
end
