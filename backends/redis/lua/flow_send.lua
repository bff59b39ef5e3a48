-- flow_send: store a workflow event and deliver it (SupportsWorkflows.send_event), in one
-- script: Python read the waits of its name and planned each delivery
-- (queue_core.rules.flows.workflow.delivers, deliver_ops); applied only if those waits are
-- still exactly the ones read (else nothing is written: read again).
-- Events: P:ev:<name> (seq by time sent), P:evd:<name> / P:evk:<name> (seq -> data / key:
-- '' none, else 'k' .. key), P:evt ("seq|name" by time sent: prune), P:evn the counter (a
-- suspension checks no event was stored since it read them).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now (the time the deliveries were judged at), retention, name, key ('' =
--       none, else 'k' .. key), data, JSON {"w": the waits read (flat field/wait JSON
--       list of P:wn:<name>), "x": [[execution, JSON operations], ...]}, then the blobs
-- Returns: 0 when the waits changed since they were read, else 1
local name = ARGV[4]
local wn = P .. ':wn:' .. name
local H = cjson.decode(ARGV[7])
if redis.call('HLEN', wn) * 2 ~= #H.w then return 0 end
for i = 1, #H.w, 2 do
  if redis.call('HGET', wn, H.w[i]) ~= H.w[i + 1] then return 0 end
end
local seq = redis.call('INCR', P .. ':evn')
redis.call('ZADD', P .. ':ev:' .. name, NOW, seq)
redis.call('HSET', P .. ':evd:' .. name, seq, ARGV[6])
redis.call('HSET', P .. ':evk:' .. name, seq, ARGV[5])
redis.call('ZADD', P .. ':evt', NOW, seq .. '|' .. name)
ARGB = 7
for _, x in ipairs(H.x) do flow_ops(x[1], cjson.decode(x[2])) end
return 1
