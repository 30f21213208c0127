// Command quickstart walks through a2redis step by step: it appends events
// to a session, reads them back, lets an event consumer, a lane consumer and
// a typed log consumer handle them, dead-letters a failing handler and
// redrives it, shows the cursors, then clears and reclaims the session.
//
//	go run ./examples/quickstart
//
// It runs on an embedded miniredis unless A2REDIS_URL names a real server
// (redis://host:port); A2REDIS_PREFIX sets the key prefix (default "a2").
// On a real server each run uses a new session id; nothing is flushed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := start(ctx, os.Stdout)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// start connects to A2REDIS_URL, or to an embedded miniredis, and runs the
// walk-through there.
func start(ctx context.Context, w io.Writer) error {
	prefix, session := os.Getenv("A2REDIS_PREFIX"), "order-1"
	if prefix == "" {
		prefix = redisstore.DefaultPrefix
	}
	var opt rueidis.ClientOption
	if url := os.Getenv("A2REDIS_URL"); url != "" {
		var err error
		if opt, err = rueidis.ParseURL(url); err != nil {
			return fmt.Errorf("parsing A2REDIS_URL: %w", err)
		}
		// A real server keeps its sessions: a fresh id per run avoids
		// replaying the last run's events.
		session = "order-" + time.Now().UTC().Format("20060102-150405.000000")
		fmt.Fprintf(w, "Using %v\n", opt.InitAddress)
	} else {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("starting miniredis: %w", err)
		}
		defer mr.Close()
		// miniredis answers CLUSTER SLOTS: make rueidis skip cluster mode.
		opt = rueidis.ClientOption{InitAddress: []string{mr.Addr()}, ForceSingleClient: true}
		fmt.Fprintln(w, "Using an embedded miniredis (set A2REDIS_URL for a real server)")
	}
	opt.DisableCache = true // the store needs no client-side caching (and miniredis refuses it)
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer client.Close()
	return run(ctx, w, client, prefix, session)
}

// The consumers this deployment serves. auditor reads the whole log through
// a log cursor, but only events of type order.paid.
var (
	mailer   = a2redis.Consumer{Name: "mailer"}
	billing  = a2redis.Consumer{Name: "billing"}
	flaky    = a2redis.Consumer{Name: "flaky"}
	auditor  = a2redis.Consumer{Name: "auditor", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"order.paid"}}}
	everyone = []a2redis.Consumer{mailer, billing, flaky, auditor}
)

// maxFailures dead-letters a head at its third failure.
const maxFailures = 3

// demo is one walk-through: a store, a session and where to print.
type demo struct {
	store   *redisstore.Store
	session string
	w       io.Writer
}

// run walks through the store's main flows on session, printing each step.
func run(ctx context.Context, w io.Writer, client rueidis.Client, prefix, session string) error {
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix})
	if err != nil {
		return err
	}
	d := &demo{store: store, session: session, w: w}
	d.printf("Session %q on prefix %q\n", session, prefix)
	steps := []struct {
		title string
		do    func(context.Context) error
	}{
		{"1. Append", d.appendEvents},
		{"2. Read", d.printLog},
		// Completing moves the cursor past the head and appends the
		// handler's events, caused by this attempt, in one atomic step.
		{"3. Event consumer: claim, complete, return a follow-up", d.worker(mailer, func(a2redis.HeadEvent) ([]a2redis.Event, error) {
			return []a2redis.Event{{ID: "mailed", Type: "email.sent", Payload: json.RawMessage(`{"to":"ada"}`)}}, nil
		})},
		{"4. Lane consumer: strictly in order", d.worker(billing, succeed)},
		{"5. Typed log consumer: only order.paid", d.worker(auditor, succeed)},
		// Each failure is counted; at MaxFailures the head is dead-lettered
		// and its cursor stops there until a redrive.
		{"6. A failing handler is dead-lettered", d.worker(flaky, func(a2redis.HeadEvent) ([]a2redis.Event, error) {
			return nil, errors.New("smtp: connection refused")
		})},
		{"7. Dead letters, redrive", d.redrive},
		{"8. Cursors", d.cursors},
		{"9. The redriven head runs again", d.worker(flaky, succeed)},
		{"10. Clear, then reclaim", d.clearAndReclaim},
	}
	for _, step := range steps {
		d.printf("\n== %s\n", step.title)
		if err := step.do(ctx); err != nil {
			return fmt.Errorf("step %q: %w", step.title, err)
		}
	}
	return nil
}

func (d *demo) appendEvents(ctx context.Context) error {
	// One atomic batch, each event with a dense index. mailer and flaky get
	// an event cursor each (handled concurrently); billing's lane "payments"
	// takes three events in order. Declaring the consumers starts auditor's
	// log cursor, since the batch carries an order.paid.
	lane := a2redis.Target{Consumer: "billing", Lane: "payments"}
	res, err := d.store.Append(ctx, d.session, []a2redis.Event{
		{ID: "placed", Type: "order.placed", Payload: json.RawMessage(`{"total":42}`), Targets: []a2redis.Target{{Consumer: "mailer"}, lane}},
		{ID: "paid", Type: "order.paid", Payload: json.RawMessage(`{"amount":42}`), Targets: []a2redis.Target{lane}},
		{ID: "shipped", Type: "order.shipped", Targets: []a2redis.Target{lane, {Consumer: "flaky"}}},
	}, redisstore.AppendOptions{Consumers: everyone})
	if err != nil {
		return err
	}
	for _, e := range res.Events {
		d.printf("appended #%d %s (id %q)\n", e.Index, e.Type, e.ID)
	}
	d.printf("pending work: %v\n", res.HasPending)
	return nil
}

func (d *demo) redrive(ctx context.Context) error {
	dead, err := d.store.DeadLetters(ctx, d.session)
	if err != nil {
		return err
	}
	for _, h := range dead {
		d.printf("dead letter: %s #%d %s, %d failures, last error %q\n", h.Consumer, h.Index, h.Type, h.Failures, h.LastError)
		// Retry clears the failures and makes the head runnable again;
		// Skip would move the cursor past it instead.
		rr, err := d.store.Redrive(ctx, redisstore.RedriveRequest{
			Session: d.session, Consumer: h.Consumer, Index: h.Index, Action: redisstore.Retry, Consumers: everyone,
		})
		if err != nil {
			return err
		}
		d.printf("retry %s #%d: redriven %v, pending work %v\n", h.Consumer, h.Index, rr.Redriven, rr.HasPending)
	}
	return nil
}

func (d *demo) cursors(ctx context.Context) error {
	// Lane and log cursors keep their position; an event cursor is listed
	// while it has a head.
	cursors, err := d.store.Cursors(ctx, d.session)
	for _, c := range cursors {
		d.printf("%-7s %-5s lane %-10q position %d, head %d (attempts %d, failures %d)\n",
			c.Consumer, c.Kind, c.Lane, c.Position, c.Head, c.Attempts, c.Failures)
	}
	return err
}

func (d *demo) clearAndReclaim(ctx context.Context) error {
	// A clear appends a marker event: everything below it is a past
	// lifetime (no head survives, reads start at the marker).
	cleared, err := d.store.Clear(ctx, d.session, redisstore.ClearOptions{})
	if err != nil {
		return err
	}
	d.printf("cleared %v: clear marker at #%d\n", cleared.Cleared, cleared.ClearIndex)
	if err := d.printLog(ctx); err != nil {
		return err
	}
	// Reclaim later deletes the past lifetime's entries and what it left.
	reclaimed, err := d.store.Reclaim(ctx, d.session)
	if err != nil {
		return err
	}
	d.printf("reclaimed %d entries, done %v\n", reclaimed.Deleted, reclaimed.Done)
	return d.printLog(ctx)
}

// claim asks for consumer's runnable heads on behalf of holder.
func (d *demo) claim(ctx context.Context, holder string, consumer a2redis.Consumer) (redisstore.ClaimResult, error) {
	return d.store.ClaimAvailable(ctx, redisstore.ClaimRequest{
		Session: d.session, Holder: holder, TTL: 30 * time.Second,
		Consumers: []a2redis.Consumer{consumer}, // serve only this consumer
	})
}

// succeed is a handler that returns no events.
func succeed(a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil }

// worker returns a worker loop: it claims consumer's heads as worker-1 and runs
// handle on each, completing the attempt (with the events handle returns)
// or failing it, until nothing is left to claim. While worker-1 holds a
// head, worker-2 asks too and finds it busy: a claimed head is never handed
// out twice, and a lane's next event waits behind it.
func (d *demo) worker(consumer a2redis.Consumer, handle func(a2redis.HeadEvent) ([]a2redis.Event, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		for {
			c, err := d.claim(ctx, "worker-1", consumer)
			if err != nil || c.Outcome != redisstore.Claimed {
				return err
			}
			for _, h := range c.Heads {
				other, err := d.claim(ctx, "worker-2", consumer)
				if err != nil {
					return err
				}
				d.printf("%s: claimed #%d %s, attempt %d (worker-2: %s) -> ", consumer.Name, h.Index, h.Type, h.Attempts, other.Outcome)
				events, failure := handle(h)
				if failure != nil {
					// RetryAfter could also hold the head back for a while.
					f, err := d.store.FailAttempt(ctx, redisstore.FailRequest{
						Session: d.session, Head: h.Ref(), Attempt: h.Attempts, Error: failure.Error(), MaxFailures: maxFailures,
					})
					if err != nil {
						return err
					}
					d.printf("%s (%d/%d failures)\n", f.Outcome, f.Failures, maxFailures)
					continue
				}
				done, err := d.store.CompleteAttempt(ctx, redisstore.CompleteRequest{
					Session: d.session, Head: h.Ref(), Attempt: h.Attempts, Events: events, Consumers: everyone,
				})
				if err != nil {
					return err
				}
				d.printf("%s\n", done.Outcome)
				for _, e := range done.Events {
					d.printf("  follow-up #%d %s caused by %s #%d\n", e.Index, e.Type, e.Cause.Consumer, e.Cause.Index)
				}
			}
		}
	}
}

// printLog prints the session's current lifetime.
func (d *demo) printLog(ctx context.Context) error {
	events, err := d.store.Read(ctx, d.session, 0, 0)
	if err != nil {
		return err
	}
	d.printf("log (%d events):\n", len(events))
	for _, e := range events {
		d.printf("  #%d %-13s %s\n", e.Index, e.Type, e.Payload)
	}
	return nil
}

func (d *demo) printf(format string, a ...any) { fmt.Fprintf(d.w, format, a...) }
