-- list_jobs: ids of a page of jobs, newest (latest enqueued) first, optionally of one
-- state and/or queue (read only). Scans P:jobs from the newest, so a filtered page
-- costs the number of jobs scanned, not the page size (a dashboard read, not a hot path).
-- KEYS: none (derived from the prefix)
-- ARGV: prefix, now, retention, state ('' = any), queue ('' = any), offset, limit
-- Returns: the page, 2 per job: its id and its P:jobs score (the enqueue sequence: on a
--          Redis Cluster the caller merges the pages of several homes by it)
local state, q = ARGV[4], ARGV[5]
local skip, lim = tonumber(ARGV[6]), tonumber(ARGV[7])
local out = {}
if lim <= 0 then return out end
local pos, chunk = 0, 500
while true do
  local ids = redis.call('ZREVRANGE', ALL, pos, pos + chunk - 1, 'WITHSCORES')
  if #ids == 0 then return out end
  for k = 1, #ids, 2 do
    local id = ids[k]
    local ok = true
    if state ~= '' or q ~= '' then
      local f = redis.call('HMGET', jk(id), 'st', 'q')
      ok = f[1] and (state == '' or f[1] == state) and (q == '' or f[2] == q)
    end
    if ok then
      if skip > 0 then
        skip = skip - 1
      else
        out[#out + 1] = id
        out[#out + 1] = ids[k + 1]
        if #out >= 2 * lim then return out end
      end
    end
  end
  pos = pos + chunk
end
