-- The pauses (P:paused, field '<kind>:<name>' -> since; backends/redis/pauses.py), read
-- with one HLEN while nothing is paused: PQ the paused queues, PT / PF the paused tasks
-- / flows and PH their P:paused fields (the suffixes of their P:held:<field> zsets of
-- jobs moved aside); all nil while nothing is paused, PT also while only queues are.
-- On a Redis Cluster the caller passes them as the last argument (_paused_argv.lua): the
-- pauses live in the shared home, and a queue's home is another slot. PV is then the
-- pause version read with them (nil when read here).
-- Included (inline, no closure) by claim.lua, next_ready.lua and count_pending.lua.
local PQ, PT, PF, PH, PV = nil, nil, nil, nil, nil
local pfields = nil
-- #cluster _paused_argv
if not pfields and redis.call('HLEN', P .. ':paused') > 0 then
  pfields = redis.call('HKEYS', P .. ':paused')
end
if pfields and #pfields > 0 then
  PQ = {}
  for _, field in ipairs(pfields) do
    local kind, name = string.match(field, '^(%l+):(.*)$')
    if kind == 'queue' then
      PQ[name] = true
    else
      if not PT then PT, PF, PH = {}, {}, {} end
      PH[#PH + 1] = field
      if kind == 'task' then PT[name] = true else PF[name] = true end
    end
  end
end
