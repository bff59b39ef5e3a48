-- Included (see _enqueue_dup.lua) after the batch: each queue's count, priority index
-- entries and wake-up token, written once per batch from queued, prios and woken.
for q, c in pairs(queued) do count(q, 'queued', c); tp_add(q, 'enqueued', c) end
for q, qp in pairs(prios) do
  local zargs = {}
  for pr in pairs(qp) do zargs[#zargs + 1] = pr; zargs[#zargs + 1] = pr end
  redis.call('ZADD', pk(q), unpack(zargs))
end
for q in pairs(woken) do wake(q) end
