package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/internal/redistest"
	"github.com/a2redis/a2redis/worker"
	"github.com/a2redis/a2redis/worker/workertest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// each runs fn on every target: the harness's own embedded miniredis, and
// a harness on a spawned redis-server and on a spawned cluster.
func each(t *testing.T, fn func(t *testing.T, opts ...workertest.Option)) {
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		fn(t)
	})
	for _, tg := range redistest.Targets[1:] {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, workertest.WithClient(tg.Client(t)))
		})
	}
}

func payload(v any) json.RawMessage {
	raw, _ := json.Marshal(v)
	return raw
}

func TestCompletedWithReturnedEvents(t *testing.T) {
	each(t, func(t *testing.T, opts ...workertest.Option) {
		ctx := context.Background()
		h := workertest.New(t, "mailer", func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
			return []a2redis.Event{{Type: "email.sent", Payload: head.Payload}}, nil
		}, opts...)
		res := h.Work(ctx, a2redis.Event{Type: "order.placed", Payload: payload(map[string]int{"order": 7})})
		o := res.Outcome()
		require.Equal(t, worker.OutcomeCompleted, o.Kind)
		require.Len(t, res.Events(), 1)
		ev := res.Events()[0]
		require.Equal(t, "email.sent", ev.Type)
		require.JSONEq(t, `{"order":7}`, string(ev.Payload))
		require.NotNil(t, ev.Cause)
		require.Equal(t, a2redis.Cause{Consumer: "mailer", Index: 1, Attempt: 1}, *ev.Cause)
		require.Empty(t, h.Open())
		// The returned event is in the log, after the head's event.
		read, err := h.Store().Read(ctx, h.Session(), 0, 10)
		require.NoError(t, err)
		require.Len(t, read, 2)
		require.Equal(t, "email.sent", read[1].Type)
	})
}

func TestFailedThenRetried(t *testing.T) {
	each(t, func(t *testing.T, opts ...workertest.Option) {
		ctx := context.Background()
		var runs atomic.Int64
		boom := errors.New("smtp down")
		opts = append(opts, workertest.WithHandlerOptions(worker.WithBackoff(func(failures int64, err error) time.Duration {
			return time.Duration(failures) * time.Minute
		})))
		h := workertest.New(t, "mailer", func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
			if runs.Add(1) <= 2 {
				return nil, boom
			}
			return nil, nil
		}, opts...)
		first := h.Work(ctx, a2redis.Event{Type: "order.placed"}).Outcome()
		require.Equal(t, worker.OutcomeFailed, first.Kind)
		require.ErrorIs(t, first.Err, boom)
		require.Equal(t, int64(1), first.Failures)
		require.Equal(t, time.Minute, first.RetryAfter)
		require.Len(t, h.Open(), 1)

		second := h.Resume(ctx).Outcome()
		require.Equal(t, worker.OutcomeFailed, second.Kind)
		require.Equal(t, int64(2), second.Failures)
		require.Equal(t, 2*time.Minute, second.RetryAfter)
		require.Equal(t, int64(2), second.Head.Attempts)

		third := h.Resume(ctx).Outcome()
		require.Equal(t, worker.OutcomeCompleted, third.Kind)
		require.Equal(t, int64(3), runs.Load())
		require.Empty(t, h.Open())
	})
}

func TestPermanentSnoozeAndPanic(t *testing.T) {
	each(t, func(t *testing.T, opts ...workertest.Option) {
		ctx := context.Background()
		h := workertest.New(t, "jobs", func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
			switch head.Type {
			case "bad":
				return nil, worker.Permanent(errors.New("malformed"))
			case "later":
				if head.Attempts == 1 {
					return nil, worker.Snooze(30 * time.Second)
				}
				return nil, nil
			case "panic":
				panic("nil map")
			}
			return nil, nil
		}, opts...)
		res := h.Work(ctx, a2redis.Event{Type: "bad"}, a2redis.Event{Type: "later"}, a2redis.Event{Type: "panic"})
		require.Len(t, res.Outcomes, 3)
		byType := map[string]worker.Outcome{}
		for _, o := range res.Outcomes {
			byType[o.Head.Type] = o
		}
		require.Equal(t, worker.OutcomeDeadLettered, byType["bad"].Kind)
		require.ErrorIs(t, byType["bad"].Err, worker.ErrPermanent)
		require.Equal(t, worker.OutcomeSnoozed, byType["later"].Kind)
		require.Equal(t, 30*time.Second, byType["later"].RetryAfter)
		require.Equal(t, worker.OutcomeFailed, byType["panic"].Kind)
		var pe *worker.PanicError
		require.ErrorAs(t, byType["panic"].Err, &pe)
		require.Equal(t, "nil map", pe.Value)

		// The dead letter is the store's too.
		dead, err := h.Store().DeadLetters(ctx, h.Session())
		require.NoError(t, err)
		require.Len(t, dead, 1)
		require.Equal(t, int64(1), dead[0].Index)

		// Resume runs the snoozed and the panicking head again.
		again := h.Resume(ctx)
		kinds := map[string]worker.OutcomeKind{}
		for _, o := range again.Outcomes {
			kinds[o.Head.Type] = o.Kind
		}
		require.Equal(t, map[string]worker.OutcomeKind{"later": worker.OutcomeCompleted, "panic": worker.OutcomeFailed}, kinds)
	})
}

func TestSettleDeadLettersAtMaxFailures(t *testing.T) {
	each(t, func(t *testing.T, opts ...workertest.Option) {
		ctx := context.Background()
		opts = append(opts, workertest.WithConfig(worker.Config{MaxFailures: 3}))
		var runs atomic.Int64
		h := workertest.New(t, "jobs", func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
			runs.Add(1)
			return nil, errors.New("always")
		}, opts...)
		first := h.Work(ctx, a2redis.Event{Type: "x"})
		require.Equal(t, []worker.OutcomeKind{worker.OutcomeFailed}, first.Kinds())
		rest := h.Settle(ctx, 5)
		require.Equal(t, []worker.OutcomeKind{worker.OutcomeFailed, worker.OutcomeDeadLettered}, rest.Kinds())
		require.Equal(t, int64(3), rest.Outcomes[1].Failures)
		require.Equal(t, int64(3), runs.Load())
	})
}

func TestLaneWaitsBehindAFailedHead(t *testing.T) {
	each(t, func(t *testing.T, opts ...workertest.Option) {
		ctx := context.Background()
		var order []int64
		opts = append(opts, workertest.WithLane("payments"))
		h := workertest.New(t, "billing", func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
			order = append(order, head.Index)
			if head.Index == 2 && head.Attempts == 1 {
				return nil, errors.New("card declined")
			}
			return nil, nil
		}, opts...)
		events := make([]a2redis.Event, 4)
		for i := range events {
			events[i] = a2redis.Event{Type: "charge", Payload: payload(i)}
		}
		res := h.Work(ctx, events...)
		require.Equal(t, []worker.OutcomeKind{worker.OutcomeCompleted, worker.OutcomeFailed}, res.Kinds())
		require.Equal(t, a2redis.LaneCursor, res.Outcomes[0].Head.Kind)
		require.Len(t, h.Open(), 3, "head 2 is held and 3 and 4 wait behind it")
		again := h.Resume(ctx)
		require.Equal(t, []worker.OutcomeKind{worker.OutcomeCompleted, worker.OutcomeCompleted, worker.OutcomeCompleted}, again.Kinds())
		require.Equal(t, []int64{1, 2, 2, 3, 4}, order)
		for i, o := range again.Outcomes {
			require.Equal(t, int64(i+2), o.Head.Index, strconv.Itoa(i))
		}
	})
}

func TestTypedLogConsumer(t *testing.T) {
	each(t, func(t *testing.T, opts ...workertest.Option) {
		ctx := context.Background()
		var seen []string
		opts = append(opts, workertest.WithLog(a2redis.LogSpec{Lane: "audit", Types: []string{"order.paid"}}))
		h := workertest.New(t, "auditor", func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
			seen = append(seen, string(head.Payload))
			return nil, nil
		}, opts...)
		res := h.Work(ctx,
			a2redis.Event{Type: "order.placed", Payload: payload(1)},
			a2redis.Event{Type: "order.paid", Payload: payload(1)},
			a2redis.Event{Type: "order.paid", Payload: payload(2)},
		)
		require.Equal(t, []worker.OutcomeKind{worker.OutcomeCompleted, worker.OutcomeCompleted}, res.Kinds())
		require.Equal(t, a2redis.LogCursor, res.Outcomes[0].Head.Kind)
		require.Equal(t, []string{"1", "2"}, seen)
	})
}
