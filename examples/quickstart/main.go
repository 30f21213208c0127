// Command quickstart walks through a2redis step by step: it appends events
// to a session, reads them back, lets an event consumer, a lane consumer and
// a typed log consumer handle them, dead-letters a failing handler and
// redrives it, clears and reclaims a finished session, and leaves its
// session with work in every state for the operator CLI: a dead letter, a
// claim its worker abandoned, a log cursor waiting. It ends by printing the
// a2redis-inspect commands that show them.
//
//	go run ./examples/quickstart
//
// It runs on an embedded miniredis (gone when the program ends) unless
// A2REDIS_URL names a real server (redis://host:port), where the session
// stays for a2redis-inspect. A2REDIS_PREFIX sets the key prefix (default
// "a2"). The session is always "order-42"; a rerun on a real server first
// clears and reclaims the last run's session. Nothing else is touched.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/rueidis"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
)

// The session the walk-through leaves for a2redis-inspect, and the finished
// one it clears and reclaims. The README's walkthrough names them.
const (
	session         = "order-42"
	finishedSession = "order-41"
)

// defaultURL is a2redis-inspect's default --url.
const defaultURL = "redis://127.0.0.1:6379"

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := start(ctx, os.Stdout)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// start connects to A2REDIS_URL, or to an embedded miniredis, runs the
// walk-through there and prints the a2redis-inspect commands to look at
// what it left.
func start(ctx context.Context, w io.Writer) error {
	prefix := os.Getenv("A2REDIS_PREFIX")
	if prefix == "" {
		prefix = redisstore.DefaultPrefix
	}
	serverURL := os.Getenv("A2REDIS_URL")
	embedded := serverURL == ""
	if embedded {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("starting miniredis: %w", err)
		}
		defer mr.Close()
		serverURL = "redis://" + mr.Addr()
		fmt.Fprintln(w, "Using an embedded miniredis (set A2REDIS_URL for a real server)")
	} else {
		fmt.Fprintf(w, "Using %s\n", redact(serverURL))
	}
	// Dial sets up the client as the store needs it on every kind of
	// server (miniredis, Redis, Valkey, Upstash, a Cluster).
	client, err := redisstore.Dial(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connecting to A2REDIS_URL: %w", err)
	}
	defer client.Close()
	dead, err := run(ctx, w, client, prefix)
	if err != nil {
		return err
	}
	printCommands(w, embedded, serverURL, prefix, dead)
	return nil
}

// The consumers this deployment serves. auditor reads the whole log through
// a log cursor, but only the payment events.
var (
	mailer   = a2redis.Consumer{Name: "mailer"}
	billing  = a2redis.Consumer{Name: "billing"}
	flaky    = a2redis.Consumer{Name: "flaky"}
	auditor  = a2redis.Consumer{Name: "auditor", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"order.paid", "order.refunded"}}}
	everyone = []a2redis.Consumer{mailer, billing, flaky, auditor}
)

// maxFailures dead-letters a head at its third failure (5 is the usual
// production value; see redisstore.FailRequest.MaxFailures).
const maxFailures = 3

// ttl is the lease of every claim (see redisstore.ClaimRequest.TTL).
const ttl = 30 * time.Second

// demo is one walk-through: a store, its session and where to print.
type demo struct {
	store   *redisstore.Store
	session string
	w       io.Writer
	// explained is set once the busy answer has been explained.
	explained bool
	// dead is the index of the dead letter leaveWork leaves.
	dead int64
}

// run walks through the store's main flows on session, printing each step,
// and returns the index of the dead letter it leaves.
func run(ctx context.Context, w io.Writer, client rueidis.Client, prefix string) (dead int64, err error) {
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix})
	if err != nil {
		return 0, err
	}
	d := &demo{store: store, session: session, w: w}
	d.printf("Session %q on prefix %q\n", session, prefix)
	if err := d.clearLastRun(ctx); err != nil {
		return 0, err
	}
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
		{"5. Typed log consumer: only the payment events", d.worker(auditor, succeed)},
		// Each failure is counted; at MaxFailures the head is dead-lettered
		// and its cursor stops there until a redrive.
		{"6. A failing handler is dead-lettered", d.worker(flaky, fail)},
		{"7. Dead letters, redrive", d.redrive},
		{"8. The redriven head runs again", d.worker(flaky, succeed)},
		{"9. A finished session: clear, then reclaim", d.clearAndReclaim},
		{"10. Work left for a2redis-inspect", d.leaveWork},
		{"11. Cursors", d.cursors},
	}
	for _, step := range steps {
		d.printf("\n== %s\n", step.title)
		if err := step.do(ctx); err != nil {
			return 0, fmt.Errorf("step %q: %w", step.title, err)
		}
	}
	return d.dead, nil
}

// clearLastRun clears a session a previous run left (a real server keeps
// it), so the ids this run appends are new again. Indexes keep counting.
func (d *demo) clearLastRun(ctx context.Context) error {
	b, err := d.store.Bounds(ctx, d.session)
	if err != nil || b.Head == b.ClearIndex {
		return err
	}
	d.printf("%s holds a previous run (events up to #%d): clearing and reclaiming it first\n", d.session, b.Head)
	if _, err := d.store.Clear(ctx, d.session, redisstore.ClearOptions{}); err != nil {
		return err
	}
	_, err = d.store.Reclaim(ctx, d.session)
	return err
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

func (d *demo) clearAndReclaim(ctx context.Context) error {
	// order-41 is done with: a clear appends a marker event, and
	// everything below it is a past lifetime (no head survives, reads
	// start at the marker, its ids are free again).
	old := &demo{store: d.store, session: finishedSession, w: d.w}
	if _, err := d.store.Append(ctx, old.session, []a2redis.Event{
		{ID: "placed", Type: "order.placed", Targets: []a2redis.Target{{Consumer: "mailer"}}},
		{ID: "delivered", Type: "order.delivered"},
	}, redisstore.AppendOptions{}); err != nil {
		return err
	}
	cleared, err := d.store.Clear(ctx, old.session, redisstore.ClearOptions{})
	if err != nil {
		return err
	}
	d.printf("%s cleared %v: clear marker at #%d\n", old.session, cleared.Cleared, cleared.ClearIndex)
	// Reclaim later deletes the past lifetime's entries and what it left.
	reclaimed, err := d.store.Reclaim(ctx, old.session)
	if err != nil {
		return err
	}
	d.printf("reclaimed %d entries, done %v\n", reclaimed.Deleted, reclaimed.Done)
	return old.printLog(ctx)
}

// leaveWork appends a refund and leaves each consumer's part of it in a
// state a2redis-inspect shows: flaky dead-letters it, a worker claims
// billing's head and never comes back, auditor's head waits for a worker.
func (d *demo) leaveWork(ctx context.Context) error {
	res, err := d.store.Append(ctx, d.session, []a2redis.Event{{
		ID: "refunded", Type: "order.refunded", Payload: json.RawMessage(`{"amount":42}`),
		Targets: []a2redis.Target{{Consumer: "billing", Lane: "payments"}, {Consumer: "flaky"}},
	}}, redisstore.AppendOptions{Consumers: everyone})
	if err != nil {
		return err
	}
	refund := res.Events[0].Index
	d.dead = refund
	d.printf("appended #%d order.refunded\n", refund)
	if err := d.worker(flaky, fail)(ctx); err != nil {
		return err
	}
	c, err := d.claim(ctx, "worker-1", billing)
	if err != nil {
		return err
	}
	for _, h := range c.Heads {
		d.printf("billing: claimed #%d %s, attempt %d, and worker-1 stops here: the claim lapses at %s\n",
			h.Index, h.Type, h.Attempts, h.ClaimExpiresAt.UTC().Format(time.RFC3339))
	}
	d.printf("auditor: #%d waits for a worker\n", refund)
	return nil
}

func (d *demo) cursors(ctx context.Context) error {
	// Lane and log cursors keep their position; an event cursor is listed
	// while it has a head.
	cursors, err := d.store.Cursors(ctx, d.session)
	if err != nil {
		return err
	}
	d.printf("%-8s %-5s %-9s %-8s %-4s %-8s %-8s %s\n", "CONSUMER", "KIND", "LANE", "POSITION", "HEAD", "ATTEMPTS", "FAILURES", "STATE")
	for _, c := range cursors {
		d.printf("%-8s %-5s %-9s %-8d %-4d %-8d %-8d %s\n", c.Consumer, c.Kind, orDash(c.Lane), c.Position, c.Head, c.Attempts, c.Failures, state(c))
	}
	d.printf(`
POSITION is the last index a cursor moved past, HEAD the index it must
handle next (0: none, it is caught up). ATTEMPTS counts the claims of that
head, FAILURES the failed ones (a lapsed claim counts too); at %d failures
the head is dead-lettered. An event cursor is listed only while it has a
head: mailer's is done.
`, maxFailures)
	return nil
}

// state says what a cursor waits for.
func state(c a2redis.Cursor) string {
	switch {
	case c.Head == 0:
		return "idle"
	case c.DeadLettered():
		return "dead: " + c.LastError
	case c.Holder != "":
		return "claimed by " + c.Holder
	}
	return "ready"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// claim asks for consumer's runnable heads on behalf of holder.
func (d *demo) claim(ctx context.Context, holder string, consumer a2redis.Consumer) (redisstore.ClaimResult, error) {
	return d.store.ClaimAvailable(ctx, redisstore.ClaimRequest{
		Session: d.session, Holder: holder, TTL: ttl, MaxFailures: maxFailures,
		Consumers: []a2redis.Consumer{consumer}, // serve only this consumer
	})
}

// succeed is a handler that returns no events.
func succeed(a2redis.HeadEvent) ([]a2redis.Event, error) { return nil, nil }

// fail is a handler that always fails.
func fail(a2redis.HeadEvent) ([]a2redis.Event, error) {
	return nil, errors.New("smtp: connection refused")
}

// worker returns a worker loop: it claims consumer's heads as worker-1 and
// runs handle on each, completing the attempt (with the events handle
// returns) or failing it, until nothing is left to claim.
func (d *demo) worker(consumer a2redis.Consumer, handle func(a2redis.HeadEvent) ([]a2redis.Event, error)) func(context.Context) error {
	return func(ctx context.Context) error {
		for {
			c, err := d.claim(ctx, "worker-1", consumer)
			if err != nil || c.Outcome != redisstore.Claimed {
				return err
			}
			for _, h := range c.Heads {
				busy, err := d.askAsWorker2(ctx, consumer)
				if err != nil {
					return err
				}
				d.printf("%s: claimed #%d %s, attempt %d -> ", consumer.Name, h.Index, h.Type, h.Attempts)
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
					d.printf("%s", busy)
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
				d.printf("%s", busy)
			}
		}
	}
}

// askAsWorker2 shows, on the first claim, what a second worker asking for
// the same consumer's heads while worker-1 holds one gets: busy, since a
// claimed head is never handed out twice. It returns the line to print.
func (d *demo) askAsWorker2(ctx context.Context, consumer a2redis.Consumer) (string, error) {
	if d.explained {
		return "", nil
	}
	d.explained = true
	other, err := d.claim(ctx, "worker-2", consumer)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("  meanwhile worker-2 asked for %s's heads too and was told %q: a claimed head is never\n"+
		"  handed out twice; RetryAt (%s) says when the lease ends\n", consumer.Name, other.Outcome, other.RetryAt.UTC().Format(time.TimeOnly)), nil
}

// printLog prints the session's current lifetime.
func (d *demo) printLog(ctx context.Context) error {
	events, err := d.store.Read(ctx, d.session, 0, 0)
	if err != nil {
		return err
	}
	d.printf("%s log (%d events):\n", d.session, len(events))
	for _, e := range events {
		d.printf("  #%d %-13s %s\n", e.Index, e.Type, e.Payload)
	}
	return nil
}

func (d *demo) printf(format string, a ...any) { fmt.Fprintf(d.w, format, a...) }

// printCommands prints the a2redis-inspect commands that show what the
// walk-through left, as the README's walkthrough runs them.
func printCommands(w io.Writer, embedded bool, serverURL, prefix string, dead int64) {
	fmt.Fprintln(w, "\n== Look at it with a2redis-inspect")
	var flags string
	if !embedded && serverURL != defaultURL {
		flags += " --url " + redact(serverURL)
	}
	if prefix != redisstore.DefaultPrefix {
		flags += " --prefix " + prefix
	}
	for _, cmd := range walkthrough(dead) {
		fmt.Fprintf(w, "  go run ./cmd/a2redis-inspect%s %s\n", flags, cmd)
	}
	if embedded {
		fmt.Fprintln(w, "(The embedded miniredis ends with this program. On a real server the session stays:\n"+
			"  A2REDIS_URL="+defaultURL+" go run ./examples/quickstart)")
	}
}

// walkthrough returns the a2redis-inspect commands (without the program and
// the global flags) that show what the walk-through left, in the order the
// README runs them. The redrive names flaky's dead letter at index dead (5
// on a first run).
func walkthrough(dead int64) []string {
	return []string{
		"sessions",
		"cursors " + session,
		"dead " + session,
		"log " + session,
		"tail -f " + session,
		fmt.Sprintf("redrive %s flaky %d --retry", session, dead),
	}
}

// redact hides the password of a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "PASSWORD")
	}
	return u.String()
}
