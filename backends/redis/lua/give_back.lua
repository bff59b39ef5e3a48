-- give_back: held attempts (claimed ahead of free slots, their bodies never started) given
-- back unstarted (SupportsGiveBack.give_back): fenced per ref, what claim.lua's `try` did
-- is undone and the job is queued as before its claim -- the attempt number it had (no
-- attempt record: records are written at an attempt's end, and a held one never ended),
-- its lease and deadlines dropped, its start and worker those of its previous attempt
-- (none on a first attempt), its ready-set member back in its ready set at the score the
-- claim took it from (its kept place 'po' when a reap left one, else its ready time, as
-- claim.lua's promote_backoff scores it), its schedule-to-start bound indexed again, and
-- its concurrency slot (P:cr:<ck>, taken by every claim of a job with a key) freed, one
-- job parked on the key returning to its ready set as at a finish (release_slot).
-- Refused (0, nothing changed): a ref that is not current; a flow step (its execution
-- recorded it running: the worker releases it); a round_robin job (its group's turn is
-- not undone); a job with a pending cancel request (a queued job never carries one:
-- cancel.lua ends a queued job at once; the worker's release honours the request).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, then 3 per ref: job_id, attempt, lease_token
-- Returns: a table per ref: 1 given back, 0 refused
defer_counts()
local out = {}
for b = 3, #ARGV - 1, 3 do
  local id = ARGV[b + 1]
  local k = jk(id)
  local f = redis.call('HMGET', k, 'st', 'att', 'tok', 'x', 'cb', 'cr', 'q', 'pr', 'mem', 'ra',
                       'po', 'ss', 'ck', 'la', 'lw')
  if f[1] ~= 'running' or f[2] ~= ARGV[b + 2] or f[3] ~= ARGV[b + 3] or f[4] or
      f[5] == 'round_robin' or f[6] or not f[9] then
    out[#out + 1] = 0
  else
    local q, pr, m, ck = f[7], f[8], f[9], f[13]
    local att = tonumber(f[2]) - 1
    local ra = tonumber(f[10]) or NOW
    -- the previous attempt's start and worker, as its end left them in the hash: its
    -- record is the newest ('la'/'lw', else the last of the attempt list)
    local sa, wid = nil, nil
    if att > 0 then
      if f[14] then
        sa, wid = string.match(f[14], '^%d+|(%d+)|'), f[15]
      else
        local ok, rec = pcall(cjson.decode, redis.call('LINDEX', ak(id), -1) or 'null')
        if ok and type(rec) == 'table' then sa, wid = tonumber(rec[3]), rec[2] end
      end
    end
    if sa and type(wid) == 'string' then
      redis.call('HSET', k, 'st', 'queued', 'att', att, 'sa', sa, 'wid', wid)
      redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd', 'ah')
    else
      redis.call('HSET', k, 'st', 'queued', 'att', att)
      redis.call('HDEL', k, 'tok', 'le', 'dl', 'hd', 'sa', 'wid', 'ah')
    end
    zop('ZREM', RUN, id)
    count(q, 'running', -1)
    count(q, 'queued', 1)
    redis.call('ZADD', rk(q, pr), math.min(tonumber(f[11]) or ra, ra), m)
    redis.call('ZADD', pk(q), pr, pr)
    -- P:sts by queue_core.rules.leases.queued_expiry (mirrored: ready time + bound)
    if f[12] then redis.call('ZADD', STS, ra + tonumber(f[12]), id) end
    wake(q)
    if ck then release_slot(ck) end
    out[#out + 1] = 1
  end
end
flush_counts()
return out
