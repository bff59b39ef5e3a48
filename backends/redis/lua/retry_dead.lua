-- retry_dead: remove a dead-letter entry and enqueue its job again, fresh budget.
-- Mirrors queue_core.rules.outcomes.replay_job: the entry's spec as enqueued (task,
-- payload, priority, max attempts, attempt-1 lost delay 'ld', timeouts, concurrency
-- (with its behaviour and group), options, rate limit) under a new id, in the given queue
-- or the entry's, ready now, attempts 0, replay_of = the entry, and one more replay
-- counted in the options (count_replay below mirrors
-- queue_core.rules.outcomes._count_replay / replay_count; the contract suite pins the
-- text it writes).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, dead_id (as stored), new_job_id, queue ('' = the entry's
--       queue), replay_of (the dead id as the caller knows it; '' = dead_id)
-- Returns: 1, or 0 when there is no such entry (a concurrent retry took it), or -1 when
--          the entry is a flow step's (x = its execution): Python resumes the execution
--          instead (backends/redis/workflows.py retry_dead_step), or -2 when a retry
--          across homes marked it (dead_take.lua; the caller goes that way too)
local did, id = ARGV[4], ARGV[5]
local WS = '[ \t\n\r]*'
local LEAD = '^{' .. WS .. '"replays"' .. WS .. ':' .. WS .. '(%d+)' .. WS .. '([,}].*)$'

-- The options of the replay of a job with options `op` and replay_of `ro` (nil = none).
local function count_replay(op, ro)
  if not op or op == '' then
    if ro then return op end  -- replayed without a count: unknown, kept
    return '{"replays":1}'
  end
  local ok, data = pcall(cjson.decode, op)
  local text = string.match(op, '^' .. WS .. '(.*)$')
  if not ok or type(data) ~= 'table' or string.sub(text, 1, 1) ~= '{' then return op end
  local value = data['replays']
  if value == nil then
    if ro then return op end
    local rest = string.sub(text, 2)
    local closed = string.match(rest, '^' .. WS .. '(}.*)$')
    if closed then return '{"replays":1' .. closed end
    return '{"replays":1,' .. rest
  end
  local digits, tail = string.match(text, LEAD)
  if not digits or type(value) ~= 'number' or value ~= tonumber(digits) then return op end
  return '{"replays":' .. string.format('%d', value + 1) .. tail
end

local dk = P .. ':d:' .. did
local names = {'tn', 'q', 'pl', 'pr', 'ma', 'ld', 'to', 'hb', 'ss', 'ck', 'cl', 'csk', 'op', 'ro',
               'rk', 'rl', 'rw', 'cb', 'cg'}
local f = redis.call('HMGET', dk, unpack(names))
if not f[1] then return 0 end
if redis.call('HEXISTS', dk, 'x') == 1 then return -1 end
if redis.call('HEXISTS', dk, 'rtk') == 1 then return -2 end
local ro = did
if ARGV[7] and ARGV[7] ~= '' then ro = ARGV[7] end
redis.call('DEL', dk)
redis.call('ZREM', DZ, did)
redis.call('ZREM', P .. ':dt:' .. f[1], did)
local q = f[2]
if ARGV[6] ~= '' then q = ARGV[6] end
f[13] = count_replay(f[13], f[14])
local h = {'q', q, 'eq', NOW, 'att', 0, 'st', 'queued', 'ro', ro}
for i, name in ipairs(names) do
  if f[i] and name ~= 'q' and name ~= 'ro' then h[#h + 1] = name; h[#h + 1] = f[i] end
end
redis.call('HSET', jk(id), unpack(h))
index_job(id)
local ck = f[10]
if ck then redis.call('INCR', P .. ':ca:' .. ck) end
count(q, 'queued', 1)
make_ready(id, q, f[4], NOW, f[9])
-- its concurrency behaviour goes on: a round_robin job joins its key's index (_rr.lua),
-- a superseding one its key's active jobs (enqueue.lua)
if ck and f[18] == 'round_robin' then
  local base = ':' .. q .. ':' .. (f[19] or f[1])
  redis.call('ZADD', P .. ':rrj' .. base .. ':' .. ck, NOW, redis.call('HGET', jk(id), 'mem'))
  redis.call('ZADD', P .. ':rrt' .. base, 'NX', 0, ck)
  redis.call('SADD', P .. ':rrq:' .. (f[19] or f[1]), q)
elseif ck and (f[18] == 'cancel_in_progress' or f[18] == 'latest') then
  redis.call('ZADD', P .. ':sup:' .. ck, redis.call('INCR', P .. ':seq'), id)
end
return 1
