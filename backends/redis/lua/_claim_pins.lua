-- Included at the end of claim.lua and peek.lua on a Redis Cluster only (`-- #cluster`):
-- the named queues that also have jobs in the storage's shared home (P:g:<queue> set, see
-- docs/backends/redis.md "Redis Cluster"), as one more element of the reply: a list, left
-- out when it would be empty.
local pinned = {}
for i = QUEUES_FROM, #ARGV do
  if redis.call('EXISTS', P .. ':g:' .. ARGV[i]) == 1 then pinned[#pinned + 1] = ARGV[i] end
end
if #pinned > 0 then out[#out + 1] = pinned end
