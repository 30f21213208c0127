package workertest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/worker"
	"github.com/a2redis/a2redis/worker/workertest"
)

// exampleTB stands in for the *testing.T a test passes: it prints a failure
// and runs the cleanups when the example ends.
type exampleTB struct{ cleanups []func() }

func (*exampleTB) Helper() {}
func (*exampleTB) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
func (tb *exampleTB) Cleanup(f func()) { tb.cleanups = append(tb.cleanups, f) }
func (tb *exampleTB) done() {
	for i := len(tb.cleanups) - 1; i >= 0; i-- {
		tb.cleanups[i]()
	}
}

// A handler that returns an event: the harness runs it through the worker
// runtime and reports its outcome and the event as stored, with its cause.
func Example() {
	t := &exampleTB{} // in a test: the test's *testing.T
	defer t.done()
	ctx := context.Background()

	sendMail := func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
		return []a2redis.Event{{Type: "email.sent", Payload: head.Payload}}, nil
	}
	h := workertest.New(t, "mailer", sendMail)
	res := h.Work(ctx, a2redis.Event{Type: "order.placed", Payload: []byte(`{"order":1}`)})

	o := res.Outcome()
	fmt.Println(o.Kind, o.Head.Index)
	for _, ev := range res.Events() {
		fmt.Println(ev.Index, ev.Type, string(ev.Payload), ev.Cause.Consumer, ev.Cause.Index)
	}
	// Output:
	// completed 1
	// 2 email.sent {"order":1} mailer 1
}

// Retries on the test clock: a failed head is held for its backoff, and
// Resume moves the clock past the hold and runs it again at once.
func ExampleHarness_Resume() {
	t := &exampleTB{}
	defer t.done()
	ctx := context.Background()

	tries := 0
	flaky := func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
		tries++
		if tries < 3 {
			return nil, errors.New("gateway timeout")
		}
		return nil, nil
	}
	h := workertest.New(t, "billing", flaky,
		workertest.WithLane("payments"),
		workertest.WithHandlerOptions(worker.WithBackoff(func(failures int64, err error) time.Duration {
			return time.Duration(failures) * time.Second
		})))

	o := h.Work(ctx, a2redis.Event{Type: "charge"}).Outcome()
	fmt.Println(o.Kind, o.Failures, o.RetryAfter, o.Err)
	o = h.Resume(ctx).Outcome()
	fmt.Println(o.Kind, o.Failures, o.RetryAfter)
	o = h.Resume(ctx).Outcome()
	fmt.Println(o.Kind, o.Head.Attempts)
	// Output:
	// failed 1 1s gateway timeout
	// failed 2 2s
	// completed 3
}

// Settle runs the held heads until each is completed or dead-lettered.
func ExampleHarness_Settle() {
	t := &exampleTB{}
	defer t.done()
	ctx := context.Background()

	broken := func(ctx context.Context, head a2redis.HeadEvent) ([]a2redis.Event, error) {
		return nil, errors.New("no such customer")
	}
	h := workertest.New(t, "crm", broken, workertest.WithConfig(worker.Config{MaxFailures: 3}))
	h.Work(ctx, a2redis.Event{Type: "customer.updated"})
	res := h.Settle(ctx, 10)
	fmt.Println(res.Kinds(), res.Outcomes[len(res.Outcomes)-1].Failures)
	// Output:
	// [failed dead_lettered] 3
}
