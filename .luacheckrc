-- luacheck configuration for lua/: the scripts run in Redis's Lua 5.1, where these are given.
-- Lint them as Redis runs them, each with its includes: python -m redis_work_queue.loader --lint
std = "lua51"
read_globals = {"KEYS", "ARGV", "redis", "cjson", "unpack"}
