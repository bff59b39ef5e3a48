-- Included by _now.lua on a Redis Cluster only (`-- #cluster`, backends/redis/scripts.py),
-- which also rewrites every draw of P:seq (`redis.call('INCR', P .. ':seq')`, and the
-- INCR/INCRBY of SEQ in the enqueue scripts) into tseq(n). A cluster has one P:seq per
-- home (hash tag), so the numbers of two homes must compare like the order in which the
-- jobs were stored (claim merges the ready sets of several homes, list_jobs their job
-- indexes): they follow the server's clock in microseconds, and within a home each draw
-- stays above the last. tseq(n) reserves n numbers and returns the highest (as INCRBY).
local function tseq(n)
  local t = redis.call('TIME')
  local top = tonumber(redis.call('GET', P .. ':seq') or '0') + n
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  if us > top then top = us end
  redis.call('SET', P .. ':seq', string.format('%d', top))
  return top
end
