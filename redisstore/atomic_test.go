package redisstore_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/internal/rows"
	"github.com/a2redis/a2redis/internal/scripts"
	"github.com/a2redis/a2redis/internal/workerreg"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// faultClient wraps a store's client: the first time the store runs the
// target script, it plants a fault (a key of the wrong type, or a value
// that does not decode) under one of the keys the script reads, copies
// every key of the prefix, lets the script run, and copies them again.
type faultClient struct {
	rueidis.Client
	shas   map[string]bool // the target script's, with and without shebang
	plant  func(ctx context.Context, c rueidis.Client) error
	prefix string

	mu            sync.Mutex
	fired         bool
	err           error // the script's error
	before, after map[string]string
	plantErr      error
}

func newFaultClient(c rueidis.Client, script, prefix string, plant func(context.Context, rueidis.Client) error) *faultClient {
	src := scripts.All()[script].Source
	shas := map[string]bool{}
	for _, body := range []string{src, scripts.KeyLockingShebang + "\n" + src, scripts.ReadOnlyKeyLockingShebang + "\n" + src} {
		sum := sha1.Sum([]byte(body))
		shas[hex.EncodeToString(sum[:])] = true
	}
	return &faultClient{Client: c, shas: shas, plant: plant, prefix: prefix}
}

func (f *faultClient) targets(cmd rueidis.Completed) bool {
	parts := cmd.Commands()
	if len(parts) < 2 {
		return false
	}
	switch strings.ToUpper(parts[0]) {
	case "EVALSHA":
		return f.shas[parts[1]]
	case "EVAL":
		sum := sha1.Sum([]byte(parts[1]))
		return f.shas[hex.EncodeToString(sum[:])]
	}
	return false
}

func (f *faultClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	f.mu.Lock()
	if f.fired || !f.targets(cmd) {
		f.mu.Unlock()
		return f.Client.Do(ctx, cmd)
	}
	defer f.mu.Unlock()
	if err := f.plant(ctx, f.Client); err != nil {
		f.plantErr = err
	}
	before, err := copyKeys(ctx, f.Client, f.prefix)
	if err != nil {
		f.plantErr = err
	}
	res := f.Client.Do(ctx, cmd)
	if err := res.Error(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return res // rueidis sends EVAL next: that is the run to watch
	}
	after, err := copyKeys(ctx, f.Client, f.prefix)
	if err != nil {
		f.plantErr = err
	}
	f.fired, f.err, f.before, f.after = true, res.Error(), before, after
	return res
}

func (f *faultClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	for _, cmd := range cmds {
		if f.targets(cmd) {
			out := make([]rueidis.RedisResult, len(cmds))
			for i, c := range cmds {
				out[i] = f.Do(ctx, c)
			}
			return out
		}
	}
	return f.Client.DoMulti(ctx, cmds...)
}

// copyKeys reads every key under prefix, on every node: its type, TTL and
// content (the content by type, since miniredis's DUMP serializes strings
// only; on a redis-server the DUMP too).
func copyKeys(ctx context.Context, c rueidis.Client, prefix string) (map[string]string, error) {
	var all []string
	for _, node := range c.Nodes() {
		cursor := uint64(0)
		for {
			entry, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+":*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				return nil, err
			}
			all = append(all, entry.Elements...)
			cursor = entry.Cursor
			if cursor == 0 {
				break
			}
		}
	}
	out := map[string]string{}
	for _, key := range all {
		if _, done := out[key]; done {
			continue
		}
		kind, err := c.Do(ctx, c.B().Type().Key(key).Build()).ToString()
		if err != nil {
			return nil, err
		}
		var content any
		switch kind {
		case "string":
			content, err = c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
		case "hash":
			content, err = c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
		case "zset":
			content, err = c.Do(ctx, c.B().Zrange().Key(key).Min("0").Max("-1").Withscores().Build()).AsZScores()
		case "set":
			var members []string
			members, err = c.Do(ctx, c.B().Smembers().Key(key).Build()).AsStrSlice()
			sort.Strings(members)
			content = members
		case "stream":
			content, err = c.Do(ctx, c.B().Xrange().Key(key).Start("-").End("+").Build()).AsXRange()
		default:
			content = kind
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, key, err)
		}
		pttl, err := c.Do(ctx, c.B().Pttl().Key(key).Build()).AsInt64()
		if err != nil {
			return nil, err
		}
		if pttl > 0 {
			pttl = 1 // present; its exact value moves with time
		}
		encoding, _ := c.Do(ctx, c.B().ObjectEncoding().Key(key).Build()).ToString()
		dump := "(" + encoding + ")"
		if d, err := c.Do(ctx, c.B().Dump().Key(key).Build()).ToString(); err == nil && !(kind == "hash" && encoding == "hashtable") {
			// A hashtable's DUMP lists its fields in table order, which
			// Valkey 8 may change on a read (its hashtable rehashes
			// incrementally): the content and the encoding say it all.
			dump = hex.EncodeToString([]byte(d))
		}
		text, _ := json.Marshal(content)
		out[key] = fmt.Sprintf("%s ttl=%d %s dump=%s", kind, pttl, text, dump)
	}
	return out, nil
}

// wrongType replaces key with one of another type: a string, or a hash
// for a string key.
func wrongType(key string, asHash bool) func(context.Context, rueidis.Client) error {
	return func(ctx context.Context, c rueidis.Client) error {
		if err := c.Do(ctx, c.B().Del().Key(key).Build()).Error(); err != nil {
			return err
		}
		if asHash {
			return c.Do(ctx, c.B().Hset().Key(key).FieldValue().FieldValue("planted", "fault").Build()).Error()
		}
		return c.Do(ctx, c.B().Set().Key(key).Value("planted fault").Build()).Error()
	}
}

// badJSON sets a string key to text that does not decode.
func badJSON(key string) func(context.Context, rueidis.Client) error {
	return func(ctx context.Context, c rueidis.Client) error {
		return c.Do(ctx, c.B().Set().Key(key).Value("{not json").Build()).Error()
	}
}

// faultCase makes one script fail part-way: setup brings the session to
// where op runs the script; plant (run just before the script, once)
// breaks a key the script reads.
type faultCase struct {
	script  string
	general bool // the general scripts only (scripts.SetGeneralOnly)
	what    string
	plant   func(k keys.Session, r keys.Ready) func(context.Context, rueidis.Client) error
	op      func(ctx context.Context, t *testing.T, s *redisstore.Store) error
	// realOnly: the script does nothing on miniredis before the planted
	// key is read (compact_log stops where miniredis cannot DUMP).
	realOnly bool
}

const faultSession = "s"

// prefixOf is the key prefix of a session's keys.
func prefixOf(k keys.Session) string {
	return strings.TrimSuffix(k.Base(), ":{\""+faultSession+"\"}:")
}

func event(targets ...a2redis.Target) a2redis.Event {
	return a2redis.Event{Type: "t", Payload: []byte(`{"n":1}`), Targets: targets}
}

// scheduled is e scheduled d from now (Event.NotBefore).
func scheduled(e a2redis.Event, d time.Duration) a2redis.Event {
	e.NotBefore = time.Now().Add(d)
	return e
}

// claimed appends one event for consumer c (on lane, if set) and claims it.
func claimed(ctx context.Context, t *testing.T, s *redisstore.Store, lane string) a2redis.HeadEvent {
	t.Helper()
	_, err := s.Append(ctx, faultSession, []a2redis.Event{event(a2redis.Target{Consumer: "c", Lane: lane})}, redisstore.AppendOptions{})
	require.NoError(t, err)
	cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: faultSession, Holder: "w", TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, cl.Heads, 1)
	return cl.Heads[0]
}

func faultCases() []faultCase {
	heads := func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
		return wrongType(k.Heads(0), false)
	}
	cursors := func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
		return wrongType(k.Cursors(), false)
	}
	typed := func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
		return badJSON(k.Typed())
	}
	appendOp := func(events ...a2redis.Event) func(context.Context, *testing.T, *redisstore.Store) error {
		return func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.Append(ctx, faultSession, events, redisstore.AppendOptions{})
			return err
		}
	}
	claimOp := func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
		_, err := s.Append(ctx, faultSession, []a2redis.Event{event(a2redis.Target{Consumer: "c"})}, redisstore.AppendOptions{})
		require.NoError(t, err)
		_, err = s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: faultSession, Holder: "w", TTL: time.Minute})
		return err
	}
	completeOp := func(lane string) func(context.Context, *testing.T, *redisstore.Store) error {
		return func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			h := claimed(ctx, t, s, lane)
			_, err := s.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: faultSession, Attempts: []redisstore.Attempt{redisstore.AttemptOf(h)}})
			return err
		}
	}
	completeOneOp := func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
		h := claimed(ctx, t, s, "")
		_, err := s.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: faultSession, Head: h.Ref(), Attempt: h.Attempts})
		return err
	}
	deadLettered := func(ctx context.Context, t *testing.T, s *redisstore.Store) a2redis.HeadEvent {
		h := claimed(ctx, t, s, "")
		_, err := s.FailAttempt(ctx, redisstore.FailRequest{Session: faultSession, Head: h.Ref(), Attempt: h.Attempts, Error: "x", MaxFailures: 1})
		require.NoError(t, err)
		return h
	}
	deadLetterOneOp := func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
		deadLettered(ctx, t, s)
		return nil
	}
	// deadLetterPastPinOp: deadLetterOneOp in a session past
	// rows.ChunkPinFrom events, whose head chunk is pinned, so read by the
	// rebuild (a smaller session's is not).
	deadLetterPastPinOp := func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
		plain := make([]a2redis.Event, rows.ChunkPinFrom)
		for i := range plain {
			plain[i] = event()
		}
		_, err := s.Append(ctx, faultSession, plain, redisstore.AppendOptions{})
		require.NoError(t, err)
		deadLettered(ctx, t, s)
		return nil
	}
	logged := a2redis.Consumer{Name: "g", Log: &a2redis.LogSpec{Lane: "log", Types: []string{"t"}, Backfill: true}}
	// completeAndClaimNext: a head of lane (or of the log consumer, with
	// log) completed with its cursor's next head claimed in the same call.
	completeAndClaimNext := func(log bool) func(context.Context, *testing.T, *redisstore.Store) error {
		return func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			var served []a2redis.Consumer
			batch := []a2redis.Event{event(a2redis.Target{Consumer: "c", Lane: "x"}), event(a2redis.Target{Consumer: "c", Lane: "x"})}
			if log {
				served, batch = []a2redis.Consumer{logged}, []a2redis.Event{event(), event()}
			}
			_, err := s.Append(ctx, faultSession, batch, redisstore.AppendOptions{Consumers: served})
			require.NoError(t, err)
			cl, err := s.ClaimAvailable(ctx, redisstore.ClaimRequest{Session: faultSession, Holder: "w", TTL: time.Minute, Consumers: served, Limit: 1})
			require.NoError(t, err)
			require.Len(t, cl.Heads, 1)
			h := cl.Heads[0]
			_, err = s.CompleteAndClaim(ctx, redisstore.CompleteAttemptsRequest{Session: faultSession, Attempts: []redisstore.Attempt{redisstore.AttemptOf(h)}, Consumers: served},
				redisstore.NextClaim{Holder: "w", TTL: time.Minute})
			return err
		}
	}
	logKey := func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
		return wrongType(k.Log(), true)
	}
	return []faultCase{
		{script: "complete_fast", what: "a log cursor's type index is a hash (read finding its next head)", op: completeAndClaimNext(true),
			plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
				return wrongType(k.Type("t"), true)
			}},
		{script: "complete_fast", what: "the log is a hash (read for the lone next head's entry)", plant: logKey, op: completeAndClaimNext(true)},
		{script: "complete_fast", what: "the log is a hash (read for a lane's lone next head's entry)", plant: logKey, op: completeAndClaimNext(false)},
		{script: "complete_many", general: true, what: "the log is a hash (read for the lone next head's entry)", plant: logKey, op: completeAndClaimNext(true)},
		{script: "append_one", what: "typed registry does not decode", plant: typed, op: appendOp(event())},
		{script: "append_targeted", what: "typed registry does not decode", plant: typed, op: appendOp(event(a2redis.Target{Consumer: "c"}))},
		{script: "append_plain", what: "typed registry does not decode", plant: typed, op: appendOp(event(), event(a2redis.Target{Consumer: "c"}))},
		{script: "append", what: "cursors hash is a string (read planning the lane target)", plant: cursors, op: appendOp(event(a2redis.Target{Consumer: "c", Lane: "x"}))},
		{script: "append", general: true, what: "typed registry does not decode", plant: typed, op: appendOp(event(a2redis.Target{Consumer: "c"}))},
		{script: "append", what: "cursors hash is a string (read planning a scheduled lane target)", plant: cursors,
			op: appendOp(scheduled(event(a2redis.Target{Consumer: "c", Lane: "x"}), time.Hour))},
		{script: "complete_many", what: "heads chunk is a string (complete_fast handed over a lane whose next head is scheduled)", plant: heads,
			op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
				h := claimed(ctx, t, s, "x")
				_, err := s.Append(ctx, faultSession, []a2redis.Event{scheduled(event(a2redis.Target{Consumer: "c", Lane: "x"}), time.Hour)}, redisstore.AppendOptions{})
				require.NoError(t, err)
				_, err = s.CompleteAttempts(ctx, redisstore.CompleteAttemptsRequest{Session: faultSession, Attempts: []redisstore.Attempt{redisstore.AttemptOf(h)}})
				return err
			}},
		{script: "cancel", what: "heads chunk is a string (read after finding the head)", plant: heads, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			h := claimed(ctx, t, s, "x")
			_, err := s.Cancel(ctx, redisstore.CancelRequest{Session: faultSession, Consumer: "c", Lane: "x", Index: h.Index})
			return err
		}},
		{script: "claim_fast", what: "heads chunk is a string (read after the free-head scan)", plant: heads, op: claimOp},
		{script: "claim", general: true, what: "heads chunk is a string (read after the free-head scan)", plant: heads, op: claimOp},
		{script: "complete_fast", what: "heads chunk is a string", plant: heads, op: completeOp("")},
		{script: "complete_many", general: true, what: "heads chunk is a string", plant: heads, op: completeOp("x")},
		{script: "complete_event", general: true, what: "heads chunk is a string", plant: heads, op: completeOneOp},
		{script: "complete", what: "cursors hash is a string (read planning a returned event's lane target)", plant: cursors,
			op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
				h := claimed(ctx, t, s, "")
				_, err := s.CompleteAttempt(ctx, redisstore.CompleteRequest{Session: faultSession, Head: h.Ref(), Attempt: h.Attempts,
					Events: []a2redis.Event{event(a2redis.Target{Consumer: "d", Lane: "y"})}})
				return err
			}},
		{script: "fail", what: "heads chunk is a string", plant: heads, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			h := claimed(ctx, t, s, "")
			_, err := s.FailAttempt(ctx, redisstore.FailRequest{Session: faultSession, Head: h.Ref(), Attempt: h.Attempts, Error: "x", MaxFailures: 5})
			return err
		}},
		{script: "renew", what: "heads chunk is a string", plant: heads, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			h := claimed(ctx, t, s, "")
			_, err := s.RenewClaims(ctx, redisstore.RenewRequest{Session: faultSession, Holder: "w", TTL: time.Minute,
				Claims: []redisstore.Attempt{redisstore.AttemptOf(h)}})
			return err
		}},
		{script: "release", what: "heads chunk is a string", plant: heads, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			h := claimed(ctx, t, s, "")
			_, err := s.Release(ctx, redisstore.ReleaseRequest{Session: faultSession, Attempts: []redisstore.Attempt{redisstore.AttemptOf(h)}})
			return err
		}},
		{script: "redrive", what: "heads chunk is a string (read to skip the head)", plant: heads, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			h := deadLettered(ctx, t, s)
			_, err := s.Redrive(ctx, redisstore.RedriveRequest{Session: faultSession, Consumer: "c", Index: h.Index, Action: redisstore.Skip})
			return err
		}},
		{script: "clear", what: "heads chunk is a string (read to fence the clear's cause)", plant: heads, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			h := claimed(ctx, t, s, "")
			_, err := s.Clear(ctx, faultSession, redisstore.ClearOptions{Cause: &a2redis.Cause{Consumer: "c", Index: h.Index, Attempt: h.Attempts}})
			return err
		}},
		{script: "reclaim", what: "sweep record is a hash", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(k.Sweep(), true)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.Append(ctx, faultSession, []a2redis.Event{event(), event()}, redisstore.AppendOptions{})
			require.NoError(t, err)
			_, err = s.Clear(ctx, faultSession, redisstore.ClearOptions{})
			require.NoError(t, err)
			_, err = s.ReclaimPage(ctx, faultSession)
			return err
		}},
		{script: "drop", what: "snapshot registry is a string (popped before the last deletes)", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(k.SnapReducers(), false)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.Append(ctx, faultSession, []a2redis.Event{event(), event()}, redisstore.AppendOptions{})
			require.NoError(t, err)
			_, err = s.Drop(ctx, faultSession)
			return err
		}},
		{script: "trim", what: "snapshot registry is a string (read for the reducers' snapshots)", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(k.SnapReducers(), false)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.Append(ctx, faultSession, []a2redis.Event{event(), event()}, redisstore.AppendOptions{})
			require.NoError(t, err)
			_, err = s.Trim(ctx, faultSession, redisstore.TrimRequest{})
			return err
		}},
		{script: "ready_forget", what: "the shard's versions hash is a string", plant: func(_ keys.Session, r keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(r.Versions(), false)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.Append(ctx, faultSession, []a2redis.Event{event(a2redis.Target{Consumer: "c"})}, redisstore.AppendOptions{})
			require.NoError(t, err)
			_, err = s.Drop(ctx, faultSession)
			return err
		}},
		// (A completion rebuilds the session itself: a dead letter settles
		// it, and the store runs compact_log after.)
		{script: "compact_log", what: "the log is a hash (XLEN before the rebuild)", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(k.Log(), true)
		}, op: deadLetterOneOp},
		{script: "compact_log", what: "the head chunk is a string (HEXISTS before the first write)", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(k.Heads(0), false)
		}, op: deadLetterPastPinOp, realOnly: true},
		{script: "index_type", what: "typed registry does not decode", plant: typed, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.Append(ctx, faultSession, []a2redis.Event{event(), event()}, redisstore.AppendOptions{})
			require.NoError(t, err)
			_, err = s.WakeLog(ctx, faultSession, logged)
			return err
		}},
		{script: "wake_log", what: "cursors hash is a string", plant: cursors, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.WakeLog(ctx, faultSession, a2redis.Consumer{Name: "g", Log: &a2redis.LogSpec{Lane: "log"}})
			return err
		}},
		{script: "put_snapshots", what: "pins hash is a string (read after the pinned rows)", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(k.Pins(), false)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			h := claimed(ctx, t, s, "")
			return s.PutSnapshots(ctx, faultSession, "r", []redisstore.SnapshotWrite{{Index: h.Index, State: []byte(`{}`), Pins: []a2redis.HeadRef{h.Ref()}}})
		}},
		{script: "presence_set", what: "presence hash is a string", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(k.Presence(), false)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.PresenceSet(ctx, faultSession, redisstore.PresenceWrite{Participant: "p", Values: map[string]json.RawMessage{"f": []byte(`1`)}, Seen: 1, At: time.Now(), TTL: time.Minute})
			return err
		}},
		{script: "presence_prune", what: "presence hash is a string", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(k.Presence(), false)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.PresencePrune(ctx, faultSession, []redisstore.PresenceField{{Participant: "p", Field: "f"}})
			return err
		}},
		{script: "ready_index", what: "the shard's versions hash is a string", plant: func(_ keys.Session, r keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(r.Versions(), false)
		}, op: appendOp(event(a2redis.Target{Consumer: "c"}))},
		{script: "worker_beat", what: "the worker listing is a string", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(keys.Workers(prefixOf(k)), false)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			return workerreg.Of(s).Register(ctx, redisstore.WorkerInfo{ID: "w1", Host: "h", PID: 1}, time.Minute)
		}},
		{script: "consumers_put", what: "the consumer registry does not decode", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return badJSON(keys.Consumers(prefixOf(k)))
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			return s.AddConsumers(ctx, a2redis.Consumer{Name: "added"})
		}},
		{script: "consumers_put", what: "the consumer registry is a hash", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(keys.Consumers(prefixOf(k)), true)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			return s.AddConsumers(ctx, a2redis.Consumer{Name: "c"})
		}},
		{script: "rate_take", what: "the rate limiter is a hash", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(keys.Rate(prefixOf(k), "c"), true)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.TakeStarts(ctx, "c", redisstore.RateLimit{Starts: 5, Per: time.Second}, 2)
			return err
		}},
		// The read-only scripts (--@readonly) write nothing whatever fails.
		{script: "cursors", what: "cursors hash is a string", plant: cursors, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			claimed(ctx, t, s, "x")
			_, err := s.CursorsPage(ctx, faultSession, redisstore.PageRequest{})
			return err
		}},
		{script: "dead_letters", what: "heads chunk is a string", plant: heads, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			deadLettered(ctx, t, s)
			_, err := s.DeadLettersPage(ctx, faultSession, redisstore.PageRequest{})
			return err
		}},
		{script: "read_state", what: "the snapshot head is a hash", plant: func(k keys.Session, _ keys.Ready) func(context.Context, rueidis.Client) error {
			return wrongType(k.Snap("r"), true)
		}, op: func(ctx context.Context, t *testing.T, s *redisstore.Store) error {
			_, err := s.Append(ctx, faultSession, []a2redis.Event{event()}, redisstore.AppendOptions{})
			require.NoError(t, err)
			_, err = s.ReadState(ctx, faultSession, "r", redisstore.ReadStateOptions{})
			return err
		}},
	}
}

// TestScriptsWriteNothingWhenTheyFail: every script, made to fail part-way
// (a key it reads planted with the wrong type or a value that does not
// decode, just before it runs), errors with every key of the prefix as it
// was (type, content, TTL, DUMP), on every target: everything that can
// fail runs before the first write. ready_sync, which the store runs only on a lost reply or a
// stale listing, is run directly.
func TestScriptsWriteNothingWhenTheyFail(t *testing.T) {
	covered := map[string]bool{}
	for _, target := range redistest.Targets {
		t.Run(target.Name, func(t *testing.T) {
			client := target.Client(t)
			for n, c := range faultCases() {
				name := fmt.Sprintf("%s/%d", c.script, n)
				t.Run(name, func(t *testing.T) {
					if c.realOnly && target.Name == "miniredis" {
						t.Skip("the script stops before the planted key on miniredis")
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					prefix := fmt.Sprintf("fault-%s-%d", target.Name, n)
					k := keys.For(prefix, faultSession)
					r := keys.ReadyFor(prefix, keys.ReadyShard(faultSession, keys.DefaultReadyShards))
					fc := newFaultClient(client, c.script, prefix, c.plant(k, r))
					s, err := redisstore.New(ctx, fc, redisstore.Config{Prefix: prefix, NoCompaction: c.script != "compact_log"})
					require.NoError(t, err)
					if c.general {
						scripts.SetGeneralOnly(true)
						defer scripts.SetGeneralOnly(false)
					}
					opErr := c.op(ctx, t, s)
					fc.mu.Lock()
					defer fc.mu.Unlock()
					require.NoError(t, fc.plantErr)
					require.True(t, fc.fired, "%s never ran (op error: %v)", c.script, opErr)
					require.NotEmpty(t, fc.before, "the copy found no key (the planted one at least)")
					require.Error(t, fc.err, "%s did not fail with %s", c.script, c.what)
					assert.Equal(t, fc.before, fc.after, "%s failed (%v) after writing", c.script, fc.err)
					// The ready index's scripts and the log rebuild run after
					// the operation committed: their failure is not its.
					if !strings.HasPrefix(c.script, "ready_") && c.script != "compact_log" {
						assert.Error(t, opErr, "the operation running %s", c.script)
					}
					covered[c.script] = true
				})
			}
			t.Run("ready_sync", func(t *testing.T) {
				ctx := context.Background()
				prefix := "fault-" + target.Name + "-sync"
				k := keys.For(prefix, faultSession)
				s, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix})
				require.NoError(t, err)
				_, err = s.Append(ctx, faultSession, []a2redis.Event{event(a2redis.Target{Consumer: "c"})}, redisstore.AppendOptions{})
				require.NoError(t, err)
				require.NoError(t, wrongType(k.Listed(), true)(ctx, client))
				before, err := copyKeys(ctx, client, prefix)
				require.NoError(t, err)
				// As a claim runs it, and as the dead index's repair does
				// (its dead letters recounted: '1').
				for _, recount := range []string{"", "1"} {
					err = scripts.All()["ready_sync"].Lua(false).Exec(ctx, client, []string{k.Count(), k.Sentinel()}, []string{strconv.FormatInt(time.Now().UnixMilli(), 10), recount}).Error()
					require.Error(t, err)
					after, err := copyKeys(ctx, client, prefix)
					require.NoError(t, err)
					assert.Equal(t, before, after, "ready_sync %q failed (%v) after writing", recount, err)
				}
				covered["ready_sync"] = true
			})
			// ready_index with a session's dead-letter state, its dead
			// index planted with the wrong type: run directly, as the
			// first update a store sends is not one (the session's first
			// work comes before its first dead letter).
			t.Run("ready_index/dead", func(t *testing.T) {
				ctx := context.Background()
				prefix := "fault-" + target.Name + "-dead"
				r := keys.ReadyFor(prefix, keys.ReadyShard(faultSession, keys.DefaultReadyShards))
				for _, planted := range []string{r.Dead(), r.DeadCounts()} {
					require.NoError(t, wrongType(planted, planted == r.Dead())(ctx, client))
					before, err := copyKeys(ctx, client, prefix)
					require.NoError(t, err)
					err = scripts.All()["ready_index"].Lua(false).Exec(ctx, client, []string{r.Index(), r.Sentinel()},
						[]string{"", "0", "other", "5", "", "0", "", faultSession, "7", "", "0", "1,100,1,1:c"}).Error()
					require.Error(t, err, "planted %s", planted)
					after, err := copyKeys(ctx, client, prefix)
					require.NoError(t, err)
					assert.Equal(t, before, after, "ready_index failed (%v) after writing", err)
					require.NoError(t, client.Do(ctx, client.B().Del().Key(planted).Build()).Error())
				}
			})
		})
	}
	if !t.Failed() {
		for name := range scripts.All() {
			assert.True(t, covered[name], "no fault case runs script %s", name)
		}
	}
}
