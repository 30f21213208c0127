package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"strconv"

	"github.com/redis/rueidis"
)

// Scripts are run by EVALSHA and loaded with SCRIPT LOAD, never by EVAL.
//
// rueidis's Lua.Exec sends EVALSHA and, when the server replies NOSCRIPT,
// the whole script by EVAL. Redis 7.4 and Valkey 8 keep at most 500
// scripts that EVAL loaded and evict the oldest past that, so an
// application's own EVAL traffic on the same server would keep evicting
// the store's scripts (each eviction costs a NOSCRIPT round trip and a
// full script send). Scripts that SCRIPT LOAD loaded are never evicted.
//
// So every script call goes through a scriptLoader: the EVALSHA passes
// through; the EVAL that follows a NOSCRIPT is turned into a SCRIPT LOAD
// on the node that serves the script's first key (the one that replied
// NOSCRIPT: on a cluster each master is loaded on its first NOSCRIPT, so
// a replica promoted by a failover or a node that takes slots over is
// loaded the same way) and the same EVALSHA again. Should that EVALSHA
// still meet NOSCRIPT (the slot moved in between), the EVAL is sent after
// all: the call never fails for want of a loaded script.

// scriptLoader is a rueidis.Client for Lua.Exec whose Do turns an EVAL (or
// EVAL_RO) into SCRIPT LOAD and EVALSHA (EVALSHA_RO) on next.
type scriptLoader struct {
	rueidis.Client
	// nodes is the client that sends SCRIPT LOAD: the store's own.
	nodes rueidis.Client
	// next sends every command: the store's client, or a waitingClient
	// that adds the durability wait.
	next rueidis.Client
}

// loader returns the client to run scripts through, sending by next.
func (s *Store) loader(next rueidis.Client) rueidis.Client {
	return &scriptLoader{Client: next, nodes: s.client, next: next}
}

// Do implements rueidis.Client.
func (l *scriptLoader) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	cs := cmd.Commands()
	if len(cs) < 3 || (cs[0] != "EVAL" && cs[0] != "EVAL_RO") {
		return l.next.Do(ctx, cmd)
	}
	name, text := "EVALSHA", cs[1]
	if cs[0] == "EVAL_RO" {
		name = "EVALSHA_RO"
	}
	sum := sha1.Sum([]byte(text))
	sha := hex.EncodeToString(sum[:])
	numkeys, err := strconv.Atoi(cs[2])
	if err != nil || numkeys < 1 || 3+numkeys > len(cs) {
		return l.next.Do(ctx, cmd)
	}
	l.load(ctx, text, cs[3])
	b := l.next.B().Arbitrary(name, sha, cs[2]).Keys(cs[3 : 3+numkeys]...).Args(cs[3+numkeys:]...)
	var again rueidis.Completed
	if cmd.IsReadOnly() {
		again = b.ReadOnly()
	} else {
		again = b.Build()
	}
	res := l.next.Do(ctx, again)
	if e, ok := rueidis.IsRedisErr(res.Error()); ok && e.IsNoScript() {
		return l.next.Do(ctx, cmd)
	}
	return res
}

// load sends SCRIPT LOAD of text to the node that serves key's slot: the
// node that just replied NOSCRIPT (rueidis follows a redirect there, also
// to a node its view of the cluster does not list yet).
func (l *scriptLoader) load(ctx context.Context, text, key string) {
	c := l.nodes
	_ = c.Do(ctx, c.B().ScriptLoad().Script(text).Build().SetSlot(key)).Error()
}
