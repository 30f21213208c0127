package redisstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/keys"
	"github.com/a2redis/a2redis/redisstore"
)

// The limits of docs/limits.md, each at the limit (accepted, and the
// scripts finish on every target) and one past it (ErrInvalidArgument, and
// nothing written).

// refusedUnwritten checks that err is an ErrInvalidArgument and that
// session still ends at head.
func refusedUnwritten(t *testing.T, e *env, err error, session string, head int64) {
	t.Helper()
	require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
	b, err := e.store.Bounds(e.ctx, session)
	require.NoError(t, err)
	assert.Equal(t, head, b.Head, "nothing was written to %s", session)
}

// targetsFor returns n targets: event-cursor targets of consumers
// <prefix>0…, or lane targets of consumer c in lanes <prefix>0… when lanes
// is set.
func targetsFor(prefix string, n int, lanes bool) []a2redis.Target {
	out := make([]a2redis.Target, n)
	for i := range out {
		if lanes {
			out[i] = a2redis.Target{Consumer: "c", Lane: fmt.Sprintf("%s%d", prefix, i)}
		} else {
			out[i] = a2redis.Target{Consumer: fmt.Sprintf("%s%d", prefix, i)}
		}
	}
	return out
}

// claimAndCompleteAll claims every head of session (in calls of MaxBatch)
// and completes them, and checks that there were want.
func claimAndCompleteAll(t *testing.T, e *env, session string, want int) {
	t.Helper()
	got := 0
	for {
		c := claim(t, e, redisstore.ClaimRequest{Session: session, Limit: redisstore.DefaultMaxBatch})
		if c.Outcome != redisstore.Claimed {
			break
		}
		completeAll(t, e, session, c.Heads)
		got += len(c.Heads)
	}
	assert.Equal(t, want, got, "heads claimed and completed in %s", session)
}

// Targets per event: an event with MaxTargetsPerEvent event-cursor targets
// (append_targeted), lane targets (the general append) or both, appended
// and returned by a completion (a caused append); one more is refused.
func TestLimitTargetsPerEvent(t *testing.T) {
	eachAtLimits(t, func(t *testing.T, e *env) {
		const n = a2redis.MaxTargetsPerEvent
		mixed := append(targetsFor("m", n/2, false), targetsFor("n", n-n/2, true)...)
		for _, tc := range []struct {
			name    string
			targets []a2redis.Target
		}{
			{"event", targetsFor("c", n, false)},
			{"lane", targetsFor("l", n, true)},
			{"mixed", mixed},
		} {
			session := "append-" + tc.name
			_, err := e.store.Append(e.ctx, session, []a2redis.Event{{Type: "t", Targets: tc.targets}}, redisstore.AppendOptions{})
			require.NoError(t, err, tc.name)
			claimAndCompleteAll(t, e, session, n)

			_, err = e.store.Append(e.ctx, session, []a2redis.Event{{Type: "t", Targets: append(tc.targets, a2redis.Target{Consumer: "one-more"})}}, redisstore.AppendOptions{})
			refusedUnwritten(t, e, err, session, 1)

			// Returned by a completion.
			session = "complete-" + tc.name
			_, err = e.store.Append(e.ctx, session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "x"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
			c := claim(t, e, redisstore.ClaimRequest{Session: session})
			require.Len(t, c.Heads, 1)
			h := c.Heads[0]
			_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts,
				Events: []a2redis.Event{{Type: "t", Targets: append(tc.targets, a2redis.Target{Consumer: "one-more"})}}})
			refusedUnwritten(t, e, err, session, 1)
			r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts,
				Events: []a2redis.Event{{Type: "t", Targets: tc.targets}}})
			require.NoError(t, err, tc.name)
			require.Equal(t, redisstore.Completed, r.Outcome)
			claimAndCompleteAll(t, e, session, n)
		}
	})
}

// Targets per batch: MaxBatchTargets over a batch — MaxBatchTargets /
// MaxTargetsPerEvent events of MaxTargetsPerEvent event-cursor targets (a
// plain append), or of lane targets (the general append), and returned by
// a completion; one more is refused.
func TestLimitTargetsPerBatch(t *testing.T) {
	eachAtLimits(t, func(t *testing.T, e *env) {
		const per = a2redis.MaxTargetsPerEvent
		const events = a2redis.MaxBatchTargets / per
		batch := func(lanes bool, extra int) []a2redis.Event {
			out := make([]a2redis.Event, events, events+1)
			for i := range out {
				out[i] = a2redis.Event{Type: "t", Targets: targetsFor(fmt.Sprintf("e%d-", i), per, lanes)}
			}
			if extra > 0 {
				out = append(out, a2redis.Event{Type: "t", Targets: targetsFor("extra", extra, lanes)})
			}
			return out
		}
		for _, lanes := range []bool{false, true} {
			session := fmt.Sprintf("append-lanes-%v", lanes)
			_, err := e.store.Append(e.ctx, session, batch(lanes, 1), redisstore.AppendOptions{})
			refusedUnwritten(t, e, err, session, 0)
			_, err = e.store.Append(e.ctx, session, batch(lanes, 0), redisstore.AppendOptions{})
			require.NoError(t, err, "lanes %v", lanes)
			claimAndCompleteAll(t, e, session, a2redis.MaxBatchTargets)

			session = fmt.Sprintf("complete-lanes-%v", lanes)
			_, err = e.store.Append(e.ctx, session, []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "x"}}}}, redisstore.AppendOptions{})
			require.NoError(t, err)
			c := claim(t, e, redisstore.ClaimRequest{Session: session})
			require.Len(t, c.Heads, 1)
			h := c.Heads[0]
			_, err = e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Events: batch(lanes, 1)})
			refusedUnwritten(t, e, err, session, 1)
			r, err := e.store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: session, Head: h.Ref(), Attempt: h.Attempts, Events: batch(lanes, 0)})
			require.NoError(t, err, "lanes %v", lanes)
			require.Equal(t, redisstore.Completed, r.Outcome)
			claimAndCompleteAll(t, e, session, a2redis.MaxBatchTargets)
		}
	})
}

// Heads per claim, renewal, completion and release, and excluded heads:
// MaxBatch is accepted (TestLimitsEventHeadsInOneChunk and
// TestLimitsLaneHeadsInOneChunk run claims, renewals and completions of
// MaxBatch heads), one more is refused before anything is sent; so is a
// Config.MaxBatch above a2redis.MaxBatch or a ClaimLimit above MaxBatch.
func TestLimitHeadsPerCall(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		_, err := e.store.Append(e.ctx, "s", []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		over := redisstore.DefaultMaxBatch + 1
		_, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Limit: over})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		_, err = e.store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Limit: over})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		exclude := make([]a2redis.HeadRef, over)
		for i := range exclude {
			exclude[i] = a2redis.HeadRef{Consumer: "c", Index: int64(i + 2)}
		}
		_, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Exclude: exclude})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		// Exactly MaxBatch excluded heads are fine.
		c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute, Exclude: exclude[:over-1]})
		require.NoError(t, err)
		require.Len(t, c.Heads, 1, "the one head is not among the excluded")
		head := c.Heads[0]

		claims := make([]redisstore.Attempt, over)
		completions := make([]redisstore.Attempt, over)
		for i := range claims {
			ref := a2redis.HeadRef{Consumer: "c", Index: int64(i + 1)}
			claims[i] = redisstore.Attempt{Head: ref, Attempt: 1}
			completions[i] = redisstore.Attempt{Head: ref, Attempt: 1}
		}
		_, err = e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w", TTL: time.Minute, Claims: claims})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		_, err = e.store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: completions})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		_, err = e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: completions})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		// The claim is untouched: renewing it alone works, with MaxBatch
		// claims named (the others lapsed: never claimed).
		r, err := e.store.RenewClaims(e.ctx, redisstore.RenewRequest{Session: "s", Holder: "w", TTL: time.Minute, Claims: claims[:over-1]})
		require.NoError(t, err)
		assert.Equal(t, []a2redis.HeadRef{head.Ref()}, r.Renewed)
		assert.Len(t, r.Lapsed, over-2)

		for _, cfg := range []redisstore.Config{
			{Prefix: e.prefix, MaxBatch: a2redis.MaxBatch + 1},
			{Prefix: e.prefix, ClaimLimit: a2redis.MaxBatch + 1},
			{Prefix: e.prefix, MaxBatch: 100, ClaimLimit: 101},
		} {
			_, err := redisstore.New(e.ctx, e.client, cfg)
			require.ErrorIs(t, err, a2redis.ErrInvalidArgument, "%+v", cfg)
		}
		_, err = redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: e.prefix, MaxBatch: a2redis.MaxBatch, ClaimLimit: a2redis.MaxBatch})
		require.NoError(t, err)
	})
}

// Names: a session id, consumer, holder, lane, event type and event id of
// MaxNameBytes work (TestLongNames takes 64 KiB consumers and lanes through
// every operation); one byte more is refused.
func TestLimitNameBytes(t *testing.T) {
	eachAtLimits(t, func(t *testing.T, e *env) {
		long := strings.Repeat("n", a2redis.MaxNameBytes)
		over := long + "n"
		ok := func(session, consumer, lane, typ, id string) error {
			_, err := e.store.Append(e.ctx, session, []a2redis.Event{{ID: id, Type: typ, Targets: []a2redis.Target{{Consumer: consumer, Lane: lane}}}}, redisstore.AppendOptions{})
			return err
		}
		require.NoError(t, ok(long, long, long, long, long))
		c, err := e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: long, Holder: long, TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, c.Heads, 1)
		assert.Equal(t, long, c.Heads[0].Type)
		assert.Equal(t, long, c.Heads[0].ID)

		// A typed log of that type: its index key spells the type in hex
		// (128 KiB), and its next head is found there.
		logged := []a2redis.Consumer{{Name: "g", Log: &a2redis.LogSpec{Lane: "l", Types: []string{long}}}}
		_, err = e.store.Append(e.ctx, "typed", []a2redis.Event{{Type: long}, {Type: "t"}, {Type: long}}, redisstore.AppendOptions{Consumers: logged})
		require.NoError(t, err)
		c, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "typed", Holder: "w", TTL: time.Minute, Consumers: logged})
		require.NoError(t, err)
		require.Len(t, c.Heads, 1)
		next, err := e.store.CompleteAndClaim(e.ctx, redisstore.CompleteAttemptsRequest{Session: "typed", Attempts: []redisstore.Attempt{{Head: c.Heads[0].Ref(), Attempt: 1}}, Consumers: logged},
			redisstore.NextClaim{Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, next.Next.Heads, 1)
		assert.Equal(t, int64(3), next.Next.Heads[0].Index, "the log's next event of the long type")
		members, err := e.client.Do(e.ctx, e.client.B().Zcard().Key(keys.For(e.prefix, "typed").Type(long)).Build()).AsInt64()
		require.NoError(t, err)
		assert.Equal(t, int64(2), members, "the type's index is the key keys.Session.Type names")

		require.ErrorIs(t, ok(over, "c", "", "t", ""), a2redis.ErrInvalidArgument, "session")
		for name, err := range map[string]error{
			"consumer": ok("s", over, "", "t", ""),
			"lane":     ok("s", "c", over, "t", ""),
			"type":     ok("s", "c", "", over, ""),
			"id":       ok("s", "c", "", "t", over),
		} {
			refusedUnwritten(t, e, err, "s", 0)
			_ = name
		}
		_, err = e.store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: long, Holder: over, TTL: time.Minute})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument, "holder")
	})
}

// jsonOfSize returns a JSON string of exactly n bytes.
func jsonOfSize(n int) []byte {
	return []byte(`"` + strings.Repeat("p", n-2) + `"`)
}

// Payloads and batch bytes: a payload of MaxPayloadBytes, and a batch of
// MaxBatchBytes (four events of ~4 MiB), are written and read back; one
// byte more is refused.
func TestLimitPayloadAndBatchBytes(t *testing.T) {
	eachAtLimits(t, func(t *testing.T, e *env) {
		_, err := e.store.Append(e.ctx, "p", []a2redis.Event{{Type: "t", Payload: jsonOfSize(a2redis.MaxPayloadBytes + 1)}}, redisstore.AppendOptions{})
		refusedUnwritten(t, e, err, "p", 0)
		res, err := e.store.Append(e.ctx, "p", []a2redis.Event{{Type: "t", Payload: jsonOfSize(a2redis.MaxPayloadBytes), Targets: []a2redis.Target{{Consumer: "c"}}}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, res.Events, 1)
		read, err := e.store.Read(e.ctx, "p", 0, 1)
		require.NoError(t, err)
		require.Len(t, read, 1)
		assert.Len(t, read[0].Payload, a2redis.MaxPayloadBytes)

		// Four events with one-byte ids and types: 4 × (2 + payload) bytes.
		batch := func(extra int) []a2redis.Event {
			per := a2redis.MaxBatchBytes/4 - 2
			out := make([]a2redis.Event, 4)
			for i := range out {
				out[i] = a2redis.Event{ID: string(rune('a' + i)), Type: "t", Payload: jsonOfSize(per)}
			}
			out[3].Payload = jsonOfSize(per + extra)
			return out
		}
		_, err = e.store.Append(e.ctx, "b", batch(1), redisstore.AppendOptions{})
		refusedUnwritten(t, e, err, "b", 0)
		res, err = e.store.Append(e.ctx, "b", batch(0), redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, res.Events, 4)
		read, err = e.store.Read(e.ctx, "b", 0, 4)
		require.NoError(t, err)
		require.Len(t, read, 4)
		assert.Len(t, read[3].Payload, a2redis.MaxBatchBytes/4-2)
	})
}

// A batch the server rejects (here: the session's log key holds a string,
// so the XADD fails with WRONGTYPE) is a BatchError wrapping ErrRejected
// that does not ask for a resend; one cut by the caller's context asks for
// one, and the resend with its ids succeeds.
func TestBatchErrorSaysWhetherToSendAgain(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		log := keysFor(e, "wrong").Log()
		require.NoError(t, e.client.Do(e.ctx, e.client.B().Set().Key(log).Value("not a stream").Build()).Error())
		for _, events := range [][]a2redis.Event{
			{{Type: "t"}},
			{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}},
			{{Type: "t", Targets: []a2redis.Target{{Consumer: "c", Lane: "l"}}}},
		} {
			_, err := e.store.Append(e.ctx, "wrong", events, redisstore.AppendOptions{})
			var be *a2redis.BatchError
			require.ErrorAs(t, err, &be)
			assert.ErrorIs(t, err, a2redis.ErrRejected)
			assert.False(t, be.Retryable())
			assert.NotContains(t, err.Error(), "send it again")
			assert.Contains(t, err.Error(), "sending it again fails the same way")
		}

		ctx, cancel := context.WithCancel(e.ctx)
		cancel()
		events := []a2redis.Event{{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}}}
		_, err := e.store.Append(ctx, "fine", events, redisstore.AppendOptions{})
		var be *a2redis.BatchError
		require.ErrorAs(t, err, &be)
		assert.NotErrorIs(t, err, a2redis.ErrRejected)
		assert.True(t, be.Retryable())
		assert.Contains(t, err.Error(), "send it again")
		res, err := e.store.Append(e.ctx, "fine", be.WithIDs(events), redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, res.Events, 1)
		assert.Equal(t, be.IDs[0], res.Events[0].ID)
	})
}

// Releases: MaxBatch claimed heads given back in one call; presence writes
// of MaxBatch fields and snapshot calls of MaxBatch writes (with MaxBatch
// pins) go in; one more of each is refused.
func TestLimitReleasePresenceSnapshots(t *testing.T) {
	eachAtLimits(t, func(t *testing.T, e *env) {
		n := redisstore.DefaultMaxBatch
		targets := targetsFor("c", 10, false)
		events := make([]a2redis.Event, n/10)
		for i := range events {
			events[i] = a2redis.Event{Type: "t", Targets: targets}
		}
		_, err := e.store.Append(e.ctx, "s", events, redisstore.AppendOptions{})
		require.NoError(t, err)
		c := claim(t, e, redisstore.ClaimRequest{Limit: n})
		require.Len(t, c.Heads, n)
		attempts := completions(c.Heads)
		_, err = e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: append(attempts, redisstore.Attempt{Head: a2redis.HeadRef{Consumer: "x", Index: 1}, Attempt: 1})})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		released, err := e.store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: attempts})
		require.NoError(t, err)
		require.Len(t, released, n)
		for i, r := range released {
			require.Equal(t, redisstore.Released, r, "Attempts[%d]", i)
		}
		again := claim(t, e, redisstore.ClaimRequest{Limit: n})
		require.Len(t, again.Heads, n, "every released head is claimable again")

		values := make(map[string]json.RawMessage, n+1)
		for i := range n {
			values[fmt.Sprintf("f%d", i)] = json.RawMessage(`1`)
		}
		w := redisstore.PresenceWrite{Participant: "p", Values: values, At: e.clock.Now(), TTL: time.Minute}
		_, err = e.store.PresenceSet(e.ctx, "s", w)
		require.NoError(t, err)
		values["one-more"] = json.RawMessage(`1`)
		_, err = e.store.PresenceSet(e.ctx, "s", w)
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)

		pins := make([]a2redis.HeadRef, n)
		for i := range pins {
			pins[i] = again.Heads[i].Ref()
		}
		writes := make([]redisstore.SnapshotWrite, n)
		for i := range writes {
			writes[i] = redisstore.SnapshotWrite{Index: int64(i), State: json.RawMessage(`{}`)}
		}
		writes[0].Pins = pins
		require.NoError(t, e.store.PutSnapshots(e.ctx, "s", "r", writes))
		writes[1].Pins = pins[:1]
		require.ErrorIs(t, e.store.PutSnapshots(e.ctx, "s", "r2", writes), a2redis.ErrInvalidArgument, "one pin more")
		writes[1].Pins = nil
		require.ErrorIs(t, e.store.PutSnapshots(e.ctx, "s", "r2", append(writes, redisstore.SnapshotWrite{Index: 1, State: json.RawMessage(`{}`)})), a2redis.ErrInvalidArgument, "one write more")
	})
}
