package keylockproxy

import (
	"sort"
	"strings"
)

// Where each command the store's scripts may send names its keys: the first
// argument, every argument, every other argument starting with the first
// (MSET), or none (PUBLISH names a channel). A command not listed is
// refused, so a script can never reach a key the shim cannot see.
var keyPositions = map[string]string{
	"GET": "first", "SET": "first", "INCR": "first", "INCRBY": "first", "DECR": "first",
	"EXISTS": "all", "DEL": "all", "UNLINK": "all", "MGET": "all", "MSET": "pairs",
	"TYPE": "first", "PEXPIRE": "first", "EXPIRE": "first", "PTTL": "first", "TTL": "first",
	"XADD": "first", "XRANGE": "first", "XREVRANGE": "first", "XDEL": "first", "XLEN": "first", "XTRIM": "first",
	"HGET": "first", "HSET": "first", "HMGET": "first", "HDEL": "first", "HGETALL": "first",
	"HKEYS": "first", "HVALS": "first", "HLEN": "first", "HINCRBY": "first", "HEXISTS": "first", "HSCAN": "first",
	"ZADD": "first", "ZREM": "first", "ZRANGE": "first", "ZRANGEBYSCORE": "first", "ZREVRANGE": "first",
	"ZREVRANGEBYSCORE": "first", "ZCOUNT": "first", "ZCARD": "first", "ZSCORE": "first", "ZMSCORE": "first",
	"ZREMRANGEBYSCORE": "first", "ZINCRBY": "first", "ZRANK": "first", "ZREVRANK": "first", "ZREMRANGEBYRANK": "first",
	"SMEMBERS": "first", "SADD": "first", "SREM": "first", "SCARD": "first", "SISMEMBER": "first", "SSCAN": "first", "SPOP": "first",
	"PUBLISH": "none",
}

// shim is one Lua statement put in front of every flagged script: it
// shadows the redis table with one whose call and pcall refuse keys outside
// KEYS[1]'s hash tag. A single local, so a script near Lua's 200-locals
// limit still compiles.
var shim = buildShim()

func buildShim() string {
	names := make([]string, 0, len(keyPositions))
	for name := range keyPositions {
		names = append(names, name)
	}
	sort.Strings(names)
	var table strings.Builder
	for _, name := range names {
		table.WriteString(name + "='" + keyPositions[name] + "',")
	}
	return `local redis = (function(r, declared) ` +
		`local function tag(k) k = tostring(k) local s = string.find(k, '{', 1, true) ` +
		`if s then local e = string.find(k, '}', s + 1, true) if e and e > s + 1 then return string.sub(k, s + 1, e - 1) end end return k end ` +
		`local want = declared[1] and tag(declared[1]) ` +
		`local positions = {` + table.String() + `} ` +
		`local function check(cmd, ...) local name = string.upper(tostring(cmd)) local how = positions[name] ` +
		`if not how then error({ err = 'KEYLOCK command ' .. name .. ' is not allowed under key locking' }) end ` +
		`local args = { ... } ` +
		`local function ok(k) if want == nil or tag(k) ~= want then error({ err = 'KEYLOCK ' .. name .. ' touches ' .. tostring(k) .. ', outside the locked hash tag ' .. tostring(want) }) end end ` +
		`if how == 'first' then ok(args[1]) elseif how == 'all' then for i = 1, #args do ok(args[i]) end ` +
		`elseif how == 'pairs' then for i = 1, #args, 2 do ok(args[i]) end end end ` +
		`return setmetatable({ call = function(cmd, ...) check(cmd, ...) return r.call(cmd, ...) end, ` +
		`pcall = function(cmd, ...) check(cmd, ...) return r.pcall(cmd, ...) end }, { __index = r }) end)(redis, KEYS)`
}
