-- Included first by _base.lua, and alone by enqueue_one.lua (backends/redis/scripts.py
-- PRELUDES): the prefix, NOW and the retention, from ARGV[1..3].
local P = ARGV[1]
local NOW
if ARGV[2] ~= '' then
  NOW = tonumber(ARGV[2])
else
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local RET = tonumber(ARGV[3])
-- #cluster _tseq
