-- start: the bodies of attempts held ahead of free slots started, each ago ms before NOW
-- (SupportsPrefetch.start_claimed): fenced per ref, the attempt's start becomes NOW - ago
-- and its deadline and heartbeat bound count from it (as claim.lua counts them for a claim).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, then 4 per ref: job_id, attempt, lease_token, ago
-- Returns: a table per ref: 1 started, 0 not current (left as it is)
-- #include _start_refs
return start_refs(3, #ARGV - 1)
