-- Included (see _enqueue_dup.lua) for each job the batch queues, in queue q at priority
-- pr, ready at ra: noted in the host's queued, prios and woken for _enqueue_flush.lua.
queued[q] = (queued[q] or 0) + 1
local qp = prios[q]
if not qp then qp = {}; prios[q] = qp end
qp[pr] = true
if ra <= NOW then woken[q] = true end
