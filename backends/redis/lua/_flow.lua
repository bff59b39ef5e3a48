-- Flows: applying a decision of queue_core.flows.decide, prepended (after _lib.lua) to
-- flow_start.lua and flow_apply.lua. No rule of decide.py is re-derived here: Python
-- reads an execution, calls decide and sends the Transition as a list of operations in
-- the order of docs/design/flows-storage.md §3; this file only writes them, together
-- with the job changes they imply (the same helpers as finish/reap/cancel use).
--
-- Keys of execution e (all under the storage prefix P, so one hash tag holds them all):
--   P:x:<e>    hash: fl flow, sh spec hash, st, rs, fs failed_step, mp, to, dl, ca, sa,
--              fa, ck, cl, cb (concurrency), seq, sp (JSON [[step id, [deps]], ...]),
--              in (input), v (version: moves on every change, the optimistic lock)
--   P:xs:<e>   hash: step idx -> "state|released (1/0)|reason" (written by xs_set, which
--              keeps the counters c.<state> of P:x:<e>)
--   P:xu:<e>   hash: step idx -> its dependencies not succeeded yet (steps with some)
--   P:xe:<e>   list: pending events "idx|job state|job reason" (flow_event, claim)
--   P:xo:<e>   hash: step idx -> result of a succeeded step
--   P:xj:<e>   hash: step idx -> cmsgpack of the step's job (released as is)
--   P:xl, P:xl:<flow>  zsets by seq (listing); P:xdl zset by deadline (running ones);
--   P:xfin     zset by finished_at (prune); P:xadv set: executions with pending events
--   P:xka:<ck> zset by seq: queued/running/cancelling executions of a concurrency key;
--   P:xkv:<ck> its version; P:xpk set: keys that may have an execution to promote
--   P:fs:<hash> spec JSON (SET NX); P:fsn:<hash> how many stored executions use it

local function xk(e) return P .. ':x:' .. e end

-- every optimistic-lock check holds: {'x', execution, version} or {'k', key, version}
local function flow_check(cas)
  for _, c in ipairs(cas) do
    local cur
    if c[1] == 'x' then
      cur = redis.call('HGET', xk(c[2]), 'v')
    else
      cur = redis.call('GET', P .. ':xkv:' .. c[2])
    end
    if (cur or '0') ~= c[3] then return false end
  end
  return true
end

-- release step idx of execution e: its job, stored at start, is enqueued now
-- (deterministic id "<e>.<idx>": a second release is a no-op)
local function flow_release(e, idx, deadline)
  local id = e .. '.' .. idx
  local k = jk(id)
  if redis.call('EXISTS', k) == 1 then return end
  local t = cmsgpack.unpack(redis.call('HGET', P .. ':xj:' .. e, idx))
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
  redis.call('HSET', k, unpack(h))
  redis.call('ZADD', ALL, seq, id)
  if t.ck ~= '' then redis.call('INCR', P .. ':ca:' .. t.ck) end
  count(t.q, 'queued', 1)
  index_ready(id, t.q, t.pr, ra, nz(t.ss), m)
  if ra <= NOW then wake(t.q) end
end

-- apply the operations; returns the step jobs ended timed_out (5 fields each, as reap)
local function flow_ops(ops)
  local out, touched = {}, {}
  for _, op in ipairs(ops) do
    local kind, e = op[1], op[2]
    if kind == 'kv' then
      redis.call('INCR', P .. ':xkv:' .. e)
    elseif kind == 'unmark' then
      redis.call('SREM', P .. ':xpk', e)
    else
      touched[e] = true
    end
    if kind == 'step' then
      xs_set(e, op[3], op[4] .. '|' .. op[5] .. '|' .. op[6])
      if op[7] then  -- a success: its dependents have one unmet dependency less
        local xu = P .. ':xu:' .. e
        for _, d in ipairs(op[7]) do
          if redis.call('HEXISTS', xu, d) == 1 then redis.call('HINCRBY', xu, d, -1) end
        end
      end
    elseif kind == 'exec' then
      if #op[3] > 0 then redis.call('HSET', xk(e), unpack(op[3])) end
      if #op[4] > 0 then redis.call('HDEL', xk(e), unpack(op[4])) end
    elseif kind == 'started' then
      redis.call('HSET', xk(e), 'sa', NOW)
      if op[3] ~= '' then redis.call('ZADD', P .. ':xdl', op[3], e) end
    elseif kind == 'finished' then
      redis.call('HSET', xk(e), 'fa', NOW)
      redis.call('ZREM', P .. ':xdl', e)
      redis.call('ZADD', P .. ':xfin', NOW, e)
      if op[3] ~= '' then
        redis.call('ZREM', P .. ':xka:' .. op[3], e)
        redis.call('INCR', P .. ':xkv:' .. op[3])
        redis.call('SADD', P .. ':xpk', op[3])
      end
    elseif kind == 'time_out' then
      -- the running attempt ends timed_out/flow_timeout now, fenced (lease fields go)
      xs_set(e, op[3], 'timed_out|1|flow_timeout')
      local id = e .. '.' .. op[3]
      local f = redis.call('HMGET', jk(id), 'st', 'att', 'q', 'ck', 'wid', 'sa')
      if f[1] == 'running' then
        record_attempt(id, f[2], f[5], f[6],
          '["timed_out","flow_timeout",null,null,null,null,null]')
        leave_running(id, f[3], nz(f[4]))
        terminal(id, f[3], 'timed_out', 'flow_timeout', nz(f[4]), true)
        local o = #out
        out[o + 1] = id; out[o + 2] = tonumber(f[2]); out[o + 3] = 'timed_out'
        out[o + 4] = 'flow_timeout'; out[o + 5] = 'timed_out'
      end
    elseif kind == 'not_run' then
      -- a queued job (ready or in a retry backoff) leaves the ready sets, cancelled
      local id = e .. '.' .. op[3]
      local f = redis.call('HMGET', jk(id), 'st', 'q', 'pr', 'mem', 'ck')
      local released = '0'
      if f[1] then released = '1' end
      xs_set(e, op[3], 'not_run|' .. released .. '|' .. op[4])
      if f[1] == 'queued' then
        unready(id, f[2], f[3], f[4], nz(f[5]))
        count(f[2], 'queued', -1)
        terminal(id, f[2], 'cancelled', 'not_run', nz(f[5]))
      end
    elseif kind == 'cancel' then
      local id = e .. '.' .. op[3]
      if redis.call('HGET', jk(id), 'st') == 'running' then
        redis.call('HSET', jk(id), 'cr', '1')
      end
    elseif kind == 'release' then
      flow_release(e, op[3], op[4])
      xs_set(e, op[3], 'queued|1|')
    elseif kind == 'events' then
      local xe = P .. ':xe:' .. e
      redis.call('LTRIM', xe, tonumber(op[3]), -1)
      if redis.call('LLEN', xe) == 0 then redis.call('SREM', P .. ':xadv', e) end
    end
  end
  for e in pairs(touched) do
    if redis.call('EXISTS', xk(e)) == 1 then redis.call('HINCRBY', xk(e), 'v', 1) end
  end
  return out
end
