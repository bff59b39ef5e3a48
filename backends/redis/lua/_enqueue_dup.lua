-- Included where enqueue.lua and enqueue_plain.lua say `-- #include _enqueue_dup`
-- (backends/redis/scripts.py expands it when the script is loaded; a function would cost
-- every call its closure): the batch's all-or-nothing duplicate check. Reads S
-- (arguments per job, the id first) and n (jobs); returns {'dup', id} for the first id
-- that the batch repeats or that is already stored, before anything is written.
local seen = {}
for i = 0, n - 1 do
  local id = ARGV[4 + i * S]
  if seen[id] or redis.call('EXISTS', jk(id)) == 1 then return {'dup', id} end
  seen[id] = true
end
