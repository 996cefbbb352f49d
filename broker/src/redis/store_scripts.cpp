#include "redis/store_scripts.hpp"

namespace fleetlink::broker::redis {

// Numbers stay the strings the broker sent (Lua's are doubles: compared with
// tonumber, never printed back, so a millisecond time is never reformatted).
// A stored value that is not a number counts as 0: a damaged record is
// overwritten, never a script error that would fail every later batch.
// Kept in step with store_rows::combine() and sqlite_row_writer.cpp.
const char* const kStoreScript = R"lua(
local op, P = ARGV[1], ARGV[2]
local FIELDS = {'s', 'r', 'j', 'k', 'e', 'a', 'st', 'ak', 'rn', 'f', 'b', 'res'}
local FINAL = 4

local function n(x) return tonumber(x) or 0 end

local function row(id)
  local v = redis.call('HMGET', P .. 'cmd:' .. id, unpack(FIELDS))
  if not v[1] then return false end
  table.insert(v, 1, id)
  return v
end

local function job_row(id, head)
  local v = redis.call('HMGET', P .. 'job:' .. id, 'c', 'f', 'b')
  if not v[1] then return false end
  local body = v[3] or ''
  if head then
    local nl = string.find(body, '\n', 1, true)
    if nl then body = string.sub(body, 1, nl - 1) end
  end
  return {id, v[1], v[2], body}
end

local function bump() return redis.call('INCR', P .. 'writes') end

-- Walks index `idx` newest first from `hi` down to `lo` (ZREVRANGEBYLEX
-- bounds), keeping what keep(id) answers, until `want` are kept or `budget`
-- entries were looked at.
local function scan(idx, hi, lo, want, budget, keep)
  local out, seen = {}, 0
  while #out < want and seen < budget do
    local chunk = math.min(budget - seen, math.max(want - #out, 100), 1000)
    local ids = redis.call('ZREVRANGEBYLEX', idx, hi, lo, 'LIMIT', 0, chunk)
    for _, id in ipairs(ids) do
      seen = seen + 1
      local r = keep(id)
      if r then
        out[#out + 1] = r
        if #out >= want then break end
      end
    end
    if #ids < chunk then break end
    hi = '(' .. ids[#ids]
  end
  return out
end

local function extras(first, fetch)
  local out = {}
  for i = first, #ARGV do out[#out + 1] = fetch(ARGV[i]) end
  return out
end

local conflicts = 0

local function write_command(a)
  local id, rig, st, job, key = a[1], a[2], n(a[3]), a[4], a[5]
  local k = P .. 'cmd:' .. id
  local cur = redis.call('HMGET', k, 's', 'r', 'a', 'st', 'ak', 'rn')
  if not cur[1] then
    if key ~= '' then
      local idem = P .. 'idem:' .. key
      if not redis.call('SET', idem, id, 'NX') and redis.call('GET', idem) ~= id then
        key = ''  -- the key names another command: this one is kept without it
        conflicts = conflicts + 1
      end
    end
    local h = {'s', a[3], 'r', rig, 'j', job, 'k', key, 'e', a[6], 'a', a[7], 'b', a[12]}
    if a[8] ~= '' then h[#h + 1] = 'st'; h[#h + 1] = a[8] end
    if a[9] ~= '' then h[#h + 1] = 'ak'; h[#h + 1] = a[9] end
    if a[10] ~= '' then h[#h + 1] = 'rn'; h[#h + 1] = a[10] end
    if a[11] ~= '' then h[#h + 1] = 'f'; h[#h + 1] = a[11] end
    redis.call('HSET', k, unpack(h))
    redis.call('ZADD', P .. 'cmds', 0, id)
    redis.call('ZADD', P .. 'rigcmds:' .. rig, 0, id)
    redis.call('ZADD', P .. 'state:' .. a[3], 0, id)
    if job ~= '' then redis.call('ZADD', P .. 'jobcmds:' .. job, 0, id) end
    if st < FINAL then
      redis.call('ZADD', P .. 'open', 0, id)
      redis.call('ZADD', P .. 'rigopen:' .. rig, 0, id)
    else
      redis.call('ZADD', P .. 'done', 0, id)
    end
  else
    -- The rank guard: an open command takes the same or a later state; a
    -- finished one takes nothing.
    local cs = n(cur[1])
    if cs < FINAL and st >= cs then
      local srig = cur[2] or rig
      local h = {'s', a[3], 'b', a[12]}
      if n(a[7]) > n(cur[3]) then h[#h + 1] = 'a'; h[#h + 1] = a[7] end
      if a[8] ~= '' and (not cur[4] or n(a[8]) > n(cur[4])) then h[#h + 1] = 'st'; h[#h + 1] = a[8] end
      if a[9] ~= '' and not cur[5] then h[#h + 1] = 'ak'; h[#h + 1] = a[9] end
      if a[10] ~= '' and not cur[6] then h[#h + 1] = 'rn'; h[#h + 1] = a[10] end
      if a[11] ~= '' then h[#h + 1] = 'f'; h[#h + 1] = a[11] end
      redis.call('HSET', k, unpack(h))
      if cur[1] ~= a[3] then
        redis.call('ZREM', P .. 'state:' .. cur[1], id)
        redis.call('ZADD', P .. 'state:' .. a[3], 0, id)
      end
      if st >= FINAL then
        redis.call('ZREM', P .. 'open', id)
        redis.call('ZREM', P .. 'rigopen:' .. srig, id)
        redis.call('ZADD', P .. 'done', 0, id)
      end
    end
  end
  -- The result: once, and only if the command ended in the state it came with.
  if a[13] == '1' and redis.call('HEXISTS', k, 'res') == 0 and n(redis.call('HGET', k, 's')) == st then
    redis.call('HSET', k, 'res', a[14])
  end
end

local function write_rig(id, first, last, body)
  local rigs = P .. 'rigs'
  local cur = redis.call('HGET', rigs, id)
  local p1 = cur and string.find(cur, ':', 1, true)
  local p2 = p1 and string.find(cur, ':', p1 + 1, true)
  if not p2 then
    redis.call('HSET', rigs, id, first .. ':' .. last .. ':' .. body)
    return
  end
  local cf, cl = string.sub(cur, 1, p1 - 1), string.sub(cur, p1 + 1, p2 - 1)
  local f = cf
  if n(cf) == 0 or (n(first) ~= 0 and n(first) < n(cf)) then f = first end
  if n(last) >= n(cl) then
    redis.call('HSET', rigs, id, f .. ':' .. last .. ':' .. body)
  else
    redis.call('HSET', rigs, id, f .. ':' .. cl .. ':' .. string.sub(cur, p2 + 1))
  end
end

local function write_job(id, created, fin, body)
  local k = P .. 'job:' .. id
  local cur = redis.call('HMGET', k, 'c', 'f')
  if not cur[2] then
    redis.call('HSET', k, 'c', created, 'f', fin, 'b', body)
    redis.call('ZADD', P .. 'jobs', 0, id)
    if fin == '1' then redis.call('ZADD', P .. 'jobsdone', n(created), id)
    else redis.call('ZADD', P .. 'jobsopen', 0, id) end
  elseif cur[2] == '0' then  -- a finished job stays as it finished
    redis.call('HSET', k, 'f', fin, 'b', body)
    if fin == '1' then
      redis.call('ZREM', P .. 'jobsopen', id)
      redis.call('ZADD', P .. 'jobsdone', n(cur[1]), id)
    end
  end
end

local function delete_command(id)
  local k = P .. 'cmd:' .. id
  local v = redis.call('HMGET', k, 's', 'r', 'j', 'k')
  redis.call('DEL', k)
  redis.call('ZREM', P .. 'cmds', id)
  redis.call('ZREM', P .. 'done', id)
  redis.call('ZREM', P .. 'open', id)
  if v[1] then redis.call('ZREM', P .. 'state:' .. v[1], id) end
  if v[2] then
    redis.call('ZREM', P .. 'rigcmds:' .. v[2], id)
    redis.call('ZREM', P .. 'rigopen:' .. v[2], id)
  end
  if v[3] and v[3] ~= '' then redis.call('ZREM', P .. 'jobcmds:' .. v[3], id) end
  if v[4] and v[4] ~= '' and redis.call('GET', P .. 'idem:' .. v[4]) == id then redis.call('DEL', P .. 'idem:' .. v[4]) end
end

if op == 'write' then
  local nc, nr, nj = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local i = 6
  for _ = 1, nc do
    write_command({unpack(ARGV, i, i + 13)})
    i = i + 14
  end
  for _ = 1, nr do
    write_rig(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
    i = i + 4
  end
  for _ = 1, nj do
    write_job(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
    i = i + 4
  end
  return {bump(), conflicts}
elseif op == 'get' then
  return extras(3, row)
elseif op == 'bykey' then
  local id = redis.call('GET', P .. 'idem:' .. ARGV[3])
  if not id then return {false} end
  return {row(id)}
elseif op == 'openof' then
  local ids = redis.call('ZRANGEBYLEX', P .. 'rigopen:' .. ARGV[3], '-', '+', 'LIMIT', 0, tonumber(ARGV[4]))
  local out = {}
  for _, id in ipairs(ids) do
    local r = row(id)
    if r then out[#out + 1] = r end
  end
  return {out, extras(5, row)}
elseif op == 'list' then
  local rig, state, job, since_key, since_ms, before = ARGV[3], ARGV[4], ARGV[5], ARGV[6], n(ARGV[7]), ARGV[8]
  local limit, budget = tonumber(ARGV[9]), tonumber(ARGV[10])
  -- The smallest of the indexes the filters name.
  local idx = P .. 'cmds'
  local best = -1
  local function consider(key)
    local c = redis.call('ZCARD', key)
    if best < 0 or c < best then idx, best = key, c end
  end
  if rig ~= '' then consider(P .. 'rigcmds:' .. rig) end
  if job ~= '' then consider(P .. 'jobcmds:' .. job) end
  if state ~= '' then consider(P .. 'state:' .. state) end
  local hi = before ~= '' and ('(' .. before) or '+'
  local lo = since_key ~= '' and ('[' .. since_key) or '-'
  local out = scan(idx, hi, lo, limit, budget, function(id)
    local r = row(id)
    if not r then return false end
    if rig ~= '' and r[3] ~= rig then return false end
    if state ~= '' and r[2] ~= state then return false end
    if job ~= '' and r[4] ~= job then return false end
    if since_ms > 0 and n(r[6]) < since_ms then return false end
    return r
  end)
  return {out, extras(11, row)}
elseif op == 'getjobs' then
  local head = ARGV[3] == '1'
  return extras(4, function(id) return job_row(id, head) end)
elseif op == 'listjobs' then
  local fin, since_ms, before = ARGV[3], n(ARGV[4]), ARGV[5]
  local limit, head, budget = tonumber(ARGV[6]), ARGV[7] == '1', tonumber(ARGV[8])
  local idx = fin == '0' and (P .. 'jobsopen') or (P .. 'jobs')
  local hi = before ~= '' and ('(' .. before) or '+'
  local out = scan(idx, hi, '-', limit, budget, function(id)
    local j = job_row(id, head)
    if not j then return false end
    if fin ~= '' and j[3] ~= fin then return false end
    if since_ms > 0 and n(j[2]) < since_ms then return false end
    return j
  end)
  return {out, extras(9, function(id) return job_row(id, false) end)}
elseif op == 'prune' then
  local age_key, age_ms, max_commands, left = ARGV[3], ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
  local gone = 0
  if age_key ~= '' and left > 0 then
    local ids = redis.call('ZRANGEBYLEX', P .. 'done', '-', '(' .. age_key, 'LIMIT', 0, left)
    for _, id in ipairs(ids) do delete_command(id) end
    gone = gone + #ids
  end
  if gone < left then
    local count = redis.call('ZCARD', P .. 'cmds')
    if count > max_commands then
      local ids = redis.call('ZRANGEBYLEX', P .. 'done', '-', '+', 'LIMIT', 0, math.min(count - max_commands, left - gone))
      for _, id in ipairs(ids) do delete_command(id) end
      gone = gone + #ids
    end
  end
  if age_ms ~= '' and gone < left then
    local ids = redis.call('ZRANGEBYSCORE', P .. 'jobsdone', '-inf', '(' .. age_ms, 'LIMIT', 0, left - gone)
    for _, id in ipairs(ids) do
      redis.call('DEL', P .. 'job:' .. id)
      redis.call('ZREM', P .. 'jobs', id)
      redis.call('ZREM', P .. 'jobsdone', id)
    end
    gone = gone + #ids
  end
  return {gone, bump()}
end
return redis.error_reply('fleetlink store script: unknown op ' .. tostring(op))
)lua";

}  // namespace fleetlink::broker::redis
