// Command worker runs the worker runtime (package worker): a producer
// appends two customers' orders, and one worker handles three consumers —
// mailer, an event consumer that returns an email.sent event; billing, a
// lane consumer that charges a customer's orders strictly in order (one
// charge is declined once and retried after a backoff, the lane waiting
// behind it); and auditor, a typed log consumer of every order.paid —
// then stops gracefully once everything is handled and prints the logs.
//
//	go run ./examples/worker
//
// It runs on an embedded miniredis (gone when the program ends) unless
// A2REDIS_URL names a real server (redis://host:port). A2REDIS_PREFIX sets
// the key prefix (default "a2-worker-example", apart from the quickstart's
// "a2"); a rerun on a real server appends new orders to the same sessions.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/a2redis/a2redis"
	"github.com/a2redis/a2redis/redisstore"
	"github.com/a2redis/a2redis/worker"
)

// defaultPrefix keeps the example's keys apart from the quickstart's.
const defaultPrefix = "a2-worker-example"

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := run(ctx, os.Stdout)
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker example:", err)
		os.Exit(1)
	}
}

// consumers are the deployment's consumers, declared on every store of the
// prefix (so appends start auditor's typed log cursor).
var consumers = []a2redis.Consumer{
	{Name: "mailer"},
	{Name: "billing"},
	{Name: "auditor", Log: &a2redis.LogSpec{Lane: "audit", Types: []string{"order.paid"}}},
}

// run connects to A2REDIS_URL or an embedded miniredis, appends the orders,
// runs the worker until they are handled, and prints the sessions' logs.
func run(ctx context.Context, out io.Writer) error {
	prefix := os.Getenv("A2REDIS_PREFIX")
	if prefix == "" {
		prefix = defaultPrefix
	}
	serverURL := os.Getenv("A2REDIS_URL")
	if serverURL == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("starting miniredis: %w", err)
		}
		defer mr.Close()
		serverURL = "redis://" + mr.Addr()
		fmt.Fprintln(out, "Using an embedded miniredis (set A2REDIS_URL for a real server)")
	} else {
		fmt.Fprintf(out, "Using %s\n", redact(serverURL))
	}
	client, err := redisstore.Dial(ctx, serverURL)
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer client.Close()
	store, err := redisstore.New(ctx, client, redisstore.Config{Prefix: prefix, Consumers: consumers})
	if err != nil {
		return err
	}

	shop := &shop{out: out, pending: map[string]bool{}}
	for _, customer := range []string{"customer-ada", "customer-bob"} {
		if err := shop.order(ctx, store, customer); err != nil {
			return err
		}
	}
	// The worker runs until every appended head is handled, then stops
	// gracefully: the last handlers' completions are recorded before Run
	// returns.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	shop.done = stop
	if err := startWorker(ctx, store, shop); err != nil {
		return err
	}
	shop.mu.Lock()
	left := len(shop.pending)
	shop.mu.Unlock()
	if left > 0 {
		return fmt.Errorf("the worker stopped with %d heads unhandled", left)
	}
	fmt.Fprintln(out, "worker stopped: every head handled")
	for _, customer := range []string{"customer-ada", "customer-bob"} {
		if err := shop.printLog(context.WithoutCancel(ctx), store, customer); err != nil {
			return err
		}
	}
	return nil
}

// startWorker is the worker of the README's "A worker" section.
func startWorker(ctx context.Context, store *redisstore.Store, shop *shop) error {
	w, err := worker.New(store, worker.Config{Concurrency: 16},
		// An event consumer: the event it returns is appended atomically with its completion.
		worker.Handle("mailer", func(ctx context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
			if err := shop.sendMail(ctx, h); err != nil {
				return nil, err
			}
			return []a2redis.Event{{Type: "email.sent", Payload: h.Payload}}, nil
		}),
		worker.Handle("billing", shop.charge), // a lane consumer: one lane's events at a time, in order
		worker.Handle("auditor", shop.audit),  // a typed log consumer: every order.paid, in order
	)
	if err != nil {
		return err
	}
	return w.Run(ctx) // until ctx is cancelled; then a graceful stop
}

// shop is the example's application: its handlers print what they do,
// and it stops the worker once every head it appended was handled.
type shop struct {
	out     io.Writer
	mu      sync.Mutex
	pending map[string]bool // "<consumer> <session> #<index>"
	done    func()
}

func (s *shop) printf(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format, a...)
}

// handled marks a head handled; the last one stops the worker.
func (s *shop) handled(h a2redis.HeadEvent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, fmt.Sprintf("%s %s #%d", h.Consumer, h.Session, h.Index))
	if len(s.pending) == 0 {
		s.done()
	}
}

// order appends a customer's two orders: each placed order goes to
// mailer and to billing's lane "payments", each payment to the lane (and,
// by its type, to auditor's log cursor).
func (s *shop) order(ctx context.Context, store *redisstore.Store, customer string) error {
	payments := a2redis.Target{Consumer: "billing", Lane: "payments"}
	res, err := store.Append(ctx, customer, []a2redis.Event{
		{Type: "order.placed", Payload: json.RawMessage(`{"order":1,"total":42}`), Targets: []a2redis.Target{{Consumer: "mailer"}, payments}},
		{Type: "order.paid", Payload: json.RawMessage(`{"order":1,"amount":42}`), Targets: []a2redis.Target{payments}},
		{Type: "order.placed", Payload: json.RawMessage(`{"order":2,"total":7}`), Targets: []a2redis.Target{{Consumer: "mailer"}, payments}},
		{Type: "order.paid", Payload: json.RawMessage(`{"order":2,"amount":7}`), Targets: []a2redis.Target{payments}},
	}, redisstore.AppendOptions{})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range res.Events {
		other := "auditor"
		if ev.Type == "order.placed" {
			other = "mailer"
		}
		for _, c := range []string{"billing", other} {
			s.pending[fmt.Sprintf("%s %s #%d", c, customer, ev.Index)] = true
		}
	}
	fmt.Fprintf(s.out, "appended %d events to %s (#%d-#%d)\n", len(res.Events), customer, res.Events[0].Index, res.Events[len(res.Events)-1].Index)
	return nil
}

func (s *shop) sendMail(_ context.Context, h a2redis.HeadEvent) error {
	s.printf("mailer: %s #%d %s %s -> email.sent\n", h.Session, h.Index, h.Type, h.Payload)
	s.handled(h)
	return nil
}

// charge declines ada's second payment once (its first try: no failure
// counted yet), a transient error: the head runs again after the default
// backoff (about a second), and the lane waits behind it.
func (s *shop) charge(_ context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
	if h.Session == "customer-ada" && h.Type == "order.paid" && string(h.Payload) == `{"order":2,"amount":7}` && h.Failures == 0 {
		s.printf("billing: %s #%d %s declined (attempt %d): retried after a backoff\n", h.Session, h.Index, h.Type, h.Attempts)
		return nil, errors.New("card declined")
	}
	s.printf("billing: %s #%d %s (lane %s, attempt %d)\n", h.Session, h.Index, h.Type, h.Lane, h.Attempts)
	s.handled(h)
	return nil, nil
}

func (s *shop) audit(_ context.Context, h a2redis.HeadEvent) ([]a2redis.Event, error) {
	s.printf("auditor: %s #%d %s %s\n", h.Session, h.Index, h.Type, h.Payload)
	s.handled(h)
	return nil, nil
}

// printLog prints a session's events, with the cause of returned ones.
func (s *shop) printLog(ctx context.Context, store *redisstore.Store, session string) error {
	events, err := store.Read(ctx, session, 0, 0)
	if err != nil {
		return err
	}
	s.printf("%s log:\n", session)
	for _, ev := range events {
		cause := ""
		if ev.Cause != nil {
			cause = fmt.Sprintf(" caused by %s #%d", ev.Cause.Consumer, ev.Cause.Index)
		}
		s.printf("  #%d %s%s\n", ev.Index, ev.Type, cause)
	}
	return nil
}

// redact hides a URL's password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "A2REDIS_URL"
	}
	return u.Redacted()
}
