"""The Lua scripts that make every change of a Redis memory store atomic on the server.

Each script gets the namespace's four keys, which share one hash tag (so a namespace lives in
one slot of a Redis or Valkey cluster): ``KEYS[1]`` files (path -> bytes), ``KEYS[2]``
versions (path -> the version of its bytes), ``KEYS[3]`` folders (path -> "1"; the root is
implicit), ``KEYS[4]`` meta (``epoch``: a token set by the first change after the data was
made, ``seq``: the change counter, ``gen``: the token of the last change). ``ARGV[1]`` is the
change's token: 15 random hex digits, fresh for every script call.

A file's version is that token (with a suffix when one script writes several files), and a move
keeps it: a (path, version) pair names one content in any history. A change counter does not:
a restore from an older RDB or a failover to a lagging replica brings an older state back, and
the changes written next count up through the same numbers with other contents. So the search
index compares ``gen`` and the versions, never the counter, to know what changed (and edits
compare versions before they write).

A script checks everything before its first write and returns ``{status, ...}``: a refusal
writes nothing. The first check is the fleet lock's fencing number: when the caller holds a grant
of the fleet lock (``lock:`` in the launcher's config) on this same Redis, ``KEYS[5]`` is that
lock's ``…:fence`` key and the last ``ARGV`` the grant's number; a key greater than it means the
grant was superseded (its lease ran out and another launcher took the lock), and the script
answers ``{'lock_lost'}`` and changes nothing. Without ``KEYS[5]`` there is no check. The ``#!lua`` line makes Redis refuse a script up front when it is out of
memory (``maxmemory`` with ``noeviction``), instead of failing at its first write; the scripts
that only delete say ``flags=allow-oom`` (their bookkeeping writes a few bytes), so that memory
can be freed when it is full. Scripts that only read say ``flags=no-writes``.
"""

from __future__ import annotations

_COMMON = """
if KEYS[5] then
  local current = redis.call('GET', KEYS[5])
  if current and tonumber(current) > tonumber(ARGV[#ARGV]) then return {'lock_lost'} end
end
local bumped = 0
local function bump(path, version)
  if bumped == 0 then
    redis.call('HSETNX', KEYS[4], 'epoch', ARGV[1])
    redis.call('HSET', KEYS[4], 'gen', ARGV[1])
  end
  redis.call('HINCRBY', KEYS[4], 'seq', 1)
  if path then
    if not version then
      version = ARGV[1]
      if bumped > 0 then version = version .. string.format('%x', bumped) end
    end
    redis.call('HSET', KEYS[2], path, version)
  end
  bumped = bumped + 1
end
local function file_parent(path)
  local i = 0
  while true do
    i = string.find(path, '/', i + 1, true)
    if not i then return false end
    if redis.call('HEXISTS', KEYS[1], string.sub(path, 1, i - 1)) == 1 then return true end
  end
end
local function make_parents(path)
  local i = 0
  while true do
    i = string.find(path, '/', i + 1, true)
    if not i then return end
    redis.call('HSET', KEYS[3], string.sub(path, 1, i - 1), '1')
  end
end
local function kind(path)
  if redis.call('HEXISTS', KEYS[1], path) == 1 then return 'file' end
  if redis.call('HEXISTS', KEYS[3], path) == 1 then return 'dir' end
  return false
end
"""

WRITE = (
    "#!lua\n"
    + _COMMON
    + """
-- ARGV[2] name, ARGV[3] data, ARGV[4] head bytes to return of the previous value
local name = ARGV[2]
if redis.call('HEXISTS', KEYS[3], name) == 1 then return {'isdir'} end
local old = redis.call('HGET', KEYS[1], name)
redis.call('HSET', KEYS[1], name, ARGV[3])
bump(name)
if old then return {'replaced', string.sub(old, 1, tonumber(ARGV[4]))} end
return {'new'}
"""
)

CREATE = (
    "#!lua\n"
    + _COMMON
    + """
-- ARGV[2] path, ARGV[3] data
local path = ARGV[2]
if kind(path) then return {'exists'} end
if file_parent(path) then return {'notdir'} end
make_parents(path)
redis.call('HSET', KEYS[1], path, ARGV[3])
bump(path)
return {'ok'}
"""
)

REPLACE_IF = (
    "#!lua\n"
    + _COMMON
    + """
-- ARGV[2] path, ARGV[3] the version the new data was computed from, ARGV[4] data
local path = ARGV[2]
if redis.call('HEXISTS', KEYS[1], path) == 0 then return {'missing'} end
if redis.call('HGET', KEYS[2], path) ~= ARGV[3] then return {'conflict'} end
redis.call('HSET', KEYS[1], path, ARGV[4])
bump(path)
return {'ok'}
"""
)

PUT = (
    "#!lua\n"
    + _COMMON
    + """
-- ARGV[2] path, ARGV[3] data: memory copy's write of one file (its folders made)
local path = ARGV[2]
if redis.call('HEXISTS', KEYS[3], path) == 1 then return {'isdir'} end
if file_parent(path) then return {'notdir'} end
make_parents(path)
redis.call('HSET', KEYS[1], path, ARGV[3])
bump(path)
return {'ok'}
"""
)

MKDIR = (
    "#!lua\n"
    + _COMMON
    + """
-- ARGV[2] path: memory copy's empty folder
local path = ARGV[2]
if redis.call('HEXISTS', KEYS[1], path) == 1 then return {'isfile'} end
if file_parent(path) then return {'notdir'} end
make_parents(path .. '/')
bump(false)
return {'ok'}
"""
)

DELETE_FILE = (
    "#!lua flags=allow-oom\n"
    + _COMMON
    + """
-- ARGV[2] name: delete_memory
local name = ARGV[2]
if redis.call('HDEL', KEYS[1], name) == 1 then
  redis.call('HDEL', KEYS[2], name)
  bump(false)
  return {'ok'}
end
if redis.call('HEXISTS', KEYS[3], name) == 1 then return {'isdir'} end
return {'missing'}
"""
)

_UNDER = """
local function under(hash, prefix)
  local found = {}
  local n = #prefix
  for _, p in ipairs(redis.call('HKEYS', hash)) do
    if string.sub(p, 1, n) == prefix then found[#found + 1] = p end
  end
  return found
end
"""

DELETE_PATH = (
    "#!lua flags=allow-oom\n"
    + _COMMON
    + _UNDER
    + """
-- ARGV[2] path: a file, or a folder with everything in it
local path = ARGV[2]
local k = kind(path)
if not k then
  if file_parent(path) then return {'notdir'} end
  return {'missing'}
end
if k == 'file' then
  redis.call('HDEL', KEYS[1], path)
  redis.call('HDEL', KEYS[2], path)
else
  local prefix = path .. '/'
  for _, p in ipairs(under(KEYS[1], prefix)) do
    redis.call('HDEL', KEYS[1], p)
    redis.call('HDEL', KEYS[2], p)
  end
  for _, p in ipairs(under(KEYS[3], prefix)) do redis.call('HDEL', KEYS[3], p) end
  redis.call('HDEL', KEYS[3], path)
end
bump(false)
return {'ok'}
"""
)

RENAME = (
    "#!lua\n"
    + _COMMON
    + _UNDER
    + """
-- ARGV[2] old path, ARGV[3] new path: a file, or a folder with everything in it
local old, new = ARGV[2], ARGV[3]
local k = kind(old)
if not k then
  if file_parent(old) then return {'notdir-old'} end
  return {'missing'}
end
if kind(new) then return {'exists'} end
if k == 'dir' and string.sub(new, 1, #old + 1) == old .. '/' then return {'into'} end
if file_parent(new) then return {'notdir'} end
make_parents(new)
if k == 'file' then
  local data = redis.call('HGET', KEYS[1], old)
  local version = redis.call('HGET', KEYS[2], old)
  redis.call('HDEL', KEYS[1], old)
  redis.call('HDEL', KEYS[2], old)
  redis.call('HSET', KEYS[1], new, data)
  bump(new, version)
else
  local prefix = old .. '/'
  local n = #prefix
  for _, p in ipairs(under(KEYS[1], prefix)) do
    local data = redis.call('HGET', KEYS[1], p)
    local version = redis.call('HGET', KEYS[2], p)
    local moved = new .. '/' .. string.sub(p, n + 1)
    redis.call('HDEL', KEYS[1], p)
    redis.call('HDEL', KEYS[2], p)
    redis.call('HSET', KEYS[1], moved, data)
    bump(moved, version)
  end
  for _, p in ipairs(under(KEYS[3], prefix)) do
    redis.call('HDEL', KEYS[3], p)
    redis.call('HSET', KEYS[3], new .. '/' .. string.sub(p, n + 1), '1')
  end
  redis.call('HDEL', KEYS[3], old)
  redis.call('HSET', KEYS[3], new, '1')
  bump(false)
end
return {'ok'}
"""
)

LISTING = """#!lua flags=no-writes
-- ARGV[1] folder prefix ('' for the root, else 'a/b/'), ARGV[2] depth: the files
-- {path, size} and folders {path, -1} below it, hidden items (and what is in them) left out
local prefix, depth = ARGV[1], tonumber(ARGV[2])
local n = #prefix
local out = {}
local function visible(rest)
  local slashes = 0
  for part in string.gmatch(rest, '[^/]+') do
    if string.sub(part, 1, 1) == '.' then return false end
    slashes = slashes + 1
  end
  return slashes <= depth
end
for _, p in ipairs(redis.call('HKEYS', KEYS[3])) do
  if string.sub(p, 1, n) == prefix and #p > n and visible(string.sub(p, n + 1)) then
    out[#out + 1] = p
    out[#out + 1] = -1
  end
end
for _, p in ipairs(redis.call('HKEYS', KEYS[1])) do
  if string.sub(p, 1, n) == prefix and #p > n and visible(string.sub(p, n + 1)) then
    out[#out + 1] = p
    out[#out + 1] = redis.call('HSTRLEN', KEYS[1], p)
  end
end
return out
"""

FETCH = """#!lua flags=no-writes
-- ARGV[1] the most bytes returned whole, ARGV[2] head bytes otherwise, ARGV[3..] names:
-- for each name {size, bytes} (the head only when larger; size -1 when gone)
local limit, head = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for i = 3, #ARGV do
  local size = redis.call('HSTRLEN', KEYS[1], ARGV[i])
  local data = ''
  if size > limit then
    data = string.sub(redis.call('HGET', KEYS[1], ARGV[i]), 1, head)
  elseif size > 0 then
    data = redis.call('HGET', KEYS[1], ARGV[i])
  elseif redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then
    size = -1
  end
  out[#out + 1] = size
  out[#out + 1] = data
end
return out
"""

SNAPSHOT = """#!lua flags=no-writes
-- ARGV[1] path: {bytes or false, version or false, 1 when a folder}
return {redis.call('HGET', KEYS[1], ARGV[1]), redis.call('HGET', KEYS[2], ARGV[1]),
        redis.call('HEXISTS', KEYS[3], ARGV[1])}
"""
