package keys

import (
	"hash/fnv"
	"strconv"
)

// DefaultReadyShards is how many shards the ready index of a prefix has
// unless the store is configured otherwise.
const DefaultReadyShards = 8

// Listed is the string key of a session recording what the session last
// told the ready index: "<version>:<ready at>:<free>" where <ready at> is
// the epoch-millisecond time the session has work from (empty when it has
// none), <free> is 1 when a head was free to claim (else 0), followed, while
// the session holds dead-lettered heads, by ":<count>,<since>,<complete>,
// <consumers>" (the session's entry in [Ready.Dead] and [Ready.DeadCounts]:
// <since> the epoch-ms time since which it has held dead letters without a
// break), and <version>
// counts the changes of <ready at> and of the dead-letter state, starting from the time (epoch ms ×
// 1000) of the write that made the record. The index applies a session's
// update only when its version is newer than the one it holds, so updates
// that arrive out of order cannot undo a newer one. The key outlives
// clears; a lifetime that ended empty (a reclaim's collapse) and a drop
// delete it, and its shard forgets the version: the next record, counting
// from the time again, is newer than any the session had.
func (s Session) Listed() string { return s.base + "listed" }

// ReadyShard returns the shard of the ready index that lists session, out
// of shards: a stable hash (FNV-1a, 32 bits) of the session id modulo
// shards.
func ReadyShard(session string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(session))
	return int(h.Sum32() % uint32(shards))
}

// Ready names the keys and channel of one shard of a prefix's ready index.
// Each shard has a hash tag of its own, "r<shard>" (a session's tag always
// starts with '"', so no session shares it), so the shards spread over a
// cluster's nodes and a script on one shard stays in one slot.
type Ready struct {
	base string // prefix + ":{r<n>}:"
}

// ReadyFor returns the key namer of shard n of prefix's ready index.
func ReadyFor(prefix string, shard int) Ready {
	return Ready{base: prefix + ":{r" + strconv.Itoa(shard) + "}:"}
}

// Index is the zset of the shard's sessions that have work: member the
// session id (raw bytes), score the epoch-millisecond time it has work from
// (a time not after now: claimable now; a later one: when a claim or retry
// hold ends).
func (r Ready) Index() string { return r.base + "ready" }

// Versions is the hash of the newest [Session.Listed] version the shard
// applied per session (kept after the session leaves the index, so a late
// older update is still refused, until the session's lifetime collapses or
// it is dropped).
func (r Ready) Versions() string { return r.base + "ready-v" }

// Dead is the zset of the shard's sessions that hold dead-lettered heads:
// member the session id (raw bytes), score the epoch-millisecond time since
// which the session has held dead letters without a break (a session whose
// last dead letter went leaves it). Its sessions' counts are in
// [Ready.DeadCounts]. Both ride the session's versioned update (see
// [Session.Listed]), so they grow with the sessions that hold dead letters
// now, never with every session there was.
func (r Ready) Dead() string { return r.base + "dead" }

// DeadCounts is the hash of the dead-letter counts of [Ready.Dead]'s
// sessions: field the session id, value "<count>,<complete>,<consumers>"
// where <count> is how many dead-lettered heads the session holds,
// <consumers> the consumers of up to DeadScan of them, each as
// "<byte length>:<name>", sorted, and <complete> 1 when those are every
// dead letter's consumers (0: the session has more dead letters than were
// read, and may hold some of other consumers).
func (r Ready) DeadCounts() string { return r.base + "dead-n" }

// Sentinel is the shard's never-written key, declared by every script on the
// shard for the reason given at [Session.Sentinel].
func (r Ready) Sentinel() string { return r.base + "sentinel" }

// WorkChannel is the pub/sub channel (not a key) announcing that a session
// of this shard has work now; the message is the session id.
func (r Ready) WorkChannel() string { return r.base + "work" }

// ReadyShards is the global key recording how many shards the prefix's
// ready index has: every store on the prefix must use the same number.
func ReadyShards(prefix string) string { return prefix + ":ready-shards" }

// RepairLock is the global key a store holds while it repairs the ready
// index, so that one store at a time does.
func RepairLock(prefix string) string { return prefix + ":ready-repair" }

// RetentionLock is the global key a store holds for one retention pass
// interval (Store.TryRetention), so that one store at a time runs a pass.
func RetentionLock(prefix string) string { return prefix + ":retention" }

// RetentionCursor is the global string key holding where the prefix's
// retention passes go on scanning its sessions ('<node>:<scan cursor>');
// one small value per prefix.
func RetentionCursor(prefix string) string { return prefix + ":retention-cursor" }
