-- flow_apply: apply decisions taken in Python (see _flow.lua) if nothing changed since
-- they were read.
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, JSON {"cas": [[kind, name, version], ...], "ops": [...]}
-- Returns: {0} when a version moved (nothing written: read again and retry), else
--          {1, timed-out step jobs (5 fields each, as reap)}
local A = cjson.decode(ARGV[4])
if not flow_check(A.cas) then return {0} end
return {1, flow_ops(A.ops)}
