-- flow_start: store a new execution (its record, pending steps, step jobs, spec) and
-- apply its admission and start, as decided in Python (see _flow.lua).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, JSON header {"id", "cas", "fields" (flat field/value
--       list), "flow", "sh", "n" (steps), "sid" (step ids), "ck" ('' = none), "un" (flat idx/unmet
--       pairs), "active"
--       (joins the key's executions), "ops"}, input, spec JSON, then
--       16 per step job: the arguments of enqueue.lua but replay_of (flows.py _job_args)
-- Returns: {'retry'} when the concurrency key's version moved, {'dup'} when the id
--          exists, else {'ok'}
local H = cjson.decode(ARGV[4])
if not flow_check(H.cas) then return {'retry'} end
local e = H.id
if redis.call('EXISTS', xk(e)) == 1 then return {'dup'} end
local seq = redis.call('INCR', P .. ':xseq')
local h = {'in', ARGV[5], 'seq', seq, 'ca', NOW, 'v', 0}
for _, v in ipairs(H.fields) do h[#h + 1] = v end
redis.call('HSET', xk(e), unpack(h))
redis.call('SET', P .. ':fs:' .. H.sh, ARGV[6], 'NX')
redis.call('INCR', P .. ':fsn:' .. H.sh)  -- executions using the spec (prune drops it at 0)
redis.call('ZADD', P .. ':xl', seq, e)
redis.call('ZADD', P .. ':xl:' .. H.flow, seq, e)
local steps, jobs = {}, {}
local S = 16
for i = 0, H.n - 1 do
  steps[#steps + 1] = i
  steps[#steps + 1] = 'pending|0|'
  local b = 6 + i * S
  -- id, task, queue, payload, priority, run_at, delay, max_attempts, lost_delay,
  -- timeout, heartbeat, schedule_to_start, conc key, conc limit, conc skip, options
  local t = {q = ARGV[b + 3], pr = ARGV[b + 5], ra = ARGV[b + 6], dms = ARGV[b + 7],
             ss = ARGV[b + 12], ck = ARGV[b + 13]}
  local jh = {'tn', ARGV[b + 2], 'q', ARGV[b + 3], 'pl', ARGV[b + 4], 'pr', ARGV[b + 5],
              'ma', ARGV[b + 8], 'ld', ARGV[b + 9], 'csk', ARGV[b + 15],
              'x', e, 'xi', i, 'xn', H.sid[i + 1]}
  local OPT = {'to', 'hb', 'ss', 'ck', 'cl'}
  for j = 1, 5 do
    local v = ARGV[b + 9 + j]
    if v ~= '' then jh[#jh + 1] = OPT[j]; jh[#jh + 1] = v end
  end
  if ARGV[b + 16] ~= '' then jh[#jh + 1] = 'op'; jh[#jh + 1] = ARGV[b + 16] end
  t.h = jh
  jobs[#jobs + 1] = i
  jobs[#jobs + 1] = cmsgpack.pack(t)
end
call_chunked('HSET', P .. ':xs:' .. e, steps)
redis.call('HSET', xk(e), 'c.pending', H.n)
-- P:xu:<e>: step idx -> dependencies not succeeded yet (steps with dependencies)
if #H.un > 0 then call_chunked('HSET', P .. ':xu:' .. e, H.un) end
call_chunked('HSET', P .. ':xj:' .. e, jobs)
if H.ck ~= '' and H.active then
  redis.call('ZADD', P .. ':xka:' .. H.ck, seq, e)
  redis.call('INCR', P .. ':xkv:' .. H.ck)
end
flow_ops(H.ops)
return {'ok'}
