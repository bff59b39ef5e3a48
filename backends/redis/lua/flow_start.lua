-- flow_start: store a new execution (its record, steps pending, step jobs, spec) and
-- apply the plan of its admission and start (see _flow.lua).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, JSON header {"id", "fields" (flat field/value list),
--       "flow", "sh", "sid" (step ids), "ck" ('' = none), "kv" (its version as read),
--       "un" (flat idx/unmet pairs), "active" (joins the key's executions), "sup"
--       (the executions the new one supersedes, SupportsSupersede: [id, version as read,
--       JSON operations of queue_core.rules.flows.plan.supersede_ops] each, applied before
--       the new one is stored; read with no pending event), "rr" (the round_robin
--       group of its step jobs, '' = none)}, input,
--       spec JSON, JSON operations, then 16 per step job: the arguments of enqueue.lua
--       but replay_of (backends.redis.records.job_args)
-- Returns: {'retry'} when the concurrency key's version moved, {'dup'} when the id
--          exists, else {'ok'}
local H = cjson.decode(ARGV[4])
local e, ck = H.id, H.ck
if ck ~= '' and (redis.call('GET', P .. ':xkv:' .. ck) or '0') ~= H.kv then return {'retry'} end
local sup = H.sup or {}
for _, o in ipairs(sup) do
  if (redis.call('HGET', xk(o[1]), 'v') or '0') ~= o[2]
     or redis.call('LLEN', P .. ':xe:' .. o[1]) ~= 0 then return {'retry'} end
end
if redis.call('EXISTS', xk(e)) == 1 then return {'dup'} end
for _, o in ipairs(sup) do flow_ops(o[1], cjson.decode(o[3])) end
local seq = redis.call('INCR', P .. ':xseq')
redis.call('HSET', xk(e), 'in', ARGV[5], 'seq', seq, 'ca', NOW, 'v', 0, 'c.pending', #H.sid,
           unpack(H.fields))
redis.call('SET', P .. ':fs:' .. H.sh, ARGV[6], 'NX')
redis.call('INCR', P .. ':fsn:' .. H.sh)  -- executions using the spec (prune drops it at 0)
redis.call('ZADD', P .. ':xl', seq, e)
redis.call('ZADD', P .. ':xl:' .. H.flow, seq, e)
local steps, jobs = {}, {}
for i = 0, #H.sid - 1 do
  steps[#steps + 1] = i; steps[#steps + 1] = 'pending|0|'
  jobs[#jobs + 1] = i
  jobs[#jobs + 1] = flow_job(e, i, H.sid[i + 1], 7 + i * 16, H.rr)
end
call_chunked('HSET', P .. ':xs:' .. e, steps)
if #H.un > 0 then call_chunked('HSET', P .. ':xu:' .. e, H.un) end
call_chunked('HSET', P .. ':xj:' .. e, jobs)
if ck ~= '' and H.active then
  redis.call('ZADD', P .. ':xka:' .. ck, seq, e)
  redis.call('INCR', P .. ':xkv:' .. ck)
end
flow_ops(e, cjson.decode(ARGV[7]))
return {'ok'}
