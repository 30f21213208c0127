package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/notify"
	"github.com/a2redis/a2redis/redisstore"
)

type traceKey struct{}

// recorder is an Observer that records what the store reports and takes
// the trace context from a context value.
type recorder struct {
	mu   sync.Mutex
	ops  []redisstore.Operation
	ends []redisstore.OperationEnd
}

func (r *recorder) Begin(ctx context.Context, op redisstore.Operation) (context.Context, func(redisstore.OperationEnd)) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
	return ctx, func(e redisstore.OperationEnd) {
		r.mu.Lock()
		r.ends = append(r.ends, e)
		r.mu.Unlock()
	}
}

func (r *recorder) TraceContext(ctx context.Context) string {
	tc, _ := ctx.Value(traceKey{}).(string)
	return tc
}

func (r *recorder) take() ([]redisstore.Operation, []redisstore.OperationEnd) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops, ends := r.ops, r.ends
	r.ops, r.ends = nil, nil
	return ops, ends
}

const testTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// A traced append stores its trace context with every event: the append's
// result, the log read, a claim's head, a lost-ack replay and a feed (the
// catch-up and the wake-up that follows) all return it; an untraced
// append stores none.
func TestTraceContextIsStoredWithEvents(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		rec := &recorder{}
		store, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: e.prefix, Clock: e.clock.Now, Observer: rec})
		require.NoError(t, err)
		traced := context.WithValue(e.ctx, traceKey{}, testTrace)

		// A single plain event (a fast-path shape) and a targeted batch.
		one, err := store.Append(traced, "s", []a2redis.Event{{ID: "p1", Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, one.Events, 1)
		assert.Equal(t, testTrace, one.Events[0].Trace)
		batch := []a2redis.Event{
			{ID: "a1", Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}},
			{ID: "a2", Type: "u", Targets: []a2redis.Target{{Consumer: "c", Lane: "l"}}},
		}
		res, err := store.Append(traced, "s", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
		require.Len(t, res.Events, 2)
		for _, ev := range res.Events {
			assert.Equal(t, testTrace, ev.Trace)
		}
		// Untraced: nothing stored, whichever path it takes.
		plain, err := store.Append(e.ctx, "s", []a2redis.Event{{ID: "n1", Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.Empty(t, plain.Events[0].Trace)
		long := context.WithValue(e.ctx, traceKey{}, strings.Repeat("x", redisstore.MaxTraceContext+1))
		tooLong, err := store.Append(long, "s", []a2redis.Event{{ID: "n2", Type: "t"}}, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.Empty(t, tooLong.Events[0].Trace)

		got, err := store.Read(e.ctx, "s", 0, 0)
		require.NoError(t, err)
		require.Len(t, got, 5)
		assert.Equal(t, []string{testTrace, testTrace, testTrace, "", ""},
			[]string{got[0].Trace, got[1].Trace, got[2].Trace, got[3].Trace, got[4].Trace})
		assert.Equal(t, one.Events[0], got[0])
		assert.Equal(t, res.Events, got[1:3])
		tail, err := store.ReadTail(e.ctx, "s", 5)
		require.NoError(t, err)
		assert.Equal(t, got, tail)

		// A lost-ack retry replays the stored rows, trace included.
		again, err := store.Append(e.ctx, "s", batch, redisstore.AppendOptions{})
		require.NoError(t, err)
		assert.True(t, again.Replayed)
		assert.Equal(t, res.Events, again.Events)

		claim, err := store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, claim.Heads, 2)
		for _, h := range claim.Heads {
			assert.Equal(t, testTrace, h.Trace, "head %v", h.Ref())
		}
		next, err := store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Sessions: []string{"s"}})
		require.NoError(t, err)
		assert.Empty(t, next.Heads)

		// A feed: the catch-up read, then a traced append after it, which
		// its wake-up announces bare.
		feed := notify.NewFeed(store, notify.FeedOptions{})
		stop := errors.New("stop")
		var fed []a2redis.StoredEvent
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		err = feed.Follow(ctx, "s", 0, func(u notify.Update) error {
			fed = append(fed, u.Events...)
			if len(fed) == 5 {
				go func() {
					_, _ = store.Append(traced, "s", []a2redis.Event{{ID: "f1", Type: "t"}}, redisstore.AppendOptions{})
				}()
			}
			if len(fed) >= 6 {
				return stop
			}
			return nil
		})
		require.ErrorIs(t, err, stop)
		require.Len(t, fed, 6)
		assert.Equal(t, got, fed[:5])
		assert.Equal(t, "f1", fed[5].ID)
		assert.Equal(t, testTrace, fed[5].Trace)
	})
}

// The observer sees every work operation begin and end, with its session
// and counts.
func TestObserverSeesOperations(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		rec := &recorder{}
		store, err := redisstore.New(e.ctx, e.client, redisstore.Config{Prefix: e.prefix, Clock: e.clock.Now, Observer: rec})
		require.NoError(t, err)
		lane := a2redis.Target{Consumer: "c", Lane: "l"}
		_, err = store.Append(e.ctx, "s", []a2redis.Event{
			{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}},
			{Type: "t", Targets: []a2redis.Target{{Consumer: "c"}}},
			{Type: "t", Targets: []a2redis.Target{lane}},
			{Type: "t", Targets: []a2redis.Target{lane}},
		}, redisstore.AppendOptions{})
		require.NoError(t, err)
		claim, err := store.ClaimAvailable(e.ctx, redisstore.ClaimRequest{Session: "s", Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, claim.Heads, 3)
		att := func(h a2redis.HeadEvent) redisstore.Attempt {
			return redisstore.AttemptOf(h)
		}
		var laneHead a2redis.HeadEvent
		var events []a2redis.HeadEvent
		for _, h := range claim.Heads {
			if h.Lane == "l" {
				laneHead = h
			} else {
				events = append(events, h)
			}
		}
		_, err = store.CompleteAttempt(e.ctx, redisstore.CompleteRequest{Session: "s", Head: events[0].Ref(), Attempt: events[0].Attempts})
		require.NoError(t, err)
		_, err = store.FailAttempt(e.ctx, redisstore.FailRequest{Session: "s", Head: events[1].Ref(), Attempt: events[1].Attempts, Error: "boom", MaxFailures: 1})
		require.NoError(t, err)
		cc, err := store.CompleteAndClaim(e.ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: []redisstore.Attempt{att(laneHead)}},
			redisstore.NextClaim{Holder: "w", TTL: time.Minute})
		require.NoError(t, err)
		require.Len(t, cc.Next.Heads, 1)
		_, err = store.Release(e.ctx, redisstore.ReleaseRequest{Session: "s", Attempts: []redisstore.Attempt{att(cc.Next.Heads[0])}})
		require.NoError(t, err)
		next, err := store.ClaimNext(e.ctx, redisstore.ClaimNextRequest{Holder: "w", TTL: time.Minute, Sessions: []string{"s"}})
		require.NoError(t, err)
		require.Len(t, next.Heads, 1)
		done, err := store.CompleteAttempts(e.ctx, redisstore.CompleteAttemptsRequest{Session: "s", Attempts: []redisstore.Attempt{att(next.Heads[0])}})
		require.NoError(t, err)
		require.Len(t, done, 1)

		ops, ends := rec.take()
		assert.Equal(t, []redisstore.Operation{
			{Name: redisstore.OpAppend, Session: "s", Events: 4},
			{Name: redisstore.OpClaim, Session: "s"},
			{Name: redisstore.OpComplete, Session: "s", Events: 1},
			{Name: redisstore.OpFail, Session: "s", Events: 1},
			{Name: redisstore.OpCompleteAndClaim, Session: "s", Events: 1},
			{Name: redisstore.OpRelease, Session: "s", Events: 1},
			{Name: redisstore.OpClaimNext},
			{Name: redisstore.OpComplete, Session: "s", Events: 1},
		}, ops)
		assert.Equal(t, []redisstore.OperationEnd{
			{Session: "s", Count: 4},
			{Session: "s", Count: 3},
			{Session: "s", Count: 1},
			{Session: "s", Count: 1, DeadLettered: 1},
			{Session: "s", Count: 1, Claimed: 1},
			{Session: "s", Count: 1},
			{Session: "s", Count: 1},
			{Session: "s", Count: 1},
		}, ends)

		// A refused call reports its error.
		_, err = store.Append(e.ctx, "s", []a2redis.Event{{Type: a2redis.ClearEventType}}, redisstore.AppendOptions{})
		require.ErrorIs(t, err, a2redis.ErrInvalidArgument)
		_, ends = rec.take()
		require.Len(t, ends, 1)
		assert.ErrorIs(t, ends[0].Err, a2redis.ErrInvalidArgument)
	})
}
