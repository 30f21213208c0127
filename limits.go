package a2redis

// The limits of one call: what the store accepts, checked before anything is
// sent (a request past one fails with ErrInvalidArgument and writes
// nothing). They are chosen so that every script finishes with the largest
// input it accepts on every server the store runs on — Redis 7 and Valkey,
// Redis Cluster, miniredis — and none holds the server long: one call at
// these sizes runs in at most about 20 ms on a session of a million heads
// (measured by TestScale in redisstore), Lua unpacks at most ~8,000 values
// on Redis (~5,100 in miniredis's gopher-lua), and a script that fails
// after its first write leaves that write in place.
// docs/limits.md lists them with the tests that run each at the limit and
// one past it.
const (
	// MaxBatch is the most events one Append or CompleteAttempt carries,
	// and the most heads one claim takes or one renewal, completion or
	// release names (and the most fields of a presence write, writes of a
	// snapshot call, heads a claim excludes). Config.MaxBatch may lower it.
	MaxBatch = 500
	// MaxTargetsPerEvent is the most targets (event-cursor and lane
	// targets together) one event names.
	MaxTargetsPerEvent = 1_000
	// MaxBatchTargets is the most targets the events of one batch name
	// together: each is a head a script writes (an append of coalesced
	// batches is held to it as well).
	MaxBatchTargets = 1_000
	// MaxNameBytes is the longest session id, consumer, holder, lane, log
	// lane, event type, event id or reducer name, in bytes.
	MaxNameBytes = 64 << 10
	// MaxPayloadBytes is the largest event payload (and snapshot state and
	// presence value), in bytes: far below a server's default
	// proto-max-bulk-len (512 MB), the largest value one command may carry.
	MaxPayloadBytes = 4 << 20
	// MaxBatchBytes bounds one batch's payloads, types, ids and target
	// names together, in bytes: what one script call carries.
	MaxBatchBytes = 16 << 20
)
