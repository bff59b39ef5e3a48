-- Included by _paused.lua on a Redis Cluster only (`-- #cluster`): the last argument is
-- '*' in the shared home (P:paused is read there, same slot), else the pauses as the
-- client read them from the shared home (backends/redis/pauses.py, pause_arg): the pause
-- version {P}:pv, then each P:paused field, separated by newlines. It is removed from
-- ARGV, so the script reads its queues as on a standalone server.
local pa = table.remove(ARGV)
if pa ~= '*' then
  pfields = {}
  for item in string.gmatch(pa, '[^\n]+') do pfields[#pfields + 1] = item end
  PV = tonumber(table.remove(pfields, 1))
end
