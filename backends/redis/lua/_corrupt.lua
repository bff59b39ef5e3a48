-- Corrupt records (queue_core.records.corrupt), for claim.lua (_claim.lua) and _lib.lua.

-- a stored value as a message may show it: its first 40 bytes, each one outside printable
-- ASCII (or a quote or backslash) as \xNN, so the message stays valid UTF-8 text (a raw
-- byte like \x80 in an attempt record would make every later read of it fail)
local function shown(v)
  return (string.gsub(string.sub(v, 1, 40), '.', function(c)
    local b = string.byte(c)
    if b < 32 or b > 126 or b == 39 or b == 92 then return string.format('\\x%02x', b) end
  end))
end

-- mirrors queue_core.records.corrupt.problems for the fields a script reads: of the job's
-- values f (an HMGET), those at the positions of `ints` that are set but not integers
-- and those at the positions of `required` that are missing, as 'name=value' /
-- 'name missing'; an empty table when the record is sound
local function corrupt_fields(f, ints, required)
  local bad = {}
  for _, p in ipairs(ints) do
    local v = f[p[1]]
    if v and not string.match(v, '^%s*[-+]?%d+%s*$') then
      bad[#bad + 1] = p[2] .. "='" .. shown(v) .. "'"
    end
  end
  for _, p in ipairs(required) do
    if not f[p[1]] then bad[#bad + 1] = p[2] .. ' missing' end
  end
  return bad
end

-- the fields claim.lua reads of a ready job (HMGET order), the integer ones and the ones
-- it needs: a job failing corrupt_fields with these is left to corrupt.lua
local CLAIM_FIELDS = {'st', 'ss', 'ra', 'ck', 'cl', 'csk', 'tn', 'pl', 'ma', 'to', 'hb', 'op',
                      'eq', 'ro', 'att', 'x', 'xi', 'xn', 'fd', 'rk', 'rl', 'rw', 'cb', 'cg',
                      'q'}
local CLAIM_INTS = {{2, 'ss'}, {3, 'ra'}, {5, 'cl'}, {9, 'ma'}, {10, 'to'}, {11, 'hb'},
                    {13, 'eq'}, {15, 'att'}, {19, 'fd'}, {21, 'rl'}, {22, 'rw'}}
local CLAIM_NEEDED = {{7, 'tn'}, {8, 'pl'}, {9, 'ma'}, {13, 'eq'}, {15, 'att'}}

-- the job states (queue_core.records.jobs.JobState); a hash whose 'st' is none of them is
-- corrupt
local STATES = {queued = true, running = true, succeeded = true, dead = true,
                cancelled = true, skipped = true, timed_out = true}

-- whether claim.lua's HMGET f found a record at all (a missing hash reads all nil: the
-- job is gone, not corrupt)
local function claim_found(f)
  for i = 1, #CLAIM_FIELDS do
    if f[i] then return true end
  end
  return false
end

-- the fields of claim.lua's HMGET f that it cannot read ('st' included when it is no
-- state at all, or missing from a record that is there; 'q' when it names another queue
-- than q, whose ready set holds the job: its finish would move that queue's counts, and
-- this queue's running count would never drop)
local function claim_corrupt(f, q)
  local bad = corrupt_fields(f, CLAIM_INTS, CLAIM_NEEDED)
  if f[25] ~= q then
    bad[#bad + 1] = f[25] and ("q='" .. shown(f[25]) .. "' (queued in '" .. shown(q) .. "')")
      or 'q missing'
  end
  if f[1] and not STATES[f[1]] then bad[#bad + 1] = "st='" .. shown(f[1]) .. "'" end
  if not f[1] then bad[#bad + 1] = 'st missing' end
  return bad
end
